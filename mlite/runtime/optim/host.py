"""The torch-op AdamW update of one flat chunk: CUDA without Triton, and the host update (CPU runs,
``offload_fraction``) where the one-pass C kernel of :mod:`.host_fused` does not build (it is that kernel's oracle).

It evaluates :func:`.adamw.adamw_inplace` (the one order of operations of every path) on the fp32 master and then
writes the bf16 parameter (and the PAO remainder) with 16-bit integer operations on the master's two halves, so a chunk
costs the AdamW passes plus two (fp32 master) or six (PAO remainder) integer passes over 2-byte halves, with work
buffers that are allocated once per group (:func:`work_buffers`) and reused every step.

The half-word forms rely on a little-endian layout (an fp32 viewed as int16 ``[n, 2]`` is ``[low, high]``) and on two
facts of two's-complement arithmetic that torch's kernels follow: an arithmetic right shift of an int16 by 15 gives
-1 for a negative value and 0 otherwise, and int16 subtraction and addition wrap. With them:

* bf16 param of a master (round to nearest, ties away from zero, :func:`.master.round_bf16`):
  ``high - (low >> 15)`` -- the high half, plus one where the low half is >= 0x8000 (0x7FFF wraps to 0x8000, as
  :func:`.master.split_fp32` does);
* master of (param, remainder): low = the remainder's bits, high = ``param + (remainder >> 15)``
  (:func:`.master.merge_fp32`); the remainder after the update is the low half.

``tests/test_runtime_optim.py`` checks both against :func:`.master.split_fp32` / :func:`.master.merge_fp32` on every
edge class. A big-endian host falls back to those functions.
"""

from __future__ import annotations

import torch

from .adamw import StepScalars, adamw_inplace, scratch
from .master import LITTLE_ENDIAN, merge_fp32, split_fp32


def work_buffers(n: int, device) -> dict:
    """Work buffers for chunks of up to ``n`` elements: the AdamW scratch, one int16 and one int16 ``[n, 2]``."""
    return {
        "fp": scratch(n, device),
        "i16": torch.empty(n, dtype=torch.int16, device=device),
        "pair": torch.empty(n, 2, dtype=torch.int16, device=device),
    }


def halves(master: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) int16 views of a contiguous fp32 tensor (little-endian)."""
    pr = master.view(torch.int16).view(-1, 2)
    return pr[:, 0], pr[:, 1]


def bf16_of_master_(master: torch.Tensor, out_bf16: torch.Tensor, work_i16: torch.Tensor) -> None:
    """``out_bf16 = round_bf16(master)`` in two int16 passes: ``high - (low >> 15)``."""
    low, high = halves(master)
    w = work_i16[: master.numel()]
    torch.bitwise_right_shift(low, 15, out=w)
    torch.sub(high, w, out=out_bf16.view(torch.int16))


def master_of_pair_(param: torch.Tensor, remainder: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
    """The fp32 master of ``(param, remainder)`` built in ``pair`` (int16 ``[n, 2]``), returned as its fp32 view."""
    n = param.numel()
    pr = pair[:n]
    torch.bitwise_right_shift(remainder, 15, out=pr[:, 1])
    pr[:, 1].add_(param.view(torch.int16))
    pr[:, 0].copy_(remainder)
    return pr.view(torch.int32).view(-1).view(torch.float32)


def update_chunk(mode: str, p: torch.Tensor, grad, state: dict, a: int, b: int, sc: StepScalars, work: dict) -> None:
    """Update ``p`` (param chunk, on the state's device) and ``state[k][a:b]`` in place (``work``:
    :func:`work_buffers` of at least ``b - a`` elements); ``mode``: ``param``, ``master`` or ``remainder``."""
    m, v = state["exp_avg"][a:b], state["exp_avg_sq"][a:b]
    fp = work["fp"]
    if mode == "param":
        adamw_inplace(p, grad, m, v, sc, fp)
    elif mode == "master":
        master = state["master"][a:b]
        adamw_inplace(master, grad, m, v, sc, fp)
        if LITTLE_ENDIAN:
            bf16_of_master_(master, p, work["i16"])
        else:
            p.copy_(split_fp32(master)[0])
    else:
        rem = state["remainder"][a:b]
        if LITTLE_ENDIAN:
            master = master_of_pair_(p, rem, work["pair"])
            adamw_inplace(master, grad, m, v, sc, fp)
            bf16_of_master_(master, p, work["i16"])
            rem.copy_(halves(master)[0])
        else:
            master = merge_fp32(p, rem)
            adamw_inplace(master, grad, m, v, sc, fp)
            hi, r = split_fp32(master)
            rem.copy_(r)
            p.copy_(hi)
