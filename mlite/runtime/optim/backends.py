"""The lite runtime's side of the optimizer backend entries (:data:`mlite.options.optimizers.BACKENDS` names these
functions by dotted path): shard the model the backend's way and build the algorithm's optimizer over it.

Each function is ``f(runtime, model, expert_names, optimizer_class) -> optimizer``; ``optimizer_class`` is the
algorithm's runtime class for the backend (:func:`mlite.options.optimizers.runtime_class`).
"""

from __future__ import annotations

from typing import Any

import torch

from ..fsdp import experts_own_unit, shard_model

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _shard(rt: Any, model) -> None:
    """``fully_shard`` of the model over the runtime's dense and expert meshes (the units :mod:`mlite.mesh.fsdp_units`
    decides), as fsdp2 and mfsdp both shard it."""
    shard_model(
        model,
        rt.dense_mesh,
        rt.expert_mesh,
        rt.param_dtype,
        expert_divide_factor=rt.pstate.dp_cp,
        own_expert_units=experts_own_unit(rt.pstate),
    )


def fsdp2(rt: Any, model, experts: set[str], cls):
    """PyTorch ``fully_shard`` over DP x CP (dense) and EDP (experts); the optimizer runs on the local shards."""
    _shard(rt, model)
    if rt.applied.tp is not None:
        rt.applied.tp.bind(model)
    return cls(model.named_parameters(), rt.cfg.optimizer, expert_names=experts, device=rt.device)


def dist_opt(rt: Any, model, experts: set[str], cls):
    """Megatron-Core DDP buffers (:mod:`mlite.runtime.ddp`, kept as ``rt.ddp``); the optimizer runs on this rank's
    shard of them (the whole buffers without the distributed optimizer)."""
    from ..ddp import DDPBuffers

    oc = rt.cfg.optimizer
    rt.ddp = DDPBuffers(
        model,
        expert_names=experts,
        pstate=rt.pstate,
        grad_dtype=_DTYPES[oc.main_grads_dtype],
        distributed=oc.use_distributed_optimizer,
        tp=rt.applied.tp,
    )
    if rt.applied.tp is not None:
        rt.applied.tp.bind(model)
    if getattr(cls, "needs_buffers", False):  # Muon: whole matrices are summed over each buffer's group
        if rt.pstate.tp > 1:
            from ...errors import MliteError

            raise MliteError(
                f"tp: the lite runtime's muon orthogonalises whole matrices gathered over data parallelism only (tp "
                f"{rt.pstate.tp}); use --tp 1, or --optimizer-algorithm adam for a TP run"
            )
        return cls(rt.ddp.pieces, oc, device=rt.device, buffers=rt.ddp.buffers)
    return cls(rt.ddp.pieces, oc, device=rt.device)


def mfsdp(rt: Any, model, experts: set[str], cls):
    """Megatron-FSDP's storage on FSDP2 (:mod:`mlite.runtime.optim.mfsdp`): the sharded parameters held in fp32
    (``offload_fraction < 1``; FSDP2 gathers them in the compute dtype) or in the compute dtype (full offload: the
    shard mirror), fp32 ``main_grad`` shards fed by FSDP2's reduce-scatter, the optimizer over both."""
    from ...options.rules import mfsdp_lite_mesh

    mfsdp_lite_mesh("mfsdp", rt.pstate.tp, rt.pstate.ep)
    if rt.cfg.optimizer.fraction < 1.0:
        with torch.no_grad():
            for p in model.parameters():
                p.data = p.data.float()  # the fp32 parameter shard (exact: widening)
    _shard(rt, model)
    opt = cls(model.named_parameters(), rt.cfg.optimizer, expert_names=experts, device=rt.device)
    opt.install_grad_hooks(model)
    return opt
