"""Grouped-query attention over packed sequences (Llama / Qwen2 / Qwen3 / Mixtral), optionally output-gated
(Qwen3-Next / Qwen3.5: ``q_proj`` doubled, ``o = attn * sigmoid(gate)``) with partial RoPE.

The attention core picks one path per forward (all through ``F.scaled_dot_product_attention`` or PyTorch's
flash varlen op, never a loop over tokens):

* all sequences the same length (one sequence included): one batched ``is_causal=True`` SDPA call
  ``[N, H, L, D]`` -- on CUDA this is the flash kernel;
* CUDA, different lengths, bf16/fp16: ``torch.nn.attention.varlen.varlen_attn`` (flash varlen) when this PyTorch
  has it (disabled for the rest of the run, with one warning, if it ever raises), else one causal SDPA call per
  sequence (fp32 on CUDA always takes this path);
* CPU, different lengths: one SDPA call with a block-diagonal causal mask for streams up to
  :data:`MASK_MAX_TOKENS` tokens, else one causal SDPA call per sequence.
"""

from __future__ import annotations

import inspect
import logging

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .common import PackInfo, RMSNorm, apply_rotary

log = logging.getLogger("mlite.runtime")

MASK_MAX_TOKENS = 4096
"""Largest packed stream for which the CPU path builds a dense [T, T] block-diagonal mask."""

_VARLEN: dict = {}


def _varlen_fn():
    """PyTorch's flash varlen attention as ``fn(q, k, v, cu, max_len) -> out`` (or None), probed once."""
    if "fn" in _VARLEN:
        return _VARLEN["fn"]
    _VARLEN["fn"] = None
    try:
        from torch.nn.attention.varlen import varlen_attn

        params = inspect.signature(varlen_attn).parameters
        causal = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
        native_gqa = "enable_gqa" in params
        if "window_size" in params or "is_causal" in params:
            def fn(q, k, v, cu, max_len):
                kw = dict(causal)
                if q.shape[1] != k.shape[1]:
                    if native_gqa:
                        kw["enable_gqa"] = True
                    else:
                        rep = q.shape[1] // k.shape[1]
                        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
                return varlen_attn(q, k, v, cu, cu, max_len, max_len, **kw)
            _VARLEN["fn"] = fn
    except Exception:  # noqa: BLE001 -- older PyTorch: no varlen op
        pass
    return _VARLEN["fn"]


def _disable_varlen(err: Exception) -> None:
    log.warning("flash varlen attention unavailable (%s); packed sequences use one SDPA call each",
                str(err).splitlines()[0][:200])
    _VARLEN["fn"] = None


def _sdpa(q, k, v, *, scale, causal=True, mask=None):
    """SDPA on ``[B, H, L, D]``; GQA through ``enable_gqa`` (no K/V copies)."""
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None, scale=scale,
                                          enable_gqa=gqa)


def _block_causal_mask(pack: PackInfo) -> torch.Tensor:
    if "block_causal_mask" not in pack.cache:
        ids = pack.seq_ids()
        T = pack.num_tokens
        causal = torch.ones(T, T, dtype=torch.bool, device=pack.device).tril()
        pack.cache["block_causal_mask"] = causal & (ids[:, None] == ids[None, :])
    return pack.cache["block_causal_mask"]


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pack: PackInfo, scale: float) -> torch.Tensor:
    """Causal attention within each packed sequence: ``q[T, Hq, D], k/v[T, Hkv, D] -> [T, Hq, D]``."""
    T, Hq, D = q.shape
    if pack.equal_lengths:
        n, L = pack.num_sequences, pack.max_seqlen
        qb, kb, vb = (x.reshape(n, L, x.shape[1], x.shape[2]).transpose(1, 2) for x in (q, k, v))
        return _sdpa(qb, kb, vb, scale=scale).transpose(1, 2).reshape(T, Hq, v.shape[-1])
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):  # flash varlen: half precision only
        fn = _varlen_fn()
        if fn is not None:
            try:
                return fn(q, k, v, pack.cu_seqlens, pack.max_seqlen)
            except Exception as e:  # unsupported dtype / head dim / build: fall back for the rest of the run
                _disable_varlen(e)
    if not q.is_cuda and T <= MASK_MAX_TOKENS:
        mask = _block_causal_mask(pack)
        qb, kb, vb = (x.transpose(0, 1)[None] for x in (q, k, v))
        return _sdpa(qb, kb, vb, scale=scale, mask=mask)[0].transpose(0, 1)
    outs, start = [], 0
    for n in pack.lengths:
        sl = slice(start, start + n)
        qb, kb, vb = (x[sl].transpose(0, 1)[None] for x in (q, k, v))
        outs.append(_sdpa(qb, kb, vb, scale=scale)[0].transpose(0, 1))
        start += n
    return torch.cat(outs, dim=0)


class Attention(nn.Module):
    """GQA self-attention with HF parameter names (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, ``q_norm``,
    ``k_norm``). ``output_gate`` doubles ``q_proj``: per head, the first ``head_dim`` outputs are the query and the
    next ``head_dim`` the gate (Qwen3-Next / Qwen3.5 layout)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, *, qkv_bias=False, o_bias=False,
                 qk_norm=False, output_gate=False, eps=1e-6, zero_centered_norm=False, selective_recompute=False,
                 device=None, dtype=None):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.output_gate = output_gate
        self.scale = head_dim ** -0.5
        self.selective_recompute = selective_recompute
        kw = dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(hidden, heads * head_dim * (2 if output_gate else 1), bias=qkv_bias, **kw)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias, **kw)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias, **kw)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=o_bias, **kw)
        if qk_norm:
            self.q_norm = RMSNorm(head_dim, eps, zero_centered=zero_centered_norm, **kw)
            self.k_norm = RMSNorm(head_dim, eps, zero_centered=zero_centered_norm, **kw)
        else:
            self.q_norm = self.k_norm = None
        # context-parallel hook (mlite.runtime.parallel.cp): None = attention over the local tokens
        self.cp_attention = None

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], pack: PackInfo) -> torch.Tensor:
        T = x.shape[0]
        hd = self.head_dim
        q = self.q_proj(x)
        gate = None
        if self.output_gate:
            q, gate = q.view(T, self.heads, 2 * hd).chunk(2, dim=-1)
            gate = gate.reshape(T, self.heads * hd)
        q = q.reshape(T, self.heads, hd)
        k = self.k_proj(x).view(T, self.kv_heads, hd)
        v = self.v_proj(x).view(T, self.kv_heads, hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = rope
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        core = attention_core if self.cp_attention is None else self.cp_attention
        if self.selective_recompute and torch.is_grad_enabled():
            o = checkpoint(core, q, k, v, pack, self.scale, use_reentrant=False)
        else:
            o = core(q, k, v, pack, self.scale)
        o = o.reshape(T, self.heads * hd)
        if gate is not None:
            o = o * torch.sigmoid(gate)
        return self.o_proj(o)
