"""The fused AdamW kernel (Triton): one launch updates every shard of a state group, one pass over its memory.

Multi-tensor layout. The optimizer's own state (fp32 master or int16 remainder, both moments) lives in flat per-group
buffers; the parameters and gradients are separate tensors owned by FSDP2. A launch reads a small device table with
one column per shard -- parameter address, gradient address (0: no gradient), gradient dtype, element count, start in
the group buffers -- and a program -> (shard, block of the shard) map; each program casts the shard's int64 address
to a typed pointer and updates ``BLOCK`` elements of it. Whole blocks and each shard's partial last block go to two
launches, so the whole blocks need no element mask. :class:`MultiTensorLaunch` builds the map once (it only depends on the
element counts) and rebuilds the table only when an address changes, so a steady-state step is one table comparison
on the host and one kernel per group.

Per element the kernel reads the gradient, the moments and the master -- stored whole (fp32) or rebuilt from the bf16
parameter and its int16 remainder (PAO) -- applies the clip scale, runs the update of :mod:`.adamw` in the same order
of operations, and writes the moments, the bf16 parameter (round to nearest, ties away from zero, see :mod:`.master`)
and either the fp32 master or the remainder. Both storage modes go through this one kernel and only differ in where the
master comes from and goes to, so a PAO run and an fp32-master run stay bitwise identical. It is compiled with
``enable_fp_fusion=False`` and uses ``div_rn`` / ``sqrt_rn`` so that it computes the same bits as the host update
(:func:`.adamw.adamw_inplace`). bf16 values are widened and rounded (nearest even) with integer bit operations, which is
what the GPU's conversion instructions do and what Triton's interpreter (the CPU test of this kernel) does not do for
subnormals and ties.

The clip scale is read from device memory (``scale = [clip_coef, finite]``, fp32): the host never waits for the grad
norm. When ``finite`` is 0 the kernel stores nothing but the zero counts (the step is skipped, as Megatron skips it on
an inf/nan norm). Each program writes the number of exactly-zero gradient elements of its block to its own slot of an
int32 buffer (Megatron's ``num_zeros``; no atomics, so the count is deterministic).

Bytes moved per element (bf16 parameter and gradient, fp32 moments): fp32 master 28, PAO remainder 26 (plus 2 for the
gradient-norm pass), the memory-traffic floor of the arithmetic.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence

import torch

from .adamw import StepScalars

MODE_PARAM, MODE_MASTER, MODE_REMAINDER = 0, 1, 2
"""Where the fp32 master lives: the (fp32) parameter itself, a separate fp32 tensor, or bf16 param + int16 remainder."""

BLOCK = 2048
"""Elements per Triton program."""

HAVE_TRITON = importlib.util.find_spec("triton") is not None
"""Whether this environment has Triton (the CUDA update uses the kernel when it does)."""

GRAD_KIND = {torch.bfloat16: 1, torch.float32: 2, torch.float16: 3}
"""Gradient dtype codes of the table (0: the shard has no gradient this step)."""

ROWS = 5
"""Table rows: param address, grad address, grad kind, numel, start in the group buffers."""

_KERNEL: dict = {}


def blocks(n: int) -> int:
    """Programs (and zero-count slots) of a shard of ``n`` elements."""
    return (n + BLOCK - 1) // BLOCK


def _build():
    from .fused_kernel import adamw_multi_kernel

    return adamw_multi_kernel


def kernel():
    """The compiled-on-first-use Triton kernel."""
    if "k" not in _KERNEL:
        _KERNEL["k"] = _build()
    return _KERNEL["k"]


def interpreted() -> bool:
    """Triton's interpreter is on (``TRITON_INTERPRET=1``: kernels run on CPU tensors, for tests)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def scale_tensor(clip: float, device, apply: bool = True) -> torch.Tensor:
    """The kernel's ``[clip_coef, finite]`` (fp32) from host values (an asynchronous copy, no host wait)."""
    t = torch.tensor([clip, 1.0 if apply else 0.0], dtype=torch.float32)
    return t.to(device, non_blocking=True) if torch.device(device).type != "cpu" else t


