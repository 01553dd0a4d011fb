"""Megatron-Core's DDP for ``optimizer dist_opt``: parameters replicated over data parallel, contiguous parameter
and gradient buffers, gradients reduce-scattered (distributed optimizer) or all-reduced (plain DDP).

Two buffer pairs per run (Megatron-Core keeps one per dtype and one more for expert-parallel parameters): the dense
parameters, reduced over DP x CP, and this EP rank's routed experts, reduced over EDP. Each pair is

* ``param_data`` (the parameter dtype): every parameter's storage is re-pointed at its range, so the all-gather after
  the step writes the parameters in place;
* ``grad_data`` (``main_grads_dtype``: fp32 by default, bf16 with ``--grad-dtype bf16``): each parameter's
  ``main_grad`` is a view of its range; a post-accumulate-grad hook adds the autograd gradient to it and frees the
  gradient (Megatron's ``param.main_grad.add_(param.grad)``), so micro-batches accumulate in the buffer's dtype.

Layout (:func:`buffer_layout`, Megatron's ``ParamAndGradBuffer`` with one bucket, as it is when
``overlap_grad_reduce`` is off): parameters in reverse model order (backward order); with the distributed optimizer
each parameter starts at a multiple of 64 elements and the buffer ends at a multiple of ``lcm(d, 128)``, d the
reduction group's size, so every rank's shard is the contiguous range ``[r * n / d, (r + 1) * n / d)``. The padding
elements hold zeros, no optimizer state, and count in neither the parameter nor the gradient bytes of
``memory_stats`` (it reports them as ``param_buffer_padding`` / ``grad_buffer_padding``); without the distributed
optimizer there is no padding.

Reduction (:meth:`DDPBuffers.sync`, once per step, before the norm): the replicated parameters' partial TP gradients
are all-reduced over TP, then each ``grad_data`` is scaled by ``1 / (DP x CP)`` (experts too: an expert gradient
already sums its EP group's tokens) and reduce-scattered in place over its group (rank r keeps its shard, the rest
of the buffer is stale) or, without the distributed optimizer, all-reduced. After the update
:meth:`DDPBuffers.gather_params` all-gathers ``param_data`` in place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

PARAM_ALIGN = 64
"""Elements a parameter's start is rounded up to with the distributed optimizer (128 bytes for 16-bit params)."""
BUCKET_ALIGN = 128
"""The buffer's end is rounded up to a multiple of ``lcm(d, BUCKET_ALIGN)`` elements with the distributed optimizer."""


_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
_ALL_GATHER = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
"""The flat collectives under their current names (torch 2.13 deprecates the ``*_tensor`` spellings)."""


