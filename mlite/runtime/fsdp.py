"""FSDP2 sharding of a lite model over the run's meshes (pure data parallelism on one node).

Which meshes: :func:`mlite.mesh.build_device_mesh` gives a dense mesh ("pp", "dp", "cp", "tp") and an expert mesh
("pp", "edp", "ep", "etp"); dense parameters are sharded over ``dense["dp_cp"]`` and the ``experts`` modules over
``expert["edp"]``. The lite runtime implements ``tp = pp = vpp = cp = ep = etp = 1`` only, so both are the full world
(EDP = DP); :func:`check_lite_parallel` rejects anything else with a clear :class:`~mlite.errors.MliteError`.

How (mirrors mlite's fsdp2 backend):

* ``fully_shard`` each ``experts`` module (EDP mesh), then each decoder block of ``model.blocks`` (the FSDP units),
  then the root (embedding, final norm, lm_head).
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

Memory per rank: parameter and gradient shards = (2 + 2) x N / world bytes for bf16, plus transient unsharded
parameters and gradients of the FSDP units being all-gathered / reduce-scattered.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn

from ..errors import MliteError


def check_lite_parallel(parallel) -> None:
    """Raise MliteError for any model-parallel axis the lite runtime does not implement."""
    for name in ("tp", "pp", "vpp", "cp", "ep"):
        v = getattr(parallel, name)
        if v != 1:
            raise MliteError(f"parallel.{name}={v}: the lite runtime implements pure FSDP2 data parallelism "
                             f"(tp = pp = vpp = cp = ep = etp = 1); the real mlite implements {name} > 1 on GPUs")
    etp = getattr(parallel, "etp", None)
    if etp not in (None, 1):
        raise MliteError(f"parallel.etp={etp}: the lite runtime implements etp = 1 only; the real mlite implements "
                         "etp > 1 on GPUs")
    if getattr(parallel, "pp_layout", None):
        raise MliteError("parallel.pp_layout: pipeline layouts need pp > 1, which the lite runtime does not "
                         "implement; the real mlite does on GPUs")


def build_meshes(parallel, world_size: int, device_type: str):
    """``(dense FSDP mesh, expert FSDP mesh)``: 1-D meshes named ``dp_cp`` and ``edp``."""
    check_lite_parallel(parallel)
    from ..mesh import build_device_mesh

    meshes = build_device_mesh(parallel, world_size, device_type)
    with warnings.catch_warnings():  # torch warns that slicing a flattened dim will change; the result is right today
        warnings.simplefilter("ignore", UserWarning)
        return meshes.dense["dp_cp"], meshes.expert["edp"]


def expert_modules(model: nn.Module) -> list[nn.Module]:
    """The model's ``experts`` submodules (``model.expert_modules()`` if it has one)."""
    fn = getattr(model, "expert_modules", None)
    mods = list(fn()) if callable(fn) else []
    return [m for m in mods if any(True for _ in m.parameters())]


def expert_param_names(model: nn.Module) -> set[str]:
    """Names (as in ``model.named_parameters()``) of parameters held by expert modules."""
    ids = {id(p) for m in expert_modules(model) for p in m.parameters()}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def shard_model(model: nn.Module, dense_mesh, expert_mesh, param_dtype: torch.dtype) -> nn.Module:
    """Apply FSDP2 in place (experts, blocks, root) and return the model."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32, cast_forward_inputs=False)
    for m in expert_modules(model):
        fully_shard(m, mesh=expert_mesh, mp_policy=mp, reshard_after_forward=True)
    for block in getattr(model, "blocks", None) or []:
        fully_shard(block, mesh=dense_mesh, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mesh=dense_mesh, mp_policy=mp, reshard_after_forward=False)
    if callable(getattr(model, "loss", None)):
        register_fsdp_forward_method(model, "loss")
    return model
