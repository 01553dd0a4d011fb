"""Global gradient norm over FSDP2 shards, Megatron's ``num_zeros``, and the clipping coefficient.

Every rank holds a disjoint shard of every gradient (FSDP2 ``Shard(0)``, padding excluded), so the global L2 norm is
``sqrt(sum over groups of all_reduce_sum(local sum of squares))``: dense parameters reduced over the dense FSDP group
(DP x CP), expert parameters over the expert-data-parallel group (EDP). The local part is one multi-tensor
``torch._foreach_norm`` over the gradient shards (fp32 accumulation, one pass over the gradients, deterministic),
whose per-tensor norms are squared and summed in fp64. ``num_zeros`` counts gradient elements equal to zero, summed
the same way (Megatron logs it as ``num zeros``): the optimizer step counts them inside its update pass
(:meth:`~mlite.runtime.optim.optimizer.ShardedAdamW.step`, also when it skips the update); :func:`local_zeros` is
the separate pass. Clipping is Megatron's: ``coef = clip_grad / (norm + 1e-6)``, applied only when ``coef < 1``; the
runtime applies it inside the fp32 update (the bf16 gradients are not rewritten). :func:`global_norm_tensor` and
:func:`clip_scale` compute the norm and the coefficient on the device (the same float64 operations as the host forms),
so the optimizer step is queued without waiting for them.

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
    return local_sq_lists([grads], device)[0]


def local_sq_lists(lists: list[Iterable[torch.Tensor | None]], device) -> list[torch.Tensor]:
    """:func:`local_sq` of several lists with one ``torch._foreach_norm`` per (device, dtype) over all of them."""
    present = [[g for g in gs if g is not None and g.numel() > 0] for gs in lists]
    buckets: dict = {}  # (device, dtype) -> [(list index, tensor)], lists in order
    for i, gs in enumerate(present):
        for g in gs:
            buckets.setdefault((g.device, g.dtype), []).append((i, g))
    accs = [torch.zeros((), dtype=torch.float64, device=device) for _ in lists]
    for items in buckets.values():
        norms = torch._foreach_norm([g for _, g in items], 2, dtype=torch.float32)
        sq = torch.stack(norms).to(device=device, dtype=torch.float64).square()
        start = 0
        for i in range(len(lists)):
            k = sum(1 for j, _ in items if j == i)
            if k:
                accs[i] += sq[start : start + k].sum()
            start += k
    return accs


def local_zeros(grads: Iterable[torch.Tensor | None], device) -> torch.Tensor:
    """Count of exactly-zero elements (int64 scalar on ``device``) over local gradient shards."""
    acc = torch.zeros((), dtype=torch.int64, device=device)
    for g in grads:
        if g is not None and g.numel() > 0:
            acc += (g == 0).sum().to(device)
    return acc


def global_norm_tensor(
    groups: list[tuple[list[torch.Tensor | None], dist.ProcessGroup | None]], device
) -> torch.Tensor:
    """Global L2 norm (float64 scalar on ``device``, no host wait) from ``[(local grad shards, process group), ...]``."""
    if not groups:
        return torch.zeros((), dtype=torch.float64, device=device)
    parts = local_sq_lists([g for g, _ in groups], device)
    for acc, (_, group) in zip(parts, groups):
        _reduce(acc, group)
    total = torch.stack(parts).sum()
    if total.device.type == "cpu":  # torch's CPU float64 sqrt is not always correctly rounded; math.sqrt is
        return torch.tensor(math.sqrt(float(total)), dtype=torch.float64)
    return total.sqrt()  # IEEE on CUDA; sqrt keeps inf and nan


def global_norm(groups: list[tuple[list[torch.Tensor | None], dist.ProcessGroup | None]], device) -> float:
    """Global L2 norm from ``[(local grad shards, process group), ...]`` (one host sync)."""
    return float(global_norm_tensor(groups, device))


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


def clip_scale(norm: torch.Tensor, clip_grad: float | None) -> torch.Tensor:
    """fp32 ``[clip_coef, finite]`` on the norm's device, computed there (no host wait): :func:`clip_coefficient`
    in the same float64 operations (a true division, not a reciprocal), and 1.0 / 0.0 for a finite / inf-nan norm."""
    finite = torch.isfinite(norm)
    one = torch.ones_like(norm)
    if clip_grad:
        coef = torch.div(torch.full_like(norm, float(clip_grad)), norm + 1.0e-6)
        coef = torch.where(finite & (coef < 1.0), coef, one)
    else:
        coef = one
    return torch.stack([coef, finite.to(norm.dtype)]).to(torch.float32)