class MultiTensorLaunch:
    """One kernel launch over the shards of a state group (see the module docstring).

    ``numels``: element count of each shard; ``offsets``: its start in the flat state buffers. The block map depends
    only on these; the address table is rebuilt (one small asynchronous host-to-device copy) whenever a parameter or
    gradient address or a gradient dtype differs from the previous call."""

    def __init__(self, numels: Sequence[int], offsets: Sequence[int], device, aligned: bool | None = None):
        dev = torch.device(device)
        if dev.type == "cuda" and dev.index is None:  # "cuda" -> "cuda:N", as tensors report their device
            dev = torch.device("cuda", torch.cuda.current_device())
        self.device = dev
        self.aligned = aligned
        """True: compile the variant with alignment hints (16-byte addresses, starts of 8 elements: vector loads
        and stores) and refuse shards that break it; False: never; None: whenever the shards and buffers of the
        call allow it (checked when the table is built)."""
        if aligned and any(a % 8 for a in offsets):
            raise ValueError("aligned launch: every start offset must be a multiple of 8 elements")
        self.numels = [int(n) for n in numels]
        self.offsets = [int(a) for a in offsets]
        # two launches: the whole blocks of every shard (no element mask), then each shard's partial last block
        n = torch.tensor(self.numels, dtype=torch.int64)
        whole = n // BLOCK
        shard = torch.arange(len(n), dtype=torch.int64)
        first = torch.cumsum(whole, 0) - whole  # first program of each shard in the whole-block launch
        self.nfull = int(whole.sum())
        """Programs of the whole-block launch (zero-count slots ``[0, nfull)``; the partial blocks follow)."""
        full_shard = torch.repeat_interleave(shard, whole)
        full_block = torch.arange(self.nfull, dtype=torch.int64) - torch.repeat_interleave(first, whole)
        ragged = n % BLOCK != 0
        self.bmap = torch.cat([full_shard, shard[ragged]]).to(torch.int32).to(self.device)
        """Shard of each program (whole blocks first)."""
        self.bidx = torch.cat([full_block, whole[ragged]]).to(torch.int32).to(self.device)
        """Block within its shard of each program."""
        self.nblocks = len(self.bmap)
        """Programs of both launches (= zero-count slots)."""
        self.zeros = torch.zeros(max(1, self.nblocks), dtype=torch.int32, device=self.device)
        """Per-block zero counts of the last launch."""
        self._key: tuple | None = None
        self._table: torch.Tensor | None = None
        self._gkind = 0
        self._vec = False

    def table(self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None]) -> torch.Tensor:
        """The device table for these shards (cached while every address and gradient dtype stays the same)."""
        pp, gp, gk = [], [], []
        for p, g, n in zip(params, grads, self.numels):
            pp.append(p.data_ptr())
            if g is None or n == 0:
                gp.append(0)
                gk.append(0)
            else:
                gp.append(g.data_ptr())
                gk.append(GRAD_KIND[g.dtype])
        key = (*pp, *gp, *gk)
        if key != self._key:
            self._check(params, grads)
            kinds = {k for k, n in zip(gk, self.numels) if n}
            self._gkind = kinds.pop() if len(kinds) == 1 else 0  # 0 also when a shard has no gradient
            self._vec = self.aligned is True or (
                self.aligned is None and not any(a % 8 for a in self.offsets) and not any(a % 16 for a in (*pp, *gp))
            )
            rows = [pp, gp, gk, self.numels, self.offsets]
            host = torch.tensor(rows, dtype=torch.int64)
            self._table = host.to(self.device, non_blocking=True) if self.device.type != "cpu" else host
            self._key = key
        assert self._table is not None
        return self._table

    def _check(self, params, grads) -> None:
        if len(params) != len(self.numels) or len(grads) != len(self.numels):
            raise ValueError(f"{len(params)} params / {len(grads)} grads for a launch over {len(self.numels)} shards")
        for i, (p, g, n) in enumerate(zip(params, grads, self.numels)):
            if p.numel() != n or not p.is_contiguous() or p.device != self.device:
                raise ValueError(f"shard {i}: param of {p.numel()} elements on {p.device} (want {n}, contiguous)")
            if g is not None and n and (g.numel() != n or not g.is_contiguous() or g.dtype not in GRAD_KIND):
                raise ValueError(f"shard {i}: gradient of {g.numel()} {g.dtype} elements (want {n}, contiguous)")
            if self.aligned and (p.data_ptr() % 16 or (g is not None and n and g.data_ptr() % 16)):
                raise ValueError(f"shard {i}: address not 16-byte aligned (use an unaligned launch)")

    def __call__(
        self,
        params: Sequence[torch.Tensor],
        grads: Sequence[torch.Tensor | None],
        master: torch.Tensor | None,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
        mode: int,
        s: StepScalars,
        scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Update every shard in place; returns the zero-gradient count (int64 device scalar, no host sync).

        ``master``: the group's flat fp32 master (MODE_MASTER), int16 remainder (MODE_REMAINDER) or None
        (MODE_PARAM); ``exp_avg`` / ``exp_avg_sq``: the flat moments; ``scale``: fp32 ``[clip_coef, finite]`` on the
        device (default: ``s.clip``, applied)."""
        if self.nblocks == 0:
            return torch.zeros((), dtype=torch.int64, device=self.device)
        tab = self.table(params, grads)
        bufs_aligned = not any(t is not None and t.data_ptr() % 16 for t in (master, exp_avg, exp_avg_sq))
        if self.aligned and not bufs_aligned:
            raise ValueError("aligned launch: state buffers must be 16-byte aligned")
        if scale is None:
            scale = scale_tensor(s.clip, self.device)
        for lo, hi, whole in ((0, self.nfull, True), (self.nfull, self.nblocks, False)):
            if hi > lo:
                self._launch(
                    tab, lo, hi, whole, self._vec and bufs_aligned, master, exp_avg, exp_avg_sq, mode, s, scale
                )
        return self.zeros[: self.nblocks].sum()

    def _launch(self, tab, lo, hi, whole, vec, master, exp_avg, exp_avg_sq, mode, s, scale) -> None:
        extra = {} if interpreted() else {"enable_fp_fusion": False}
        kernel()[(hi - lo,)](
            tab,
            self.bmap[lo:hi],
            self.bidx[lo:hi],
            master if master is not None else exp_avg,
            exp_avg,
            exp_avg_sq,
            self.zeros[lo:hi],
            scale,
            len(self.numels),
            s.b1,
            s.omb1,
            s.b2,
            s.omb2,
            s.ibc1,
            s.ibc2,
            s.eps,
            s.wd,
            s.lr,
            MODE=mode,
            WD=s.wd != 0.0,
            DECOUPLED=s.decoupled,
            M_BF16=exp_avg.dtype == torch.bfloat16,
            V_BF16=exp_avg_sq.dtype == torch.bfloat16,
            BLOCK=BLOCK,
            ALIGNED=vec,
            FULL=whole,
            GKIND=self._gkind,
            num_warps=8,
            **extra,
        )


def launch(
    param: torch.Tensor,
    grad: torch.Tensor | None,
    master: torch.Tensor | None,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    zeros: torch.Tensor,
    mode: int,
    s: StepScalars,
    scale: torch.Tensor | None = None,
) -> None:
    """Update one flat shard in place (a one-shard :class:`MultiTensorLaunch`). ``master``: the fp32 master
    (MODE_MASTER), the int16 remainder (MODE_REMAINDER) or None (MODE_PARAM); ``zeros``: int32[:func:`blocks`(n)]
    receives the per-block zero counts."""
    n = param.numel()
    if n == 0:
        return
    mt = MultiTensorLaunch([n], [0], param.device)
    mt(
        [param.view(-1)],
        [None if grad is None else grad.view(-1)],
        None if master is None else master.view(-1),
        exp_avg.view(-1),
        exp_avg_sq.view(-1),
        mode,
        s,
        scale,
    )
    zeros[: mt.nblocks].copy_(mt.zeros[: mt.nblocks])


def launch_group(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    offsets: Sequence[int],
    master: torch.Tensor | None,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    mode: int,
    s: StepScalars,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Update a list of shards whose state sits at ``offsets`` of flat buffers in one launch (uncached; keep a
    :class:`MultiTensorLaunch` to reuse the map and table across steps). Returns the zero count (device scalar)."""
    mt = MultiTensorLaunch([p.numel() for p in params], offsets, params[0].device)
    return mt(params, grads, master, exp_avg, exp_avg_sq, mode, s, scale)