def _ceil(n: int, k: int) -> int:
    return -(-n // k) * k


def buffer_layout(numels: list[int], size: int, distributed: bool) -> tuple[list[int], int]:
    """``(start of each tensor, buffer elements)`` for tensors laid out in the given order (Megatron-Core's one-bucket
    layout; see the module docstring)."""
    starts, n = [], 0
    for k in numels:
        if distributed:
            n = _ceil(n, PARAM_ALIGN)
        starts.append(n)
        n += k
    if distributed:
        n = _ceil(n, math.lcm(max(1, size), BUCKET_ALIGN))
    return starts, n


def main_grad(p: Any) -> torch.Tensor:
    """The parameter's view of its gradient buffer (Megatron-Core's ``param.main_grad``)."""
    return p.main_grad


def local(t: torch.Tensor) -> torch.Tensor:
    """The local tensor of a DTensor (TP), or the tensor itself."""
    return t._local_tensor if hasattr(t, "_local_tensor") else t


@dataclass(eq=False)
class ShardPiece:
    """The part of one parameter inside this rank's shard of its buffer."""

    name: str
    """Parameter name."""
    param: nn.Parameter
    """The parameter (model view)."""
    expert: bool
    """An expert parameter (reduced and sharded over EDP)."""
    param_shard: torch.Tensor
    """Flat view of ``param_data`` over the piece."""
    grad_shard: torch.Tensor
    """Flat view of ``grad_data`` over the piece."""


@dataclass(eq=False)
class Buffer:
    """One parameter / gradient buffer pair and the group it is reduced over."""

    expert: bool
    """Expert parameters (EDP) or dense ones (DP x CP)."""
    names: list[str]
    """Parameter names, in buffer order."""
    params: list[nn.Parameter]
    """The parameters, in buffer order."""
    starts: list[int]
    """Start of each parameter in the buffers."""
    param_data: torch.Tensor
    """Contiguous parameter storage."""
    grad_data: torch.Tensor
    """Contiguous gradient storage (``main_grad`` views)."""
    group: dist.ProcessGroup | None
    """Reduction group."""
    size: int
    """Its size."""
    rank: int
    """This rank's index in it."""
    distributed: bool
    """Reduce-scatter and shard (True) or all-reduce and keep everything (False)."""
    pieces: list[ShardPiece] = field(default_factory=list)
    """This rank's shard, by parameter."""

    @property
    def numel(self) -> int:
        """Real (unpadded) elements."""
        return sum(local(p).numel() for p in self.params)

    def shard_range(self) -> tuple[int, int]:
        if not self.distributed:
            return 0, self.param_data.numel()
        n = self.param_data.numel() // self.size
        return self.rank * n, (self.rank + 1) * n

    def bind(self) -> None:
        """Point every parameter's storage and ``main_grad`` at its range of the buffers, and cut the shard."""
        lo, hi = self.shard_range()
        self.pieces = []
        with torch.no_grad():
            for name, p, a in zip(self.names, self.params, self.starts):
                lt = local(p)
                n = lt.numel()
                lt.data = self.param_data[a : a + n].view(lt.shape)
                pa: Any = p
                pa.main_grad = self.grad_data[a : a + n].view(lt.shape)
                s, e = max(a, lo), min(a + n, hi)
                if s < e:
                    self.pieces.append(ShardPiece(name, p, self.expert, self.param_data[s:e], self.grad_data[s:e]))


class DDPBuffers:
    """The run's buffers, hooks and collectives (see the module docstring)."""

    def __init__(
        self,
        model: nn.Module,
        *,
        expert_names: set[str],
        pstate,
        grad_dtype: torch.dtype,
        distributed: bool,
        tp=None,
    ):
        self.pstate = pstate
        self.distributed = distributed
        self.tp = tp
        self.pending = False
        """A backward ran since the last :meth:`sync`."""
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad][::-1]  # backward order
        self.buffers: list[Buffer] = []
        for expert in (False, True):
            sel = [(n, p) for n, p in named if (n in expert_names) == expert]
            if not sel:
                continue
            group, size = (pstate.edp_group, pstate.edp) if expert else (pstate.dp_cp_group, pstate.dp_cp)
            starts, total = buffer_layout([local(p).numel() for _, p in sel], size, distributed)
            pdtype, dev = sel[0][1].dtype, local(sel[0][1]).device
            pdata = torch.zeros(total, dtype=pdtype, device=dev)
            with torch.no_grad():
                for (_, p), a in zip(sel, starts):
                    pdata[a : a + local(p).numel()].copy_(local(p).reshape(-1))
            buf = Buffer(
                expert=expert,
                names=[n for n, _ in sel],
                params=[p for _, p in sel],
                starts=starts,
                param_data=pdata,
                grad_data=torch.zeros(total, dtype=grad_dtype, device=dev),
                group=group,
                size=size,
                rank=dist.get_rank(group) if dist.is_initialized() and size > 1 else 0,
                distributed=distributed,
            )
            buf.bind()
            self.buffers.append(buf)
        self.by_name = {n: p for b in self.buffers for n, p in zip(b.names, b.params)}
        for p in self.by_name.values():
            p.register_post_accumulate_grad_hook(self._accumulate)

    def _accumulate(self, p: Any) -> None:
        """Megatron's grad-accumulation hook: ``main_grad += grad`` (in the buffer's dtype), free ``grad``."""
        if p.grad is not None:
            g: Any = p.grad
            want = getattr(p, "placements", None)
            if want is not None and g.placements != want:  # the vocab-parallel lm_head's gradient comes whole
                g = g.redistribute(p.device_mesh, want)
            with torch.no_grad():
                main_grad(p).add_(local(g))
            p.grad = None
        self.pending = True

    @property
    def pieces(self) -> list[ShardPiece]:
        """This rank's shard of every buffer (what the optimizer updates)."""
        return [x for b in self.buffers for x in b.pieces]

    @torch.no_grad()
    def sync(self) -> None:
        """Reduce the gradients of a step (once; see the module docstring)."""
        if not self.pending:
            return
        self.pending = False
        tp = self.tp
        if tp is not None:
            tp.pending = False
            for name in tp.partial_names:
                dist.all_reduce(main_grad(self.by_name[name]), group=tp.group)
        scale = 1.0 / self.pstate.dp_cp
        for b in self.buffers:
            if scale != 1.0:
                b.grad_data.mul_(scale)
            if b.size == 1:
                continue
            if b.distributed:
                lo, hi = b.shard_range()
                _REDUCE_SCATTER(b.grad_data[lo:hi], b.grad_data, group=b.group)
            else:
                dist.all_reduce(b.grad_data, group=b.group)

    @torch.no_grad()
    def gather_params(self) -> None:
        """All-gather the updated parameter shards into every rank's parameters (distributed optimizer only)."""
        for b in self.buffers:
            if b.distributed and b.size > 1:
                lo, hi = b.shard_range()
                _ALL_GATHER(b.param_data, b.param_data[lo:hi], group=b.group)

    def zero(self) -> None:
        """Megatron's ``zero_grad_buffer``: the gradient buffers stay allocated and are zeroed."""
        for b in self.buffers:
            b.grad_data.zero_()
        self.pending = False

    def move(self, device: torch.device, params: bool, grads: bool) -> None:
        """Context offload: move the parameter and/or gradient buffers and re-point the views."""
        for b in self.buffers:
            if params:
                b.param_data = b.param_data.to(device)
            if grads:
                b.grad_data = b.grad_data.to(device)
            b.bind()

    def memory(self) -> dict:
        """Bytes of the real parameter and gradient elements and of the buffers' padding."""
        out = {"params": 0, "grads": 0, "param_buffer_padding": 0, "grad_buffer_padding": 0}
        for b in self.buffers:
            n = b.numel
            out["params"] += n * b.param_data.element_size()
            out["grads"] += n * b.grad_data.element_size()
            out["param_buffer_padding"] += (b.param_data.numel() - n) * b.param_data.element_size()
            out["grad_buffer_padding"] += (b.grad_data.numel() - n) * b.grad_data.element_size()
        return out
