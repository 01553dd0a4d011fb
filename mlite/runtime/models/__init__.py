"""Lite models over packed sequences: dense (Llama / Qwen2 / Qwen3), MoE (Qwen3-MoE, Mixtral) and hybrid
Gated DeltaNet (Qwen3-Next, Qwen3.5-MoE), built from a :class:`~mlite.models.ModelSpec`.

``build_lite_model(spec, *, param_dtype, device, seed, recompute, moe_aux_loss_coeff) -> LiteModel``.
"""

from .blocks import ATTENTION_KINDS, MLP_KINDS, DecoderBlock, LiteConfig
from .lite import RECOMPUTE, SUPPORTED_ARCHITECTURES, LiteModel, build_lite_model, lite_config
from .moe import Experts, MoE

__all__ = [
    "ATTENTION_KINDS",
    "MLP_KINDS",
    "RECOMPUTE",
    "SUPPORTED_ARCHITECTURES",
    "DecoderBlock",
    "Experts",
    "LiteConfig",
    "LiteModel",
    "MoE",
    "build_lite_model",
    "lite_config",
]
