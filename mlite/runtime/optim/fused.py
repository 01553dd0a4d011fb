"""The fused AdamW kernel (Triton): one pass over one parameter's local shard.

Per element it reads the gradient, the moments and the master -- stored whole (fp32) or rebuilt from the bf16
parameter and its int16 remainder (PAO) -- applies the clip scale, runs the update of :mod:`.adamw` in the same
order of operations, and writes the moments, the bf16 parameter (round to nearest, ties away from zero, see
:mod:`.master`) and either the fp32 master or the remainder. Both storage modes go through this one kernel and only
differ in where the master comes from and goes to, so a PAO run and an fp32-master run stay bitwise identical.
It is compiled with ``enable_fp_fusion=False`` and uses ``div_rn`` / ``sqrt_rn`` so that it computes the same bits
as the torch-op path the host update runs (:func:`.adamw.adamw_inplace`).

Each program also writes the number of exactly-zero gradient elements of its block to its own slot of an int32
buffer (Megatron's ``num_zeros``; no atomics, so the count is deterministic).

Bytes moved per element (bf16 parameter and gradient, fp32 moments): fp32 master 28, PAO remainder 26 (plus 2 for the
gradient-norm pass), the memory-traffic floor of the arithmetic.
"""

from __future__ import annotations

import importlib.util

import torch

from .adamw import StepScalars

MODE_PARAM, MODE_MASTER, MODE_REMAINDER = 0, 1, 2
"""Where the fp32 master lives: the (fp32) parameter itself, a separate fp32 tensor, or bf16 param + int16 remainder."""

BLOCK = 2048
"""Elements per Triton program."""

HAVE_TRITON = importlib.util.find_spec("triton") is not None
"""Whether this environment has Triton (the CUDA update uses the kernel when it does)."""

_KERNEL: dict = {}


def blocks(n: int) -> int:
    """Programs (and zero-count slots) of a shard of ``n`` elements."""
    return (n + BLOCK - 1) // BLOCK


def _build():
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["n"])
    def adamw_kernel(
        p_ptr,
        g_ptr,
        w_ptr,
        m_ptr,
        v_ptr,
        z_ptr,
        n,
        clip,
        b1,
        omb1,
        b2,
        omb2,
        ibc1,
        ibc2,
        eps,
        wd,
        lr,
        MODE: tl.constexpr,
        HAS_GRAD: tl.constexpr,
        WD: tl.constexpr,
        DECOUPLED: tl.constexpr,
        M_BF16: tl.constexpr,
        V_BF16: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        # ---- the fp32 master
        if MODE == 0:
            p32 = tl.load(p_ptr + offs, mask=mask, other=0.0)
        elif MODE == 1:
            p32 = tl.load(w_ptr + offs, mask=mask, other=0.0)
        else:  # merge: high = param_bits - (remainder < 0); bits = high * 65536 + (remainder & 0xFFFF)
            hi = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.int16, bitcast=True).to(tl.int32)
            rem = tl.load(w_ptr + offs, mask=mask, other=0).to(tl.int32)
            neg = (rem < 0).to(tl.int32)
            hi = hi - neg
            hi = tl.where(hi < -32768, hi + 65536, hi)
            p32 = (hi * 65536 + (rem + neg * 65536)).to(tl.float32, bitcast=True)
        # ---- gradient (zero count of this block)
        if HAS_GRAD:
            graw = tl.load(g_ptr + offs, mask=mask, other=1.0)
            tl.store(z_ptr + pid, tl.sum((graw == 0).to(tl.int32), axis=0))
            g = graw.to(tl.float32)
        else:
            g = tl.zeros([BLOCK], dtype=tl.float32)
        g = g * clip  # always (x * 1.0 == x exactly): no kernel variant appears when clipping starts or stops
        if WD and not DECOUPLED:
            g = g + p32 * wd
        # ---- moments and update (same order as adamw_inplace)
        m = tl.load(m_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        m = m * b1 + g * omb1
        num = m * ibc1
        v = v * b2 + (g * g) * omb2
        den = tl.sqrt_rn(v * ibc2) + eps
        u = tl.div_rn(num, den)
        if WD and DECOUPLED:
            u = u + p32 * wd
        new = p32 - u * lr
        if M_BF16:
            tl.store(m_ptr + offs, m.to(tl.bfloat16, fp_downcast_rounding="rtne"), mask=mask)
        else:
            tl.store(m_ptr + offs, m, mask=mask)
        if V_BF16:
            tl.store(v_ptr + offs, v.to(tl.bfloat16, fp_downcast_rounding="rtne"), mask=mask)
        else:
            tl.store(v_ptr + offs, v, mask=mask)
        # ---- write back
        if MODE == 0:
            tl.store(p_ptr + offs, new, mask=mask)
        else:  # split: low >= 0x8000 rounds the high half up (ties away from zero); remainder = signed low half
            bits = new.to(tl.int32, bitcast=True)
            low = bits & 0xFFFF
            up = (low >= 0x8000).to(tl.int32)
            hi2 = (bits >> 16) + up
            hi2 = tl.where(hi2 > 32767, hi2 - 65536, hi2)
            tl.store(p_ptr + offs, hi2.to(tl.int16).to(tl.bfloat16, bitcast=True), mask=mask)
            if MODE == 1:
                tl.store(w_ptr + offs, new, mask=mask)
            else:
                tl.store(w_ptr + offs, (low - up * 65536).to(tl.int16), mask=mask)

    return adamw_kernel


def kernel():
    """The compiled-on-first-use Triton kernel."""
    if "k" not in _KERNEL:
        _KERNEL["k"] = _build()
    return _KERNEL["k"]


def launch(
    param: torch.Tensor,
    grad: torch.Tensor | None,
    master: torch.Tensor | None,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    zeros: torch.Tensor,
    mode: int,
    s: StepScalars,
) -> None:
    """Update one flat shard in place. ``master``: the fp32 master (MODE_MASTER), the int16 remainder
    (MODE_REMAINDER) or None (MODE_PARAM); ``zeros``: int32[:func:`blocks`(n)] receives the per-block zero counts."""
    n = param.numel()
    if n == 0:
        return
    w = master if master is not None else param
    g = grad if grad is not None else param
    extra = {} if _interpreted() else {"enable_fp_fusion": False}
    kernel()[(blocks(n),)](
        param,
        g,
        w,
        exp_avg,
        exp_avg_sq,
        zeros,
        n,
        s.clip,
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
        HAS_GRAD=grad is not None,
        WD=s.wd != 0.0,
        DECOUPLED=s.decoupled,
        M_BF16=exp_avg.dtype == torch.bfloat16,
        V_BF16=exp_avg_sq.dtype == torch.bfloat16,
        BLOCK=BLOCK,
        num_warps=8,
        **extra,
    )


def _interpreted() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET", "0") == "1"
