"""The fp32 master weight of a bf16 parameter: stored whole (4 B/elem) or as an int16 remainder (2 B/elem, PAO).

An fp32 number is 32 bits; its high 16 bits are a bf16 number. Precision-aware optimizer with
``store_param_remainders`` (Megatron-Core + Transformer Engine's FusedAdam) keeps only the low 16 bits, because the
bf16 parameter already holds (almost) the high half:

* split (after each update): ``low = bits & 0xFFFF``. If ``low >= 0x8000`` (its int16 reading is negative) the bf16
  parameter is the high half plus one unit in the last place (rounded away from zero in magnitude), else the high half
  itself. The remainder is ``low`` read as a signed int16. So the parameter is the fp32 master rounded to nearest bf16,
  ties away from zero, and the remainder is the signed distance ``master - param`` in fp32 bit units
  (``-0x8000 .. 0x7FFF``).
* merge (before each update): ``high = param_bits - (remainder < 0)`` and ``bits = high << 16 | (remainder & 0xFFFF)``
  rebuild the fp32 master exactly.

The pair ``(param, remainder)`` is a bijection with the 2**32 fp32 bit patterns (every pattern round-trips exactly,
NaN payloads, infinities, -0.0 and subnormals included); ``tests/test_runtime_optim.py`` checks it exhaustively on the
edge classes. Why ties go away from zero and not to even: with round-to-nearest-even the remainder of an exact tie would
need +0x8000 (a 17th bit). Consequences, all documented and tested:

* ``round_bf16(x)`` (the high half) equals ``x.to(torch.bfloat16)`` except at exact ties (``low == 0x8000``), where it
  rounds away from zero instead of to even. The lite runtime uses :func:`round_bf16` for the bf16 copy of the fp32
  master in *both* storage modes, which is why a PAO run and an fp32-master run are bitwise identical.
* finite values round as above, overflowing to +-inf past bf16's largest finite (as torch does); +-inf stay +-inf.
* NaN: the bits round-trip exactly, but the bf16 parameter of a NaN master is whatever the incremented high half is
  (usually a NaN; ``0x7FFF``/``0xFFFF`` high halves wrap to -0.0/+0.0). The runtime never writes a NaN master: it skips
  the update when the gradient norm is not finite.

All integer arithmetic is done in int32 with no overflow (``high * 65536 + low`` stays within int32), so the result is
the same on CPU and CUDA.
"""

from __future__ import annotations

import sys

import torch

_LOW = 0xFFFF
_HALF = 0x8000
_WRAP = 0x10000


def split_fp32(master: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 tensor -> (bf16 round-to-nearest-ties-away, int16 remainder); exact inverse of :func:`merge_fp32`."""
    if master.dtype != torch.float32:
        raise TypeError(f"split_fp32 needs float32, got {master.dtype}")
    bits = master.contiguous().view(torch.int32)
    low = bits & _LOW  # 0 .. 0xFFFF
    up = (low >= _HALF).to(torch.int32)  # round the high half up (in magnitude)
    rem = (low - up * _WRAP).to(torch.int16)
    hi = (bits >> 16) + up  # arithmetic shift: -0x8000 .. 0x7FFF, +1 may reach 0x8000
    hi = torch.where(hi > 0x7FFF, hi - _WRAP, hi).to(torch.int16)
    return hi.view(torch.bfloat16), rem


def merge_fp32(param: torch.Tensor, remainder: torch.Tensor) -> torch.Tensor:
    """(bf16 param, int16 remainder) -> the fp32 master, bit-exact."""
    if param.dtype != torch.bfloat16 or remainder.dtype != torch.int16:
        raise TypeError(f"merge_fp32 needs (bfloat16, int16), got ({param.dtype}, {remainder.dtype})")
    hi = param.contiguous().view(torch.int16).to(torch.int32)
    rem = remainder.to(torch.int32)
    neg = (rem < 0).to(torch.int32)
    hi = hi - neg
    hi = torch.where(hi < -0x8000, hi + _WRAP, hi)  # undo the wrap of split (0x8000 -> 0x7FFF)
    bits = hi * _WRAP + (rem + neg * _WRAP)  # high * 65536 + low, no int32 overflow
    return bits.view(torch.float32)


def round_bf16(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16, round to nearest with ties away from zero (the bf16 parameter PAO keeps)."""
    return split_fp32(x)[0]


# ---------------------------------------------------------------------------------------------- in-place host forms
# The same bijection with preallocated buffers and fewer passes, for the chunked host update (offload_fraction).
# They rely on two facts of two's-complement int arithmetic that torch's CPU kernels follow: int32 -> int16
# conversion keeps the low 16 bits, and int16 addition wraps. ``tests/test_runtime_optim.py`` checks them against
# :func:`split_fp32` / :func:`merge_fp32` on every edge class.

LITTLE_ENDIAN = sys.byteorder == "little"
"""An int16 pair ``[low, high]`` read as int32 is ``high * 65536 + (low & 0xFFFF)`` (the in-place merge needs it)."""


def high_half_into_(master: torch.Tensor, out_bf16: torch.Tensor, work_i32: torch.Tensor) -> None:
    """``out_bf16 = round_bf16(master)`` (ties away from zero): ``((bits >> 15) + 1) >> 1`` keeps the high half plus
    bit 15 (the round-up flag) without int32 overflow; the int16 truncation wraps 0x8000 as split does."""
    w = work_i32[: master.numel()]
    torch.bitwise_right_shift(master.view(torch.int32), 15, out=w)
    w.add_(1)
    w.bitwise_right_shift_(1)
    out_bf16.view(torch.int16).copy_(w)


def merged_into_(
    param: torch.Tensor, remainder: torch.Tensor, pair: torch.Tensor, work_i16: torch.Tensor
) -> torch.Tensor:
    """The fp32 master of ``(param, remainder)`` built in ``pair`` (int16 ``[n, 2]``) and returned as its fp32 view:
    low half = the remainder's bits, high half = ``param_bits + (remainder >> 15)`` (i.e. minus one when the
    remainder is negative, wrapping 0x8000 back to 0x7FFF as merge does)."""
    n = param.numel()
    pr, w = pair[:n], work_i16[:n]
    pr[:, 0].copy_(remainder)
    torch.bitwise_right_shift(remainder, 15, out=w)
    w.add_(param.view(torch.int16))
    pr[:, 1].copy_(w)
    return pr.view(torch.int32).view(-1).view(torch.float32)


def split_from_pair_(
    pair_master: torch.Tensor,
    pair: torch.Tensor,
    out_bf16: torch.Tensor,
    out_remainder: torch.Tensor,
    work_i32: torch.Tensor,
) -> None:
    """Split the fp32 master held in ``pair`` (as :func:`merged_into_` built it) into the bf16 param and the
    remainder (the remainder is the low half's bits)."""
    n = out_bf16.numel()
    high_half_into_(pair_master, out_bf16, work_i32)
    out_remainder.copy_(pair[:n, 0])
