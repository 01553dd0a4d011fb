"""Global gradient norm over FSDP2 shards, Megatron's ``num_zeros``, and the clipping coefficient.

Every rank holds a disjoint shard of every gradient (FSDP2 ``Shard(0)``, padding excluded), so the global L2 norm is
``sqrt(sum over groups of all_reduce_sum(local sum of squares))``: dense parameters reduced over the dense FSDP group
(DP x CP), expert parameters over the expert-data-parallel group (EDP). Squares are computed in fp32 from the
gradients widened chunk by chunk and accumulated in fp64. ``num_zeros`` counts gradient elements equal to zero, summed
the same way (Megatron logs it as ``num zeros``). Clipping is Megatron's: ``coef = clip_grad / (norm + 1e-6)``,
applied only when ``coef < 1``; the runtime applies it inside the fp32 update (the bf16 gradients are not rewritten).
"""

from __future__ import annotations

import math
from typing import Iterable

import torch
import torch.distributed as dist

CHUNK = 1 << 22
"""Elements widened to fp32 at a time (16 MiB of fp32)."""


def local_sq_and_zeros(grads: Iterable[torch.Tensor | None], device) -> torch.Tensor:
    """``[sum of squares, zero count]`` (float64, on ``device``) over local gradient shards; None adds nothing."""
    acc = torch.zeros(2, dtype=torch.float64, device=device)
    for g in grads:
        if g is None or g.numel() == 0:
            continue
        flat = g.reshape(-1)
        for s in range(0, flat.numel(), CHUNK):
            c = flat[s:s + CHUNK]
            c32 = c.to(device=device, dtype=torch.float32)
            acc[0] += (c32 * c32).sum()
            acc[1] += (c == 0).sum()
    return acc


def global_norm_and_zeros(groups: list[tuple[list[torch.Tensor | None], object]], device) -> tuple[float, int]:
    """Global L2 norm and zero count from ``[(local grad shards, process group), ...]``."""
    total_sq = 0.0
    zeros = 0
    for grads, group in groups:
        acc = local_sq_and_zeros(grads, device)
        if dist.is_initialized() and dist.get_world_size(group) > 1:
            dist.all_reduce(acc, group=group)
        total_sq += float(acc[0])
        zeros += int(acc[1])
    return math.sqrt(total_sq), zeros  # sqrt keeps inf and nan


def clip_coefficient(norm: float, clip_grad: float | None) -> float:
    """Megatron's clip factor: ``clip_grad / (norm + 1e-6)`` when below 1, else 1 (also when clipping is off)."""
    if not clip_grad or not math.isfinite(norm):
        return 1.0
    coef = clip_grad / (norm + 1.0e-6)
    return coef if coef < 1.0 else 1.0
