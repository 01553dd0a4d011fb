"""Model configs of the GPU benchmarks (Hugging Face config dicts, read by ``mlite.models.from_hf_config``)."""

DENSE_1B = {  # ~1.1 B parameters, Qwen3 layout (q/k norms), tied embeddings, Qwen's 151936-token vocabulary
    "model_type": "qwen3",
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 6144,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 40960,
    "hidden_act": "silu",
}

DENSE_SMALL = dict(
    DENSE_1B,
    hidden_size=1024,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=4,
    intermediate_size=3072,
    vocab_size=32000,
)  # ~0.15 B: the slow update-offload rows

MOE_SMALL = {  # Qwen3-MoE layout, 32 experts top-4, ~0.9 B parameters
    "model_type": "qwen3_moe",
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_size": 1024,
    "num_hidden_layers": 12,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "intermediate_size": 2816,
    "moe_intermediate_size": 512,
    "num_experts": 32,
    "num_experts_per_tok": 4,
    "norm_topk_prob": True,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 40960,
    "hidden_act": "silu",
}

HYBRID_SMALL = {  # Qwen3.5 layout: 3 Gated DeltaNet + 1 gated attention, MoE with a gated shared expert
    "model_type": "qwen3_5_moe_text",
    "architectures": ["Qwen3_5MoeForCausalLM"],
    "hidden_size": 1024,
    "num_hidden_layers": 8,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 8,
    "linear_num_value_heads": 16,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 32,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "norm_topk_prob": True,
    "partial_rotary_factor": 0.25,
    "attn_output_gate": True,
    "mtp_num_hidden_layers": 0,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000000.0,
    "max_position_embeddings": 40960,
    "hidden_act": "silu",
}

MODELS = {"dense-1b": DENSE_1B, "dense-small": DENSE_SMALL, "moe-small": MOE_SMALL, "hybrid-small": HYBRID_SMALL}

# memory validation rows: (name, model, optimizer options, sequence lengths per micro-batch, micro-batches, recompute,
# runtime context offload)
MEMORY_CONFIGS = [
    ("dense1b_fp32master_s4096", "dense-1b", {}, (4096,), 1, "none", False),
    ("dense1b_pao_s4096", "dense-1b", {"use_precision_aware_optimizer": True}, (4096,), 1, "none", False),
    (
        "dense1b_pao_bf16moments_s4096",
        "dense-1b",
        {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
        (4096,),
        1,
        "none",
        False,
    ),
    ("dense1b_fp32master_s8192", "dense-1b", {}, (8192,), 1, "none", False),
    ("dense1b_recompute_full_s8192", "dense-1b", {}, (8192,), 1, "full", False),
    (
        "dense1b_pao_mb2x4096_runtime_offload",
        "dense-1b",
        {"use_precision_aware_optimizer": True},
        (4096,),
        2,
        "none",
        True,
    ),
    ("moe_small_fp32master_s4096", "moe-small", {}, (4096,), 1, "none", False),
    (
        "moe_small_pao_bf16moments_selective_s8192",
        "moe-small",
        {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
        (8192,),
        1,
        "selective",
        False,
    ),
    ("hybrid_small_fp32master_s4096", "hybrid-small", {}, (4096,), 1, "none", False),
    ("dense_small_offload1.0_s4096", "dense-small", {"offload_fraction": 1.0}, (4096,), 1, "none", False),
    (  # Megatron-Core's distributed optimizer on one GPU (dp = 1): 2 + 2 + (2 + 4 + 4) bytes/param
        "dense1b_distopt_pao_bf16grads_s4096",
        "dense-1b",
        {"optimizer": "dist_opt", "use_precision_aware_optimizer": True, "main_grads_dtype": "bf16"},
        (4096,),
        1,
        "none",
        False,
    ),
]


def cpu_sized(cfg: dict, **overrides) -> dict:
    """``cfg``'s layout at CPU size (2 layers, hidden 128, 4 heads of 32 over 2 KV heads, vocabulary 512), for a
    bench script's CPU smoke mode; ``overrides`` set the family's own sizes (FFN, experts)."""
    return dict(
        cfg,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=512,
        **overrides,
    )
