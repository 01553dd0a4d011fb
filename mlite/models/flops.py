"""Model FLOPs per token: MFU = FLOPs per token x tokens/s / peak FLOP/s.

Forward FLOPs per token = 2 x (matrix parameters a token touches: attention and MLP projections, the routed
experts it is sent to, the output projection -- the lm_head, or with tied embeddings the embedding matrix it
shares (vocab x hidden); not the embedding lookup, final norm or the routers)
+ attention score work: full/gated/MLA attention 2 x 2 x heads x (qk_dim + v_dim)/2 x context, with context =
seq_len/2 when causal. Gated DeltaNet (chunked, chunk 64): 2 x value_heads x (2 x key_dim x value_dim + 64 x
(key_dim + value_dim)). DeepSeek-V4 compressed attention: full attention over seq/compress_rate entries (CSA:
index_topk entries) plus a sliding window. Mamba2 (Nemotron-H): the SSM scan is 7 x d_inner x state per token, the
term of Megatron-LM's ``mamba_layer_flops`` (megatron/training/training.py); its projections are matrix parameters.
Training = 3 x forward (backward is twice the forward).
"""

from __future__ import annotations

_MATRIX_COMPONENTS = (
    "attention",
    "linear_attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "lm_head",
    "hyper_connections",
    "other",
)


def attention_flops(spec, layer, seq_len: int, causal: bool) -> float:
    """Forward FLOPs per token of one layer's token mixer beyond its projections (scores and values, the delta rule, the
    SSM scan)."""
    ctx = seq_len / 2 if causal else seq_len
    if layer.attention == "none":
        return 0.0
    if layer.attention == "mamba2":
        return 7 * spec.mamba_num_heads * spec.mamba_head_dim * spec.mamba_state_dim
    if layer.attention in ("full", "gated_full", "mla", "dsa"):
        return 2 * spec.num_attention_heads * (spec.head_dim + spec.v_head_dim) * ctx
    if layer.attention == "gdn":
        dk, dv, nv = spec.linear_key_head_dim, spec.linear_value_head_dim, spec.linear_num_value_heads
        return 2 * nv * (2 * dk * dv + 64 * (dk + dv))
    cfg = spec.config
    window = cfg.get("sliding_window", 128)
    rates = {
        "csa": 4,
        "hca": 128,
        **{
            {"compressed_sparse_attention": "csa", "heavily_compressed_attention": "hca"}[k]: v
            for k, v in (cfg.get("compress_rates") or {}).items()
        },
    }
    entries = min(ctx, window)
    if layer.attention == "csa":
        entries += min(ctx / rates["csa"], cfg.get("index_topk", 512))
    elif layer.attention == "hca":
        entries += ctx / rates["hca"]
    return 2 * spec.num_attention_heads * (spec.head_dim + spec.v_head_dim) * entries


def output_projection(spec) -> int:
    """Parameters of the output projection a token goes through: the lm_head, or the embedding matrix when tied."""
    head = sum(g.numel for g in spec.post if g.component == "lm_head")
    return head or (spec.vocab_size * spec.hidden_size if spec.tie_word_embeddings else 0)


def flops_per_token(spec, seq_len: int, *, training: bool = True, causal: bool = True) -> float:
    """Training (or forward-only) FLOPs per token of the main model at sequence length ``seq_len``."""
    matrix = float(output_projection(spec))
    for g in spec.post:
        if g.component in _MATRIX_COMPONENTS and g.component != "lm_head":
            matrix += g.numel
    attn = 0.0
    for layer in spec.main_layers:
        by = layer.by_component()
        for comp in _MATRIX_COMPONENTS:
            n = by.get(comp, 0)
            if comp == "routed_experts" and spec.num_experts:
                n = n * spec.moe_router_topk / spec.num_experts
            matrix += n
        attn += attention_flops(spec, layer, seq_len, causal)
    forward = 2 * matrix + attn
    return 3 * forward if training else forward
