"""Expert parallelism: routed experts sharded over the EP group, tokens dispatched and combined by all-to-all.

Layout: with ``E`` routed experts and EP size ``P``, EP rank ``j`` holds experts ``j*E/P .. (j+1)*E/P - 1`` (as
Megatron-Core's ``local_expert_indices``); their parameters are then FSDP2-sharded over the EDP group.
:func:`shard_experts` slices the full, identically initialised expert tensors of a freshly built model, so an EP
run starts from the same weights as the data-parallel run.

Dispatch (:class:`ExpertDispatcher`, called by the MoE layer in place of ``experts(xs, counts)``): the MoE layer has
already sorted its ``(token, slot)`` rows by global expert id, so the rows for EP rank ``j`` are one contiguous
block. (1) exchange counts: an all-to-all of the ``[P, E/P]`` count matrix tells every rank how many rows it gets
from each source for each of its experts; (2) exchange tokens: an all-to-all of the rows with those split sizes;
(3) the received rows (source-major) are permuted to expert-major order and the local experts run on them; (4) the
inverse permutation and the reverse all-to-all bring every output row back to the rank and position it came from
(combine). ``all_to_all_single`` needs its split sizes on the host, so each MoE layer's forward reads the send and
receive counts back in one transfer -- exactly one host sync per layer (Megatron-Core's single ``cuda_sync_point``,
NVIDIA/Megatron-LM@bed33f8 megatron/core/transformer/moe/token_dispatcher.py); everything else (the expert-major
permutation, the local counts) is computed on the device, and the backward reuses the forward's split sizes (no
sync). Both all-to-alls are differentiable (the backward pass is the reverse exchange), so gradients of the
expert weights hold every token routed to them, from every rank of the EP group.

Every rank runs the same collectives in the same order whatever the routing: when no token reaches any local
expert, the experts run on one zero row (output discarded), so the backward pass still runs both reverse
all-to-alls and the experts' gradient reduction (a zero gradient) -- otherwise that rank's backward graph would skip
them and its peers would wait forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from ...errors import MliteError
from .comm import all_to_all, exchange_counts

if TYPE_CHECKING:
    from ..models.moe import Experts


def local_expert_range(num_experts: int, ep: int, ep_rank: int) -> tuple[int, int]:
    """``[start, stop)`` of the global expert ids EP rank ``ep_rank`` holds."""
    if num_experts % ep:
        raise MliteError(
            f"ep: routed experts {num_experts} are not divisible by EP {ep}; choose an EP that divides "
            "the number of experts"
        )
    n = num_experts // ep
    return ep_rank * n, (ep_rank + 1) * n


def shard_experts(experts: Experts, ep: int, ep_rank: int) -> None:
    """Keep only this EP rank's experts in an ``Experts`` module (3D ``[E, ...]`` parameters, sliced on dim 0)."""
    start, stop = local_expert_range(experts.num_experts, ep, ep_rank)
    for name, p in list(experts.named_parameters(recurse=False)):
        setattr(experts, name, nn.Parameter(p.detach()[start:stop].clone(), requires_grad=p.requires_grad))
    experts.num_experts = stop - start


class ExpertDispatcher:
    """All-to-all token dispatch/combine around the local experts (see the module docstring)."""

    def __init__(self, group, ep: int, num_experts: int):
        self.group, self.ep, self.num_experts = group, ep, num_experts
        self.local = num_experts // ep

    def __call__(self, experts: nn.Module, xs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """``xs[M, H]`` sorted by global expert, ``counts[E]`` -> expert outputs ``[M, H]`` in the same order."""
        send = counts.reshape(self.ep, self.local).to(torch.int64)
        recv = exchange_counts(send, self.group)  # recv[src, local expert]
        both = torch.stack((send, recv)).tolist()  # the layer's one host sync: split sizes for all_to_all_single
        send_splits = [sum(r) for r in both[0]]
        recv_splits = [sum(r) for r in both[1]]
        got = all_to_all(xs, recv_splits, send_splits, self.group)  # source-major, then local expert
        perm = _expert_major(recv, sum(recv_splits))
        local_counts = recv.sum(0).to(counts.device)
        rows = got.index_select(0, perm)
        empty = rows.shape[0] == 0
        if empty:  # no token for any local expert: one zero row keeps the backward graph (and its collectives)
            rows = rows.new_zeros(1, rows.shape[1]) + got.sum()
            local_counts = torch.zeros_like(local_counts)
            local_counts[0] = 1
        ys = experts(rows, local_counts)
        if empty:
            ys = ys[:0]
        back = torch.empty_like(ys).index_copy(0, perm, ys)  # source-major again
        return all_to_all(back, send_splits, recv_splits, self.group)


def _expert_major(recv: torch.Tensor, total: int) -> torch.Tensor:
    """Row order that turns a source-major ``[src][expert]`` block layout (``recv[P, L]`` rows per block, ``total``
    rows in all) into expert-major, source order kept within each expert -- on ``recv``'s device, no host sync:
    every row is labelled with its block's expert-major rank ``expert * P + src`` and the labels sorted stably."""
    P, L = recv.shape
    blocks = torch.arange(P * L, device=recv.device)
    label = (blocks % L) * P + blocks // L  # block (src, e) in row-major order -> e * P + src
    rows = torch.repeat_interleave(label, recv.reshape(-1), output_size=total)
    return torch.argsort(rows, stable=True)
