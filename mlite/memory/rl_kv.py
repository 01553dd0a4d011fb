"""KV-cache bytes of a rollout engine, per token and per sequence, on one GPU of a tensor-parallel instance.

The rules follow the engines' own KV specs:

- Full attention (GQA/MHA), vLLM ``vllm/v1/kv_cache_interface.py`` (``AttentionSpec.real_page_size_bytes`` =
  2 x block_size x num_kv_heads x head_size x dtype bytes, with ``num_kv_heads`` the per-rank count
  ``max(1, total_kv_heads // tp)`` of ``ModelConfig.get_num_kv_heads``) and SGLang
  ``python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py`` (``cell_size`` = kv_heads(tp) x head_dim
  x layers x 2 x dtype bytes). Only the full-attention layers count.
- MLA (DeepSeek-V3, Kimi-K2): ``MLAAttentionSpec`` stores one latent of ``kv_lora_rank + qk_rope_head_dim``
  values per token per layer, no factor 2 and not split over TP (every rank holds the whole latent).
- DSA (DeepSeek-V3.2 / GLM-5): the MLA latent plus the lightning indexer's key cache (``index_head_dim`` fp8 values
  and one fp32 scale per token per layer, vLLM's ``DeepseekV32IndexerCache``). With an fp8 KV cache the latent is
  stored as ``fp8_ds_mla``: 512 fp8 values, four fp32 scales and the 64 rope values in bf16, 656 bytes per token per
  layer (``MLAAttentionSpec`` with ``cache_dtype_str == "fp8_ds_mla"``; SGLang's NSA pool is the same).
- Gated DeltaNet (linear attention): ``MambaSpec`` keeps a fixed state per sequence and layer, whatever its
  length: the short-convolution state ``(conv_dim / tp) x (conv_kernel - 1)`` in the model dtype and the recurrent
  state ``(linear_num_value_heads / tp) x key_head_dim x value_head_dim`` in ``mamba_ssm_dtype`` (fp32 for
  Qwen3.5 / Qwen3-Next configs that say so), vLLM ``MambaStateShapeCalculator.gated_delta_net_state_shape``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import MliteError

DTYPE_BYTES = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "float32": 4,
    "fp32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
FULL_KINDS = ("full", "gated_full")
MLA_KINDS = ("mla", "dsa")
LINEAR_KINDS = ("gdn",)


@dataclass(frozen=True)
class KVLayout:
    """What one GPU of a rollout engine at tensor parallel size ``tp`` stores per token and per sequence."""

    bytes_per_token: int
    """KV bytes per token on one GPU (full-attention or MLA layers only)."""
    state_bytes_per_seq: int
    """Fixed bytes per sequence on one GPU (linear-attention layers' conv + recurrent state)."""
    kv_layers: int
    """Layers that store per-token KV (full attention, MLA, DSA)."""
    linear_layers: int
    """Layers that keep a fixed per-sequence state (Gated DeltaNet)."""
    kind: str
    """``gqa``, ``mla`` or ``dsa`` (what the per-token bytes are made of)."""
    kv_heads_per_gpu: int
    """KV heads one GPU stores (``max(1, kv_heads // tp)``; 1 for MLA's latent)."""

    def seq_bytes(self, tokens: int) -> int:
        """Bytes one sequence of ``tokens`` tokens needs on one GPU."""
        return self.bytes_per_token * tokens + self.state_bytes_per_seq


def dtype_bytes(name: str) -> int:
    """Bytes per element of a dtype name (``bfloat16``, ``fp8``...)."""
    key = str(name).lower()
    if key not in DTYPE_BYTES:
        raise MliteError(f"dtype {name!r} not known; use one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[key]


def kv_layout(spec, tp: int = 1, kv_dtype: str = "bfloat16", model_dtype: str = "bfloat16") -> KVLayout:
    """Per-GPU KV bytes of ``spec`` served at tensor parallel size ``tp`` (main layers only: MTP draft layers are
    not loaded unless speculative decoding is on)."""
    if tp < 1:
        raise MliteError(f"rollout tensor_model_parallel_size must be >= 1, got {tp}")
    b = dtype_bytes(kv_dtype)
    layers = spec.main_layers
    kinds = {layer.attention for layer in layers}
    unknown = kinds - set(FULL_KINDS) - set(MLA_KINDS) - set(LINEAR_KINDS)
    if unknown:
        kind = min(unknown)
        what = {"mamba2": "Mamba2 SSM state"}.get(kind, "DeepSeek-V4 compressed / sliding attention")
        raise MliteError(f"{spec.name}: the KV layout of attention kind {kind!r} ({what}) is not modelled by rl-memory")
    n_full = sum(layer.attention in FULL_KINDS for layer in layers)
    n_mla = sum(layer.attention in MLA_KINDS for layer in layers)
    n_dsa = sum(layer.attention == "dsa" for layer in layers)
    n_lin = sum(layer.attention in LINEAR_KINDS for layer in layers)
    if n_mla:
        lora, rope = int(spec.kv_lora_rank or 0), int(spec.qk_pos_emb_head_dim or 0)
        per_layer = (lora + rope) * b
        if n_dsa and b == 1:
            per_layer = lora + 4 * (lora // 128) + 2 * rope  # fp8_ds_mla: fp8 latent, fp32 tile scales, bf16 rope
        per_token = per_layer * n_mla
        if n_dsa:
            index_dim = int(spec.config.get("index_head_dim", 128))
            per_token += (index_dim + 4) * n_dsa  # fp8 key + one fp32 scale per token (the indexer cache)
        kind, heads = ("dsa" if n_dsa else "mla"), 1
    else:
        heads = max(1, spec.num_key_value_heads // tp)
        per_token = 2 * heads * spec.head_dim * b * n_full
        kind = "gqa"
    state = 0
    if n_lin:
        mb = dtype_bytes(model_dtype)
        ssm = dtype_bytes(spec.config.get("mamba_ssm_dtype") or model_dtype)
        key_dim = spec.linear_num_key_heads * spec.linear_key_head_dim
        value_dim = spec.linear_num_value_heads * spec.linear_value_head_dim
        conv = (2 * key_dim + value_dim) // tp * max(0, spec.linear_conv_kernel_dim - 1) * mb
        rec = (spec.linear_num_value_heads // tp) * spec.linear_key_head_dim * spec.linear_value_head_dim * ssm
        state = (conv + rec) * n_lin
    return KVLayout(
        bytes_per_token=int(per_token),
        state_bytes_per_seq=int(state),
        kv_layers=n_full + n_mla,
        linear_layers=n_lin,
        kind=kind,
        kv_heads_per_gpu=heads,
    )
