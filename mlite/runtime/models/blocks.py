"""One decoder block (the FSDP2 unit): pre-norm token mixer + pre-norm MLP, HF layer names.

``input_layernorm`` -> ``self_attn`` (full / gated_full) or ``linear_attn`` (gdn) -> residual ->
``post_attention_layernorm`` -> ``mlp`` (SwiGLU or MoE) -> residual.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...errors import MliteError
from .attention import Attention
from .common import PackInfo, RMSNorm, RopeConfig, SwiGLU
from .deltanet import GatedDeltaNet
from .moe import MoE

ATTENTION_KINDS = ("full", "gated_full", "gdn")
"""Token mixers the lite runtime builds."""
MLP_KINDS = ("dense", "moe")
"""MLP kinds the lite runtime builds."""


@dataclass(frozen=True, kw_only=True)
class LiteConfig:
    """Everything the lite model needs, read from a :class:`~mlite.models.ModelSpec` and its config dict."""

    architecture: str
    """Architecture as the model catalog reads it (``qwen3``, ``qwen3_moe``, ``qwen3_5_moe``...)."""
    hidden_size: int
    """Model width."""
    vocab_size: int
    """Vocabulary size."""
    num_attention_heads: int
    """Query heads of full attention."""
    num_key_value_heads: int
    """Key/value heads of full attention."""
    head_dim: int
    """Head dimension of full attention."""
    ffn_hidden_size: int
    """Dense MLP width."""
    moe_ffn_hidden_size: int
    """Routed expert width."""
    num_experts: int
    """Routed experts per MoE layer."""
    moe_router_topk: int
    """Experts per token."""
    shared_expert_ffn_hidden_size: int
    """Shared expert width (0: none)."""
    norm_topk_prob: bool
    """Renormalise the top-k router probabilities to sum to 1."""
    rms_norm_eps: float
    """RMSNorm epsilon."""
    zero_centered_norm: bool
    """RMSNorm scale is ``1 + weight`` (Qwen3-Next / Qwen3.5)."""
    rope: RopeConfig
    """Rotary embedding settings (partial rotary for the hybrid models)."""
    tie_word_embeddings: bool
    """lm_head shares the embedding matrix."""
    initializer_range: float
    """Std of the normal init of linear / embedding / expert weights."""
    linear_num_key_heads: int = 0
    """Gated DeltaNet key heads."""
    linear_num_value_heads: int = 0
    """Gated DeltaNet value heads."""
    linear_key_head_dim: int = 0
    """Gated DeltaNet key head dim."""
    linear_value_head_dim: int = 0
    """Gated DeltaNet value head dim."""
    linear_conv_kernel_dim: int = 4
    """Gated DeltaNet short-convolution width."""
    recompute: str = "none"
    """``none``, ``selective`` (attention / delta-rule core) or ``full`` (whole blocks)."""
    packed_attention: str = "sdpa"
    """Packed-sequence attention path, chosen at build (:func:`~mlite.runtime.models.attention.packed_path`)."""
    expert_path: str = "loop"
    """MoE expert GEMM path, chosen at build (:func:`~mlite.runtime.models.moe.expert_path`)."""


class DecoderBlock(nn.Module):
    """Pre-norm decoder block with HF layer names."""

    def __init__(
        self, cfg: LiteConfig, attention: str, mlp: str, names: set[str], *, index: int = 0, device=None, dtype=None
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        h, eps, zc = cfg.hidden_size, cfg.rms_norm_eps, cfg.zero_centered_norm
        selective = cfg.recompute == "selective"
        self.index, self.attention_kind, self.mlp_kind = index, attention, mlp
        if attention not in ATTENTION_KINDS:
            raise MliteError(
                f"layer {index}: attention kind '{attention}' is not supported by the lite runtime "
                f"(supported: {', '.join(ATTENTION_KINDS)})"
            )
        if mlp not in MLP_KINDS:
            raise MliteError(
                f"layer {index}: mlp kind '{mlp}' is not supported by the lite runtime "
                f"(supported: {', '.join(MLP_KINDS)})"
            )
        self.input_layernorm = RMSNorm(h, eps, zero_centered=zc, **kw)
        if attention == "gdn":
            self.linear_attn = GatedDeltaNet(
                h,
                cfg.linear_num_key_heads,
                cfg.linear_num_value_heads,
                cfg.linear_key_head_dim,
                cfg.linear_value_head_dim,
                cfg.linear_conv_kernel_dim,
                eps=eps,
                fused="linear_attn.in_proj_qkvz.weight" in names,
                selective_recompute=selective,
                **kw,
            )
        else:
            self.self_attn = Attention(
                h,
                cfg.num_attention_heads,
                cfg.num_key_value_heads,
                cfg.head_dim,
                qkv_bias="self_attn.q_proj.bias" in names,
                o_bias="self_attn.o_proj.bias" in names,
                qk_norm="self_attn.q_norm.weight" in names,
                output_gate=attention == "gated_full",
                eps=eps,
                zero_centered_norm=zc,
                selective_recompute=selective,
                packed=cfg.packed_attention,
                **kw,
            )
        self.post_attention_layernorm = RMSNorm(h, eps, zero_centered=zc, **kw)
        if mlp == "moe":
            shared_name = "shared_experts" if "mlp.shared_experts.gate_proj.weight" in names else "shared_expert"
            self.mlp: MoE | SwiGLU = MoE(
                h,
                cfg.num_experts,
                cfg.moe_router_topk,
                cfg.moe_ffn_hidden_size,
                norm_topk_prob=cfg.norm_topk_prob,
                shared_ffn=cfg.shared_expert_ffn_hidden_size,
                shared_name=shared_name,
                shared_gate="mlp.shared_expert_gate.weight" in names,
                expert_path=cfg.expert_path,
                **kw,
            )
        else:
            self.mlp = SwiGLU(h, cfg.ffn_hidden_size, bias="mlp.gate_proj.bias" in names, **kw)

    @property
    def mixer(self) -> nn.Module:
        return self.linear_attn if self.attention_kind == "gdn" else self.self_attn

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], pack: PackInfo, want_aux: bool = False):
        """``x[T, h] -> (x[T, h], MoE aux loss or None)``."""
        x = x + self.mixer(self.input_layernorm(x), rope, pack)
        y = self.post_attention_layernorm(x)
        if self.mlp_kind == "moe":
            y, aux = self.mlp(y, want_aux)
        else:
            y, aux = self.mlp(y), None
        return x + y, aux
