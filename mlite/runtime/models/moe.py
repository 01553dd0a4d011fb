"""Mixture of experts: top-k softmax router, routed SwiGLU experts held as 3D parameters, optional gated shared
expert (Qwen3-MoE, Mixtral, Qwen3-Next / Qwen3.5). HF names: ``gate.weight``, ``experts.gate_up_proj``
``[E, 2I, H]`` (gate rows first, then up), ``experts.down_proj`` ``[E, H, I]``, ``shared_expert.*``,
``shared_expert_gate.weight``.

Dispatch sorts the ``T*k`` (token, slot) pairs by expert (a stable argsort), runs each expert on its contiguous
slice -- ``torch._grouped_mm`` in one call on CUDA/bf16 when it passes a one-time probe, else one GEMM per expert
that received tokens -- and un-sorts with a permutation (no atomics, so results are deterministic).

Load-balancing loss (Switch Transformer form, per MoE layer): ``E * sum_e f_e * P_e`` with ``f_e`` the fraction
of (token, slot) pairs routed to expert ``e`` and ``P_e`` the mean router probability of ``e`` (Megatron's
``switch_load_balancing_loss_func``; 1.0 at perfect balance); computed only when the model's
``moe_aux_loss_coeff`` is > 0, and summed over MoE layers.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from .common import SwiGLU

log = logging.getLogger("mlite.runtime")

_GROUPED: dict = {}


def _grouped_mm_ok(x: torch.Tensor) -> bool:
    """One-time probe: ``torch._grouped_mm`` runs here and agrees with per-expert GEMMs (CUDA, bf16)."""
    if not (x.is_cuda and x.dtype == torch.bfloat16 and hasattr(torch, "_grouped_mm")):
        return False
    key = (x.device.index,)
    if key not in _GROUPED:
        try:
            g = torch.Generator(device=x.device).manual_seed(0)
            counts = [5, 0, 19, 8]
            a = torch.randn(sum(counts), 64, device=x.device, dtype=x.dtype, generator=g)
            w = torch.randn(len(counts), 32, 64, device=x.device, dtype=x.dtype, generator=g)
            offs = torch.tensor(counts, device=x.device).cumsum(0).to(torch.int32)
            got = torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
            ref = torch.cat([p @ w[e].t() for e, p in enumerate(a.split(counts))])
            _GROUPED[key] = bool(torch.allclose(got.float(), ref.float(), atol=1e-1, rtol=2e-2))
        except Exception as e:  # noqa: BLE001 -- any failure means: use the loop
            log.warning("torch._grouped_mm unusable (%s); MoE experts run one GEMM each",
                        str(e).splitlines()[0][:200])
            _GROUPED[key] = False
    return _GROUPED[key]


class Experts(nn.Module):
    """Routed experts as 3D parameters (the unit sharded over the expert-data-parallel mesh)."""

    def __init__(self, num_experts: int, hidden: int, ffn: int, *, device=None, dtype=None):
        super().__init__()
        self.num_experts, self.hidden, self.ffn = num_experts, hidden, ffn
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * ffn, hidden, device=device, dtype=dtype))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, ffn, device=device, dtype=dtype))

    def reset_parameters(self, std: float = 0.02) -> None:
        with torch.no_grad():
            self.gate_up_proj.normal_(0.0, std)
            self.down_proj.normal_(0.0, std)

    def forward(self, xs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """``xs[M, H]`` sorted by expert, ``counts[E]`` tokens per expert -> ``[M, H]``."""
        w1, w2 = self.gate_up_proj, self.down_proj
        if _grouped_mm_ok(xs):
            offs = counts.cumsum(0).to(torch.int32)
            h = torch._grouped_mm(xs, w1.transpose(-2, -1), offs=offs)
            gate, up = h.chunk(2, dim=-1)
            return torch._grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offs)
        outs, sizes = [], counts.tolist()
        for e, (xe, n) in enumerate(zip(xs.split(sizes), sizes)):
            if n == 0:
                continue
            gate, up = F.linear(xe, w1[e]).chunk(2, dim=-1)
            outs.append(F.linear(F.silu(gate) * up, w2[e]))
        return torch.cat(outs) if outs else xs.new_zeros(0, self.hidden)


class Router(nn.Module):
    """``gate``: a bias-free linear layer producing one logit per expert (HF ``*TopKRouter``)."""

    def __init__(self, hidden: int, num_experts: int, *, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class MoE(nn.Module):
    """Top-k softmax routing over routed experts, plus an optional shared expert with a sigmoid gate."""

    def __init__(self, hidden: int, num_experts: int, top_k: int, ffn: int, *, norm_topk_prob: bool = True,
                 shared_ffn: int = 0, shared_name: str = "shared_expert", shared_gate: bool = True,
                 device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.num_experts, self.top_k, self.norm_topk_prob = num_experts, top_k, norm_topk_prob
        self.gate = Router(hidden, num_experts, **kw)
        self.experts = Experts(num_experts, hidden, ffn, **kw)
        # expert-parallel hook (mlite.runtime.parallel.ep): None = every expert is local
        self.expert_dispatcher = None
        self.shared_name = shared_name if shared_ffn else None
        if shared_ffn:
            setattr(self, shared_name, SwiGLU(hidden, shared_ffn, **kw))
            self.shared_expert_gate = nn.Linear(hidden, 1, bias=False, **kw) if shared_gate else None
        else:
            self.shared_expert_gate = None

    def route(self, x: torch.Tensor):
        """``(probs fp32 [T, E], topk weights [T, k] in x.dtype, topk ids [T, k])``."""
        probs = torch.softmax(self.gate(x).float(), dim=-1)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return probs, weights.to(x.dtype), ids

    def forward(self, x: torch.Tensor, want_aux: bool = False):
        """``x[T, H] -> (y[T, H], aux loss scalar or None)``."""
        T, H = x.shape
        k, E = self.top_k, self.num_experts
        probs, weights, ids = self.route(x)
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=E)
        xs = x[order // k]
        ys = self.experts(xs, counts) if self.expert_dispatcher is None else self.expert_dispatcher(
            self.experts, xs, counts)
        ys = ys * weights.reshape(-1)[order, None]
        y = ys.new_empty(T * k, H).index_copy(0, order, ys).view(T, k, H).sum(dim=1)
        if self.shared_name is not None:
            s = getattr(self, self.shared_name)(x)
            if self.shared_expert_gate is not None:
                s = torch.sigmoid(self.shared_expert_gate(x)) * s
            y = y + s
        aux = None
        if want_aux:
            frac = counts.float() / float(T * k)
            aux = E * (frac * probs.mean(dim=0)).sum()
        return y, aux
