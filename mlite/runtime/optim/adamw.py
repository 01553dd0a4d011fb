"""AdamW arithmetic on flat fp32 shards (one chunk of one parameter's local shard at a time).

The update is Transformer Engine FusedAdam's (what Megatron-Core runs), in fp32::

    g   = grad * clip_coef                     (+ weight_decay * p   when decoupled_weight_decay=False)
    m   = beta1 * m + (1 - beta1) * g
    v   = beta2 * v + (1 - beta2) * g * g
    u   = (m / (1 - beta1**t)) / (sqrt(v / (1 - beta2**t)) + eps)
    u  += weight_decay * p                    (decoupled, AdamW)
    p   = p - lr * u

Only plain element-wise multiply/add/divide/sqrt are used (each correctly rounded, no fused multiply-add, no
``alpha=`` forms), so the same inputs give the same bits whatever the chunking and, as far as IEEE arithmetic goes, on
CPU and CUDA. Moments stored in bf16 are widened to fp32 for the math and rounded back (to nearest even) after.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class AdamWHyper:
    """Scalars of one AdamW step."""

    lr: float
    """Learning rate of this step."""
    beta1: float
    """First-moment decay."""
    beta2: float
    """Second-moment decay."""
    eps: float
    """Denominator epsilon."""
    weight_decay: float
    """Weight decay of this parameter (0 for biases and 1-D tensors)."""
    step: int
    """1-based step count of this parameter's state (bias correction)."""
    decoupled: bool = True
    """AdamW (True) or Adam + L2 (False)."""
    clip_coef: float = 1.0
    """Gradient scale from global-norm clipping (1.0 = none)."""


def adamw_chunk(p32: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                h: AdamWHyper) -> torch.Tensor:
    """One AdamW update of a flat chunk; returns the new fp32 master and updates the moments in place.

    ``p32`` is the fp32 master (not modified), ``grad`` the gradient in any float dtype, the moments fp32 or bf16.
    """
    g = grad.to(torch.float32)
    if h.clip_coef != 1.0:
        g = g * h.clip_coef
    if not h.decoupled and h.weight_decay != 0.0:
        g = g + p32 * h.weight_decay
    m = exp_avg.to(torch.float32)
    v = exp_avg_sq.to(torch.float32)
    m = m * h.beta1 + g * (1.0 - h.beta1)
    v = v * h.beta2 + (g * g) * (1.0 - h.beta2)
    bc1 = 1.0 - h.beta1 ** h.step
    bc2 = 1.0 - h.beta2 ** h.step
    update = (m / bc1) / ((v / bc2).sqrt() + h.eps)
    if h.decoupled and h.weight_decay != 0.0:
        update = update + p32 * h.weight_decay
    new = p32 - update * h.lr
    exp_avg.copy_(m)
    exp_avg_sq.copy_(v)
    return new
