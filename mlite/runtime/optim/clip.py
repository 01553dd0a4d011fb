"""Global gradient norm over FSDP2 shards, Megatron's ``num_zeros``, and the clipping coefficient.

Every rank holds a disjoint shard of every gradient (FSDP2 ``Shard(0)``, padding excluded), so the global L2 norm is
``sqrt(sum over groups of all_reduce_sum(local sum of squares))``: dense parameters reduced over the dense FSDP group
(DP x CP), expert parameters over the expert-data-parallel group (EDP). The local part is one multi-tensor
``torch._foreach_norm`` over the gradient shards (fp32 accumulation, one pass over the gradients, deterministic),
whose per-tensor norms are squared and summed in fp64. ``num_zeros`` counts gradient elements equal to zero, summed
the same way (Megatron logs it as ``num zeros``): the optimizer step counts them inside its update pass
(:meth:`~mlite.runtime.optim.optimizer.ShardedAdamW.step`); :func:`local_zeros` is the separate pass for when no update
runs. Clipping is Megatron's: ``coef = clip_grad / (norm + 1e-6)``, applied only when ``coef < 1``; the runtime
applies it inside the fp32 update (the bf16 gradients are not rewritten).

dist_opt (:mod:`mlite.runtime.ddp`) sums the same way over the shards of the reduced gradient buffers; without the
distributed optimizer a group may be :data:`LOCAL`: every rank already holds those gradients whole, nothing is summed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.distributed as dist

LOCAL = "local"
"""Group marker: the local sum is the global one (no all-reduce; ``None`` means the default group, the world)."""


def _reduce(t: torch.Tensor, group) -> None:
    if group is not LOCAL and dist.is_initialized() and dist.get_world_size(group) > 1:
        dist.all_reduce(t, group=group)


def local_sq(grads: Iterable[torch.Tensor | None], device) -> torch.Tensor:
    """Sum of squares (float64 scalar on ``device``) over local gradient shards; None and empty add nothing."""
    gs = [g for g in grads if g is not None and g.numel() > 0]
    acc = torch.zeros((), dtype=torch.float64, device=device)
    by_dev: dict = {}
    for g in gs:
        by_dev.setdefault((g.device, g.dtype), []).append(g)
    for ts in by_dev.values():
        norms = torch._foreach_norm(ts, 2, dtype=torch.float32)
        acc += torch.stack(norms).to(device=device, dtype=torch.float64).square().sum()
    return acc


def local_zeros(grads: Iterable[torch.Tensor | None], device) -> torch.Tensor:
    """Count of exactly-zero elements (int64 scalar on ``device``) over local gradient shards."""
    acc = torch.zeros((), dtype=torch.int64, device=device)
    for g in grads:
        if g is not None and g.numel() > 0:
            acc += (g == 0).sum().to(device)
    return acc


def global_norm(groups: list[tuple[list[torch.Tensor | None], dist.ProcessGroup | None]], device) -> float:
    """Global L2 norm from ``[(local grad shards, process group), ...]`` (one host sync)."""
    parts = []
    for grads, group in groups:
        acc = local_sq(grads, device)
        _reduce(acc, group)
        parts.append(acc)
    return math.sqrt(float(torch.stack(parts).sum())) if parts else 0.0  # sqrt keeps inf and nan


def global_zeros(counts: list[tuple[torch.Tensor | int, dist.ProcessGroup | None]], device) -> int:
    """Sum of local zero counts ``[(count, process group), ...]`` over their groups."""
    total = 0
    for c, group in counts:
        t = torch.as_tensor(c, dtype=torch.int64).to(device).reshape(())
        _reduce(t, group)
        total += int(t)
    return total


def global_norm_and_zeros(
    groups: list[tuple[list[torch.Tensor | None], dist.ProcessGroup | None]], device
) -> tuple[float, int]:
    """Global L2 norm and zero count from ``[(local grad shards, process group), ...]`` (two passes)."""
    groups = [(list(g), grp) for g, grp in groups]
    zeros = global_zeros([(local_zeros(g, device), grp) for g, grp in groups], device)
    return global_norm(groups, device), zeros


def clip_coefficient(norm: float, clip_grad: float | None) -> float:
    """Megatron's clip factor: ``clip_grad / (norm + 1e-6)`` when below 1, else 1 (also when clipping is off)."""
    if not clip_grad or not math.isfinite(norm):
        return 1.0
    coef = clip_grad / (norm + 1.0e-6)
    return coef if coef < 1.0 else 1.0
