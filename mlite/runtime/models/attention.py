"""Grouped-query attention over packed sequences (Llama / Qwen2 / Qwen3 / Mixtral), optionally output-gated
(Qwen3-Next / Qwen3.5: ``q_proj`` doubled, ``o = attn * sigmoid(gate)``) with partial RoPE.

The packed-sequence path is chosen once, when the model is built (:func:`packed_path`), from what this PyTorch build
and the target device/dtype support -- never by trying a kernel and catching its failure (an exception raised inside
autograd or checkpointing, such as ``torch.utils.checkpoint``'s recomputation stop, is control flow and must reach
its owner). All paths go through ``F.scaled_dot_product_attention`` or PyTorch's flash varlen op, never a loop over
tokens:

* all sequences the same length (one sequence included): one batched ``is_causal=True`` SDPA call
  ``[N, H, L, D]`` -- on CUDA this is the flash kernel;
* path ``varlen`` (CUDA, bf16/fp16, ``torch.nn.attention.varlen.varlen_attn`` present), different lengths: one flash
  varlen call over the whole packed stream;
* path ``sdpa``, different lengths: on CPU one SDPA call with a block-diagonal causal mask for streams up to
  :data:`MASK_MAX_TOKENS` tokens, else (and on CUDA) one causal SDPA call per sequence.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .common import PackInfo, RMSNorm, apply_rotary

MASK_MAX_TOKENS = 4096
"""Largest packed stream for which the CPU path builds a dense [T, T] block-diagonal mask."""

PACKED_PATHS = ("varlen", "sdpa")
"""Packed-sequence attention paths (see the module docstring)."""


def varlen_available() -> bool:
    """This PyTorch has ``torch.nn.attention.varlen.varlen_attn`` with a causal mode."""
    if importlib.util.find_spec("torch.nn.attention") is None:
        return False
    if importlib.util.find_spec("torch.nn.attention.varlen") is None:
        return False
    return "window_size" in _varlen_params() or "is_causal" in _varlen_params()


def packed_path(device, dtype: torch.dtype) -> str:
    """The packed-sequence path for a model living on ``device`` in ``dtype`` (decided once at model build)."""
    dev = torch.device(device)
    if dev.type == "cuda" and dtype in (torch.float16, torch.bfloat16) and varlen_available():
        return "varlen"
    return "sdpa"


@functools.cache
def _varlen_params() -> frozenset:
    from torch.nn.attention.varlen import varlen_attn

    return frozenset(inspect.signature(varlen_attn).parameters)


def _varlen(q, k, v, cu, max_len, scale):
    """Flash varlen attention, causal, GQA natively when the op takes ``enable_gqa`` (else K/V repeated)."""
    from torch.nn.attention.varlen import varlen_attn

    params = _varlen_params()
    kw: dict[str, Any] = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
    if "scale" in params:
        kw["scale"] = scale
    if q.shape[1] != k.shape[1]:
        if "enable_gqa" in params:
            kw["enable_gqa"] = True
        else:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return varlen_attn(q, k, v, cu, cu, max_len, max_len, **kw)


def _sdpa(q, k, v, *, scale, causal=True, mask=None):
    """SDPA on ``[B, H, L, D]``; GQA through ``enable_gqa`` (no K/V copies)."""
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal and mask is None, scale=scale, enable_gqa=gqa
    )


def _block_causal_mask(pack: PackInfo) -> torch.Tensor:
    if "block_causal_mask" not in pack.cache:
        ids = pack.seq_ids()
        T = pack.num_tokens
        causal = torch.ones(T, T, dtype=torch.bool, device=pack.device).tril()
        pack.cache["block_causal_mask"] = causal & (ids[:, None] == ids[None, :])
    return pack.cache["block_causal_mask"]


def attention_core(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pack: PackInfo, scale: float, path: str = "sdpa"
) -> torch.Tensor:
    """Causal attention within each packed sequence: ``q[T, Hq, D], k/v[T, Hkv, D] -> [T, Hq, D]``."""
    T, Hq = q.shape[0], q.shape[1]
    if pack.equal_lengths:
        n, L = pack.num_sequences, pack.max_seqlen
        qb, kb, vb = (x.reshape(n, L, x.shape[1], x.shape[2]).transpose(1, 2) for x in (q, k, v))
        return _sdpa(qb, kb, vb, scale=scale).transpose(1, 2).reshape(T, Hq, v.shape[-1])
    if path == "varlen" and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        return _varlen(q, k, v, pack.cu_seqlens, pack.max_seqlen, scale)
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

    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        *,
        qkv_bias=False,
        o_bias=False,
        qk_norm=False,
        output_gate=False,
        eps=1e-6,
        zero_centered_norm=False,
        selective_recompute=False,
        packed: str = "sdpa",
        device=None,
        dtype=None,
    ):
        super().__init__()
        if packed not in PACKED_PATHS:
            raise ValueError(f"packed attention path {packed!r}: use one of {PACKED_PATHS}")
        self.packed = packed
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.output_gate = output_gate
        self.scale = head_dim**-0.5
        self.selective_recompute = selective_recompute
        kw = dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(hidden, heads * head_dim * (2 if output_gate else 1), bias=qkv_bias, **kw)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias, **kw)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias, **kw)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=o_bias, **kw)
        if qk_norm:
            self.q_norm: RMSNorm | None = RMSNorm(head_dim, eps, zero_centered=zero_centered_norm, **kw)
            self.k_norm: RMSNorm | None = RMSNorm(head_dim, eps, zero_centered=zero_centered_norm, **kw)
        else:
            self.q_norm = self.k_norm = None
        # context-parallel hook (mlite.runtime.parallel.cp): None = attention over the local tokens
        self.cp_attention: Callable[..., torch.Tensor] | None = None

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
        if self.q_norm is not None and self.k_norm is not None:  # set together (qk_norm)
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = rope
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        # the packed path chosen at build (``self.packed``), or the CP hook: all-gathered K/V (mlite.runtime.parallel.cp)
        core, extra = (attention_core, (self.packed,)) if self.cp_attention is None else (self.cp_attention, ())
        if self.selective_recompute and torch.is_grad_enabled():
            o = checkpoint(core, q, k, v, pack, self.scale, *extra, use_reentrant=False)
        else:
            o = core(q, k, v, pack, self.scale, *extra)
        o = o.reshape(T, self.heads * hd)
        if gate is not None:
            o = o * torch.sigmoid(gate)
        return self.o_proj(o)
