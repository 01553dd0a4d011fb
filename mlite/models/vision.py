"""Vision-tower parameter counts of the multimodal configs the kit reads (Qwen2.5-VL, Qwen3-VL, Qwen3.5).

The tower is not part of ``ModelSpec.total`` (the language model); it is reported as ``vision_params``, and the
memory estimate holds it on the first pipeline stage, replicated across TP: Megatron-Core's ``Qwen3VLModel``
(``megatron/core/models/multimodal/qwen3_vl_model.py``) wraps the Hugging Face visual encoder as it is, and the
encoder sits with the embedding (``pre_process``). Each count is held against transformers' model on the meta device
in tests/test_models.py.
"""

from __future__ import annotations

from .config import Fields

VISION_PLACEMENT = (
    "counted on the first pipeline stage (with the embedding), replicated across TP (not parallelised), "
    "optimizer-sharded over DP like the dense part: Megatron-Core's Qwen3VLModel wraps the Hugging Face visual encoder"
)
"""How the memory estimate places the vision tower, in the words the estimate prints."""


def _merger(d_in_norm: int, merged: int, out: int, *, norm_bias: bool) -> int:
    """Patch merger: a norm, then merged -> merged -> out (both with bias)."""
    return d_in_norm * (2 if norm_bias else 1) + (merged * merged + merged) + (merged * out + out)


def qwen3_vl_vision_params(v: Fields, *, deepstack: bool) -> int:
    """Qwen3-VL / Qwen3.5 vision tower: patch embed (Conv3d with bias), learned position embedding, LayerNorm blocks
    with a fused qkv and a two-layer MLP, the merger, and (Qwen3-VL) one DeepStack merger per
    ``deepstack_visual_indexes`` entry, normed after the spatial shuffle."""
    d, inter = v.int("hidden_size"), v.int("intermediate_size")
    depth, out = v.int("depth"), v.int("out_hidden_size")
    patch, tpatch, ch = v.int("patch_size"), v.int("temporal_patch_size", 2), v.int("in_channels", 3)
    merge = v.int("spatial_merge_size", 2)
    n_pos = v.int("num_position_embeddings", 0, min_value=0)
    patch_embed = ch * tpatch * patch * patch * d + d
    block = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * inter + inter) + (inter * d + d)
    merged = d * merge * merge
    total = patch_embed + n_pos * d + depth * block + _merger(d, merged, out, norm_bias=True)
    if deepstack:
        total += len(v.list("deepstack_visual_indexes", [])) * _merger(merged, merged, out, norm_bias=True)
    return total


def qwen2_5_vl_vision_params(v: Fields) -> int:
    """Qwen2.5-VL vision tower: patch embed (Conv3d, no bias), RMSNorm blocks with a fused qkv and a SwiGLU MLP
    (all with bias), the merger (RMSNorm, then two linears)."""
    d, inter = v.int("hidden_size"), v.int("intermediate_size")
    depth, out = v.int("depth"), v.int("out_hidden_size")
    patch = v.int("patch_size", v.int("spatial_patch_size", 14))
    tpatch, ch = v.int("temporal_patch_size", 2), v.int("in_chans", v.int("in_channels", 3))
    merge = v.int("spatial_merge_size", 2)
    patch_embed = ch * tpatch * patch * patch * d
    block = 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * (d * inter + inter) + (inter * d + d)
    merged = d * merge * merge
    return patch_embed + depth * block + _merger(d, merged, out, norm_bias=False)


VISION_COUNTERS = {
    "qwen3_5_moe": lambda v: qwen3_vl_vision_params(v, deepstack=False),
    "qwen3_vl": lambda v: qwen3_vl_vision_params(v, deepstack=True),
    "qwen3_vl_moe": lambda v: qwen3_vl_vision_params(v, deepstack=True),
    "qwen2_5_vl": qwen2_5_vl_vision_params,
}
"""Top-level ``model_type`` -> vision-tower counter."""


def vision_params(model_type: str, v: Fields) -> int | None:
    """Parameters of the vision tower of ``model_type`` (None when the kit has no counter for it)."""
    count = VISION_COUNTERS.get(model_type)
    return None if count is None else count(v)
