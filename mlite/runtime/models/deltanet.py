"""Gated DeltaNet token mixer (Qwen3-Next / Qwen3.5 ``linear_attn``) over packed sequences.

Per token: ``qkv = conv(in_proj_qkv(x))`` (short causal depthwise conv, kernel 4, SiLU; restarted at every sequence),
split into q/k (``H`` key heads) and v (``HV`` value heads); ``z = in_proj_z(x)`` the output gate;
``beta = sigmoid(in_proj_b(x))``; ``g = -exp(A_log) * softplus(in_proj_a(x) + dt_bias)``; q, k L2-normalised; the
gated delta rule (:mod:`mlite.runtime.gdn`) gives ``o[T, HV, V]``; ``out_proj(rmsnorm(o) * weight * silu(z))``.

Qwen3.5 names (``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``) are the default; Qwen3-Next's fused
``in_proj_qkvz`` / ``in_proj_ba`` (grouped per key head, as HF's ``fix_query_key_value_ordering``) with
``fused=True``. The conv channels are ``[q (H*K), k (H*K), v (HV*V)]`` in both.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..gdn import causal_conv1d_packed, gated_delta_rule
from .common import GatedRMSNorm, PackInfo


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet linear attention with HF parameter names."""

    def __init__(
        self,
        hidden: int,
        key_heads: int,
        value_heads: int,
        key_dim: int,
        value_dim: int,
        conv_kernel: int,
        *,
        eps: float = 1e-6,
        fused: bool = False,
        selective_recompute: bool = False,
        chunk_size: int | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.h, self.hv, self.dk, self.dv = key_heads, value_heads, key_dim, value_dim
        self.key_dim_total, self.value_dim_total = key_heads * key_dim, value_heads * value_dim
        self.conv_dim = 2 * self.key_dim_total + self.value_dim_total
        self.fused = fused
        self.selective_recompute = selective_recompute
        self.chunk_size = chunk_size
        if fused:
            self.in_proj_qkvz = nn.Linear(hidden, self.conv_dim + self.value_dim_total, bias=False, **kw)
            self.in_proj_ba = nn.Linear(hidden, 2 * value_heads, bias=False, **kw)
        else:
            self.in_proj_qkv = nn.Linear(hidden, self.conv_dim, bias=False, **kw)
            self.in_proj_z = nn.Linear(hidden, self.value_dim_total, bias=False, **kw)
            self.in_proj_b = nn.Linear(hidden, value_heads, bias=False, **kw)
            self.in_proj_a = nn.Linear(hidden, value_heads, bias=False, **kw)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, conv_kernel, groups=self.conv_dim, bias=False, **kw)
        self.dt_bias = nn.Parameter(torch.empty(value_heads, **kw))
        self.A_log = nn.Parameter(torch.empty(value_heads, **kw))
        self.norm = GatedRMSNorm(value_dim, eps, **kw)
        self.out_proj = nn.Linear(self.value_dim_total, hidden, bias=False, **kw)

    def reset_parameters(self, std: float = 0.02) -> None:
        """HF init: projections and conv normal(0, std), ``dt_bias = 1``, ``A_log = log(U(0, 16))``, norm 1."""
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Conv1d)):
                    m.weight.normal_(0.0, std)
            self.dt_bias.fill_(1.0)
            self.A_log.copy_(torch.empty_like(self.A_log).uniform_(1e-4, 16).log())
            self.norm.reset_parameters()

    def _projections(self, x: torch.Tensor):
        T = x.shape[0]
        if not self.fused:
            return self.in_proj_qkv(x), self.in_proj_z(x), self.in_proj_b(x), self.in_proj_a(x)
        r = self.hv // self.h
        qkvz = self.in_proj_qkvz(x).view(T, self.h, 2 * self.dk + 2 * r * self.dv)
        q, k, v, z = qkvz.split((self.dk, self.dk, r * self.dv, r * self.dv), dim=-1)
        ba = self.in_proj_ba(x).view(T, self.h, 2 * r)
        b, a = ba.split((r, r), dim=-1)
        qkv = torch.cat((q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)), dim=-1)
        return qkv, z.reshape(T, -1), b.reshape(T, -1), a.reshape(T, -1)

    def forward(self, x: torch.Tensor, rope, pack: PackInfo) -> torch.Tensor:
        T = x.shape[0]
        qkv, z, b, a = self._projections(x)
        seq_pos = None if pack.num_sequences == 1 else pack.seq_pos()
        qkv = F.silu(causal_conv1d_packed(qkv, self.conv1d.weight, seq_pos))
        q, k, v = qkv.split((self.key_dim_total, self.key_dim_total, self.value_dim_total), dim=-1)
        q, k = q.reshape(T, self.h, self.dk), k.reshape(T, self.h, self.dk)
        v = v.reshape(T, self.hv, self.dv)
        beta = torch.sigmoid(b)
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())
        args = (q, k, v, g, beta)
        kw: dict[str, Any] = dict(
            lengths=pack.lengths, cu_seqlens=pack.cu_seqlens, use_qk_l2norm=True, chunk_size=self.chunk_size
        )
        if self.selective_recompute and torch.is_grad_enabled():
            o = checkpoint(lambda *t: gated_delta_rule(*t, **kw), *args, use_reentrant=False)
        else:
            o = gated_delta_rule(*args, **kw)
        o = self.norm(o, z.reshape(T, self.hv, self.dv))
        return self.out_proj(o.reshape(T, self.value_dim_total))
