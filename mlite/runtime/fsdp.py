"""FSDP2 sharding of a lite model over the run's meshes (one node; tp, cp and ep from :mod:`mlite.runtime.parallel`).

Which meshes: :func:`mlite.mesh.build_device_mesh` gives a dense mesh ("pp", "dp", "cp", "tp") and an expert mesh
("pp", "edp", "ep", "etp"); dense parameters are sharded over ``dense["dp_cp"]`` (DP x CP) and the ``experts``
modules (this EP rank's experts only) over ``expert["edp"]``. :func:`check_lite_parallel` rejects pp, vpp and
etp > 1 with a clear :class:`~mlite.errors.MliteError`.

How (mirrors mlite's fsdp2 backend):

* ``fully_shard`` each decoder block of ``model.blocks`` (the FSDP units), then the root (embedding, final norm,
  lm_head). The ``experts`` modules are units of their own on the EDP mesh (sharded first, inside their block's
  unit) only where the EDP groups differ from the DP x CP groups (EP > 1, or TP > 1 with EP = 1); where they are
  the same groups (EP = TP = 1, and EP = TP) the block's unit holds the experts too: one all-gather and one
  reduce-scatter per block instead of two, half the FSDP2 hooks and copy-in/copy-out (issue 31). The rule is
  :func:`mlite.mesh.fsdp_units.experts_share_block_unit`, the one the memory estimator's unit gather calls.
* ``MixedPrecisionPolicy(param_dtype=<run dtype>, reduce_dtype=float32)``: the sharded parameters keep the dtype the
  model was built in (bf16 on GPU), the all-gathered compute copy is the same dtype, gradients are reduce-scattered in
  fp32 and FSDP2 casts the reduced shard back to the parameter dtype, so the stored sharded gradient is bf16 (2 B).
* ``cast_forward_inputs=False``: inputs are token ids / PackedBatches (nothing to cast; FSDP2's cast would rebuild
  the PackedBatch dataclass).
* ``reshard_after_forward=True`` for the blocks (ZeRO-3: one unit's unsharded parameters alive at a time, plus
  FSDP2's prefetch of the next), False for the root (its parameters are needed again right away by the loss).
* Every micro-batch reduce-scatters its gradients and FSDP2 accumulates the shards in the parameter dtype.
* Methods the runtime calls besides ``forward`` (``loss``) are registered with ``register_fsdp_forward_method`` so that
  they unshard the root's parameters like ``forward`` does.

Memory per rank: parameter and gradient shards = (2 + 2) x (N_dense / (DP x CP) + N_expert / EP / EDP) bytes
for bf16 (N_dense per TP rank), plus transient unsharded
parameters and gradients of the FSDP units being all-gathered / reduce-scattered.
"""

from __future__ import annotations

import torch
from torch import nn


def check_lite_parallel(parallel) -> None:
    """Raise MliteError for any parallel axis the lite runtime does not implement (pp, vpp, etp > 1)."""
    from .parallel.state import check_mesh

    check_mesh(parallel)


def build_meshes(parallel, world_size: int, rank: int, device_type: str):
    """The run's :class:`~mlite.runtime.parallel.ParallelState` (meshes, coordinates, groups)."""
    from .parallel import ParallelState

    return ParallelState.build(parallel, world_size, rank, device_type)


def expert_modules(model: nn.Module) -> list[nn.Module]:
    """The model's ``experts`` submodules (``model.expert_modules()`` if it has one)."""
    fn = getattr(model, "expert_modules", None)
    mods = list(fn()) if callable(fn) else []
    return [m for m in mods if any(True for _ in m.parameters())]


def expert_param_names(model: nn.Module) -> set[str]:
    """Names (as in ``model.named_parameters()``) of parameters held by expert modules."""
    ids = {id(p) for m in expert_modules(model) for p in m.parameters()}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def experts_own_unit(pstate) -> bool:
    """The ``experts`` modules are FSDP2 units of their own (the EDP groups are not the DP x CP groups)."""
    from ..mesh import RankLayout
    from ..mesh.fsdp_units import experts_share_block_unit

    return not experts_share_block_unit(RankLayout.of(pstate.parallel, dp=pstate.dp, edp=pstate.edp))


def shard_model(
    model: nn.Module,
    dense_mesh,
    expert_mesh,
    param_dtype: torch.dtype,
    expert_divide_factor: float | None = None,
    *,
    own_expert_units: bool = True,
) -> nn.Module:
    """Apply FSDP2 in place (experts where ``own_expert_units``, blocks, root) and return the model.
    ``expert_divide_factor``: what the expert gradients are divided by after their reduce-scatter over EDP (default
    EDP, FSDP2's average); under EP it is DP x CP, the dense factor, because every expert gradient already sums the
    tokens of its whole EP group. ``own_expert_units=False`` (:func:`experts_own_unit` is False): the blocks'
    units hold the experts, sharded over ``dense_mesh``, which must then have ``expert_mesh``'s ranks."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32, cast_forward_inputs=False)
    if not own_expert_units and expert_modules(model):
        if expert_mesh.mesh.tolist() != dense_mesh.mesh.tolist():
            raise RuntimeError(
                f"shard_model: the experts share their block's unit only over the same ranks (expert mesh "
                f"{expert_mesh.mesh.tolist()}, dense mesh {dense_mesh.mesh.tolist()})"
            )
        if expert_divide_factor is not None and expert_divide_factor != dense_mesh.size():
            raise RuntimeError(f"shard_model: expert divide factor {expert_divide_factor} != DP x CP")
    for e in expert_modules(model) if own_expert_units else []:
        m = fully_shard(e, mesh=expert_mesh, mp_policy=mp, reshard_after_forward=True)  # the same module, now FSDP
        if expert_divide_factor is not None and expert_divide_factor != expert_mesh.size():
            m.set_gradient_divide_factor(float(expert_divide_factor))
            if expert_mesh.size() > 1:
                m.set_force_sum_reduction_for_comms(True)  # SUM, then divide (gloo has no PREMUL_SUM)
    for block in getattr(model, "blocks", None) or []:
        fully_shard(block, mesh=dense_mesh, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mesh=dense_mesh, mp_policy=mp, reshard_after_forward=False)
    if callable(getattr(model, "loss", None)):
        register_fsdp_forward_method(model, "loss")
    return model
