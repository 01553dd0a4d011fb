"""Fused, chunked linear + cross-entropy: the ``[n, V]`` logits never exist all at once.

Forward walks the loss positions in chunks of ``chunk`` rows: logits in fp32, log-sum-exp, the summed token losses,
and -- when gradients are wanted -- the gradients of the chunk (``softmax - onehot``) pushed straight through the
lm_head GEMMs into ``d hidden`` and ``d weight``. Backward only scales those by the incoming gradient, so the lm_head
is not recomputed and peak memory is one chunk of logits. ``d weight`` accumulates in fp32 across chunks.
"""

from __future__ import annotations

import torch

from ...models.chunks import ce_chunk_rows

_MM_OUT_DTYPE: dict = {}


def _mm_fp32(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor | None) -> torch.Tensor:
    """``acc + a @ b`` accumulated in fp32: cuBLAS bf16 GEMM with an fp32 output (CUDA, ``out_dtype``) when this
    PyTorch has it, else a GEMM in the input dtype followed by an fp32 add."""
    if a.dtype != torch.float32 and a.is_cuda and _MM_OUT_DTYPE.get("ok", True):
        try:
            if acc is None:
                return torch.mm(a, b, out_dtype=torch.float32)
            return torch.addmm(acc, a, b, out_dtype=torch.float32)
        except (TypeError, RuntimeError, NotImplementedError):
            _MM_OUT_DTYPE["ok"] = False
    prod = (a @ b).float()
    return prod if acc is None else acc.add_(prod)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk, grad_enabled):
        n = hidden.shape[0]
        want_h, want_w = grad_enabled and ctx.needs_input_grad[0], grad_enabled and ctx.needs_input_grad[1]
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        gh = torch.empty_like(hidden) if want_h else None
        single = n <= chunk
        gw = None
        for s in range(0, n, chunk):
            hc, tc = hidden[s : s + chunk], targets[s : s + chunk]
            logits = (hc @ weight.t()).float()
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, tc[:, None]).squeeze(1)).sum()
            if want_h or want_w:
                p = torch.exp(logits.sub_(lse[:, None]), out=logits)
                p[torch.arange(p.shape[0], device=p.device), tc] -= 1.0
                p = p.to(hidden.dtype)
                if gh is not None:
                    gh[s : s + chunk] = p @ weight
                if want_w:
                    gw = p.t() @ hc if single else _mm_fp32(p.t(), hc, gw)
        ctx.save_for_backward(gh, gw)
        ctx.weight_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_out):
        gh, gw = ctx.saved_tensors
        dh = None if gh is None else gh * grad_out.to(gh.dtype)
        dw = None if gw is None else (gw * grad_out.to(gw.dtype)).to(ctx.weight_dtype)
        return dh, dw, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """``sum_i CE(hidden[i] @ weight.T, targets[i])`` in fp32 (every target must be a valid class id)."""
    if hidden.shape[0] == 0:
        return (hidden.sum() + weight.sum()).float() * 0.0
    chunk = int(chunk or ce_chunk_rows(weight.shape[0]))
    return _LinearCrossEntropy.apply(hidden, weight, targets, chunk, torch.is_grad_enabled())
