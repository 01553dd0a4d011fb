"""Newton-Schulz orthogonalisation of a (stack of) matrix: the core of Muon's update.

Follows Emerging-Optimizers ``emerging_optimizers/orthogonalized_optimizers/muon_utils.py`` @ 0001f6e2
(``newton_schulz``, ``newton_schulz_step``; the implementation Megatron-Core's ``TensorParallelMuon`` calls): the
input is fp32; a matrix with more rows than columns is transposed so the iteration runs on the smaller Gram matrix;
it is divided by its Frobenius norm (``max(norm, eps)``, eps 1e-7); with ``fp32_matmul_prec="medium"`` the
iterations run in bf16 (the source casts explicitly), with ``"high"`` in fp32; each step is ``A = X Xᵀ``,
``B = b A + c A A``, ``X = a X + B X``; the result is returned in fp32, transposed back. The coefficient sets are
the source's ``_COEFFICIENT_SETS``: ``simple`` is Keller Jordan's (3.4445, -4.7750, 2.0315) every step
(https://kellerjordan.github.io/posts/muon/), ``quintic`` the five tuned sets of modded-nanogpt, cycled. The
buffers alive at once are the ones :func:`mlite.memory.muon.ns_workspace_bytes` counts.
"""

from __future__ import annotations

import torch

COEFFICIENTS = {
    "simple": ((3.4445, -4.7750, 2.0315),),
    "quintic": (
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ),
}
"""Coefficient sets ``(a, b, c)`` by ``muon_coefficient_type``; step i uses set ``i % len``."""
EPS = 1e-7
"""Floor of the Frobenius norm."""


def newton_schulz(x: torch.Tensor, steps: int, coefficients: str = "quintic", prec: str = "medium") -> torch.Tensor:
    """The orthogonalised ``x`` (fp32, shape ``(..., rows, cols)``; leading dimensions are independent matrices)."""
    if x.dtype != torch.float32 or x.dim() < 2:
        raise ValueError(f"newton_schulz: an fp32 tensor of 2 or more dimensions, got {x.dtype} {tuple(x.shape)}")
    sets = COEFFICIENTS[coefficients]
    transpose = x.size(-2) > x.size(-1)
    if transpose:
        x = x.mT
    norm = torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True).clamp_min(EPS)
    X = x / norm
    if prec == "medium":
        X = X.to(torch.bfloat16)
    for i in range(steps):
        a, b, c = sets[i % len(sets)]
        A = X @ X.mT
        B = torch.baddbmm(A, A, A, beta=b, alpha=c) if A.dim() == 3 else torch.addmm(A, A, A, beta=b, alpha=c)
        X = torch.baddbmm(X, B, X, beta=a, alpha=1.0) if X.dim() == 3 else torch.addmm(X, B, X, beta=a, alpha=1.0)
        del A, B
    X = X.to(torch.float32)
    return X.mT if transpose else X


def spectral_scale(rows: int, cols: int, extra: float = 1.0) -> float:
    """Megatron-Core's default ``muon_scale_mode="spectral"``: sqrt(max(rows, cols)) x ``extra``
    (Emerging-Optimizers ``get_muon_scale_factor``; an orthogonal matrix's RMS is 1 / sqrt(max(rows, cols)))."""
    return max(rows, cols) ** 0.5 * extra
