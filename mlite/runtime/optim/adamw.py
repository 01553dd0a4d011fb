"""AdamW arithmetic on flat fp32 tensors, in the one order of operations every path of the runtime uses.

The update is Transformer Engine FusedAdam's (what Megatron-Core runs), in fp32, with the step's scalars
(:func:`step_scalars`) rounded to fp32 once on the host::

    g    = grad * clip_coef                    (+ p * weight_decay   when decoupled_weight_decay=False)
    m    = m * beta1 + g * (1 - beta1)
    v    = v * beta2 + (g * g) * (1 - beta2)
    den  = sqrt(v * (1 / (1 - beta2**t))) + eps
    u    = (m * (1 / (1 - beta1**t))) / den
    u    = u + p * weight_decay                (decoupled, AdamW)
    p    = p - u * lr

Every operation is a separately rounded IEEE multiply, add, subtract, divide or square root: no fused multiply-add,
no ``alpha=``/``lerp``/``addcmul`` forms. :func:`adamw_inplace` (torch ops, CPU and CUDA without Triton) and the
Triton kernel of :mod:`.fused` (compiled with ``enable_fp_fusion=False``, ``div_rn``, ``sqrt_rn``) evaluate exactly
this sequence (the CPU square root through fp64, see :func:`sqrt_rn_`), so a host update (``offload_fraction=1.0``) writes the same bits as the device update. Moments stored
in bf16 are widened to fp32 for the math and rounded back to nearest even after.
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


@dataclass(frozen=True, slots=True)
class StepScalars:
    """The host-side constants of one update (each rounded to fp32 where the kernels read it)."""

    clip: float
    """Gradient scale (1.0: the multiply is skipped)."""
    b1: float
    """beta1."""
    omb1: float
    """1 - beta1."""
    b2: float
    """beta2."""
    omb2: float
    """1 - beta2."""
    ibc1: float
    """1 / (1 - beta1**t)."""
    ibc2: float
    """1 / (1 - beta2**t)."""
    eps: float
    """Denominator epsilon."""
    wd: float
    """Weight decay (0.0: the term is skipped)."""
    lr: float
    """Learning rate."""
    decoupled: bool
    """AdamW (decay on the update) or L2 (decay on the gradient)."""


def step_scalars(h: AdamWHyper) -> StepScalars:
    """Host constants of ``h`` (bias corrections computed in float64, as Python floats)."""
    return StepScalars(
        clip=float(h.clip_coef),
        b1=h.beta1,
        omb1=1.0 - h.beta1,
        b2=h.beta2,
        omb2=1.0 - h.beta2,
        ibc1=1.0 / (1.0 - h.beta1**h.step),
        ibc2=1.0 / (1.0 - h.beta2**h.step),
        eps=h.eps,
        wd=float(h.weight_decay),
        lr=h.lr,
        decoupled=h.decoupled,
    )


def scratch(n: int, device) -> list[torch.Tensor]:
    """Work buffers of ``n`` elements for :func:`adamw_inplace` (reused across chunks: no allocation inside the
    loop): three fp32, plus one fp64 on CPU for the square root."""
    device = torch.device(device)
    out = [torch.empty(n, dtype=torch.float32, device=device) for _ in range(3)]
    if device.type == "cpu":
        out.append(torch.empty(n, dtype=torch.float64, device=device))
    return out


def sqrt_rn_(x: torch.Tensor, work64: torch.Tensor | None) -> torch.Tensor:
    """In-place correctly rounded fp32 square root. PyTorch's vectorised CPU ``sqrt`` of float32 is not always
    correctly rounded (1 ulp off on some inputs); the square root of the exact fp64 widening, rounded
    once to fp32, is (53 >= 2 * 24 + 2 bits). CUDA's ``sqrt`` is IEEE already."""
    if work64 is None:
        return x.sqrt_()
    d = work64[: x.numel()]
    d.copy_(x)
    d.sqrt_()
    return x.copy_(d)


def adamw_inplace(
    p32: torch.Tensor,
    grad: torch.Tensor | None,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    s: StepScalars,
    work: list[torch.Tensor],
) -> None:
    """One AdamW update of a flat chunk, in place: ``p32`` (fp32 master) becomes the new master, the moments are
    updated. ``grad`` in any float dtype (None: zero gradient); ``work``: :func:`scratch` buffers of at least the
    chunk's size; moments fp32 or bf16."""
    n = p32.numel()
    a, b, c = (w[:n] for w in work[:3])
    if grad is None:
        a.zero_()
    else:
        a.copy_(grad)  # exact widening of a bf16 gradient
        if s.clip != 1.0:
            a.mul_(s.clip)
    if not s.decoupled and s.wd != 0.0:
        torch.mul(p32, s.wd, out=b)
        a.add_(b)
    # first moment: m = m * b1 + g * (1 - b1)   (c holds the fp32 moment when it is stored in bf16)
    m = exp_avg if exp_avg.dtype == torch.float32 else c.copy_(exp_avg)
    m.mul_(s.b1)
    torch.mul(a, s.omb1, out=b)
    m.add_(b)
    if m is not exp_avg:
        exp_avg.copy_(m)
    # u's numerator, kept in c (frees a for the second moment)
    torch.mul(m, s.ibc1, out=c)
    # second moment: v = v * b2 + (g * g) * (1 - b2)
    torch.mul(a, a, out=b)
    b.mul_(s.omb2)
    v = exp_avg_sq if exp_avg_sq.dtype == torch.float32 else a.copy_(exp_avg_sq)
    v.mul_(s.b2)
    v.add_(b)
    if v is not exp_avg_sq:
        exp_avg_sq.copy_(v)
    torch.mul(v, s.ibc2, out=b)
    sqrt_rn_(b, work[3] if len(work) > 3 else None)
    b.add_(s.eps)
    c.div_(b)  # u
    if s.decoupled and s.wd != 0.0:
        torch.mul(p32, s.wd, out=b)
        c.add_(b)
    c.mul_(s.lr)
    p32.sub_(c)


def adamw_chunk(
    p32: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, h: AdamWHyper
) -> torch.Tensor:
    """One AdamW update of a flat chunk; returns the new fp32 master and updates the moments in place.

    ``p32`` is the fp32 master (not modified), ``grad`` the gradient in any float dtype, the moments fp32 or bf16.
    """
    new = p32.to(torch.float32, copy=True)
    adamw_inplace(new, grad, exp_avg, exp_avg_sq, step_scalars(h), scratch(new.numel(), new.device))
    return new
