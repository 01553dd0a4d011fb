"""Differentiable collectives used by the parallel axes (no model code here).

* :func:`all_to_all` -- ``all_to_all_single`` with per-rank split sizes; backward is the reverse all-to-all.
* :func:`all_gather_dim0` -- concatenation of every rank's tensor along dim 0 (rank order); backward
  reduce-scatters (sums) the gradient and keeps this rank's slice.
* :func:`reduce_scatter_dim0` -- the sum over ranks, this rank's share of the rows; backward all-gathers.
* :func:`exchange_counts` -- all-to-all of an integer count matrix (no gradient).

All take an explicit process group, work on gloo (CPU) and nccl (CUDA), and are no-ops for a group of one rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        ctx.splits, ctx.group = (out_splits, in_splits), group
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        out_splits, in_splits = ctx.splits
        gi = g.new_empty((sum(in_splits), *g.shape[1:]))
        dist.all_to_all_single(gi, g.contiguous(), in_splits, out_splits, group=ctx.group)
        return gi, None, None, None


def all_to_all(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
    """Send ``x[sum(in_splits)]`` rows ``in_splits[j]`` to rank ``j``; receive ``out_splits[j]`` rows from ``j``."""
    return _AllToAll.apply(x, list(out_splits), list(in_splits), group)


class _AllGather0(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, size):
        ctx.group, ctx.size = group, size
        out = x.new_empty((size * x.shape[0], *x.shape[1:]))
        dist.all_gather_into_tensor(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        gi = g.new_empty((g.shape[0] // ctx.size, *g.shape[1:]))
        dist.reduce_scatter_tensor(gi, g.contiguous(), op=dist.ReduceOp.SUM, group=ctx.group)
        return gi, None, None


def all_gather_dim0(x: torch.Tensor, group, size: int) -> torch.Tensor:
    """``cat([x of rank 0, x of rank 1, ...])`` over ``group`` (every rank's ``x`` has the same shape)."""
    if size == 1:
        return x
    return _AllGather0.apply(x, group, size)


def exchange_counts(send: torch.Tensor, group) -> torch.Tensor:
    """``recv[j] = send_of_rank_j[me]``: all-to-all of an integer ``[world_of_group, ...]`` count tensor."""
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send.contiguous(), group=group)
    return recv


class _ReduceScatter0(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, size):
        ctx.group, ctx.size = group, size
        out = x.new_empty((x.shape[0] // size, *x.shape[1:]))
        dist.reduce_scatter_tensor(out, x.contiguous(), op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        gi = g.new_empty((ctx.size * g.shape[0], *g.shape[1:]))
        dist.all_gather_into_tensor(gi, g.contiguous(), group=ctx.group)
        return gi, None, None


def reduce_scatter_dim0(x: torch.Tensor, group, size: int) -> torch.Tensor:
    """Sum ``x`` over ``group`` and keep this rank's ``1/size`` of the rows (backward: all-gather)."""
    if size == 1:
        return x
    return _ReduceScatter0.apply(x, group, size)
