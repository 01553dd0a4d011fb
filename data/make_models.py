"""Write the model configs of ``data/models/`` that do not come from ../shared/reference/models/.

Run from the repository root: ``.venv/bin/python data/make_models.py``. Provenance of every file is in
``data/models/README.md``. Nothing is downloaded: the large configs are the defaults of the configuration
classes that the installed transformers ships (which mirror the released checkpoints), the tiny ones are
small configs of each family for debug runs and tests on a CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "models"
DROP = {
    "transformers_version",
    "output_hidden_states",
    "return_dict",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "id2label",
    "label2id",
    "problem_type",
    "output_attentions",
    "_name_or_path",
    "dtype",
    "torch_dtype",
    "architectures",
    "pad_token_id",
    "use_cache",
}


def from_transformers(model_type: str, architecture: str) -> dict:
    from transformers import AutoConfig

    cfg = {k: v for k, v in AutoConfig.for_model(model_type).to_dict().items() if k not in DROP}
    cfg["architectures"] = [architecture]
    return cfg


def write(name: str, cfg: dict) -> None:
    (OUT / f"{name}.json").write_text(json.dumps(cfg, indent=2) + "\n")


def tiny() -> dict[str, dict]:
    base = dict(
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=512,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        hidden_act="silu",
        bos_token_id=1,
        eos_token_id=2,
    )
    moe = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True)
    mla = dict(
        q_lora_rank=32,
        kv_lora_rank=16,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        n_routed_experts=8,
        n_shared_experts=1,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        num_key_value_heads=4,
    )
    return {
        # the three kinds the lite runtime trains (vocabulary = the shipped tokenizer's 512 tokens)
        "tiny-dense": dict(base, model_type="qwen3", architectures=["Qwen3ForCausalLM"]),
        "tiny-moe": dict(base, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], **moe),
        "tiny-hybrid": dict(
            base,
            model_type="qwen3_5_moe_text",
            architectures=["Qwen3_5MoeForCausalLM"],
            layer_types=["linear_attention"] * 3 + ["full_attention"],
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            shared_expert_intermediate_size=32,
            partial_rotary_factor=0.25,
            attn_output_gate=True,
            mtp_num_hidden_layers=0,
            **moe,
        ),
        # one tiny config per other family, for the parameter oracle and mesh tests
        "tiny-llama": dict(
            base, model_type="llama", architectures=["LlamaForCausalLM"], attention_bias=True, mlp_bias=True
        ),
        "tiny-qwen2": dict(base, model_type="qwen2", architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True),
        "tiny-mixtral": dict(
            base, model_type="mixtral", architectures=["MixtralForCausalLM"], num_local_experts=4, num_experts_per_tok=2
        ),
        "tiny-qwen3-next": dict(
            base,
            model_type="qwen3_next",
            architectures=["Qwen3NextForCausalLM"],
            full_attention_interval=2,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            shared_expert_intermediate_size=32,
            **moe,
        ),
        "tiny-deepseek-v3": dict(
            base,
            model_type="deepseek_v3",
            architectures=["DeepseekV3ForCausalLM"],
            num_nextn_predict_layers=1,
            topk_method="noaux_tc",
            **mla,
        ),
        "tiny-kimi-k2": dict(
            base, model_type="kimi_k2", architectures=["DeepseekV3ForCausalLM"], num_nextn_predict_layers=0, **mla
        ),
        "tiny-glm4-moe": dict(
            base,
            model_type="glm4_moe",
            architectures=["Glm4MoeForCausalLM"],
            attention_bias=True,
            use_qk_norm=True,
            n_routed_experts=8,
            n_shared_experts=1,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            num_nextn_predict_layers=1,
            partial_rotary_factor=0.5,
        ),
        "tiny-glm5": dict(
            base,
            model_type="glm_moe_dsa",
            architectures=["GlmMoeDsaForCausalLM"],
            index_n_heads=2,
            index_head_dim=16,
            index_topk=8,
            mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
            **{k: v for k, v in mla.items() if k != "first_k_dense_replace"},
        ),
        "tiny-deepseek-v4": dict(
            {k: v for k, v in base.items() if k != "intermediate_size"},
            model_type="deepseek_v4",
            architectures=["DeepseekV4ForCausalLM"],
            num_key_value_heads=1,
            head_dim=32,
            q_lora_rank=32,
            o_groups=2,
            o_lora_rank=16,
            index_n_heads=2,
            index_head_dim=16,
            index_topk=4,
            hc_mult=2,
            n_routed_experts=8,
            n_shared_experts=1,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            num_nextn_predict_layers=0,
            sliding_window=16,
            layer_types=[
                "heavily_compressed_attention",
                "compressed_sparse_attention",
                "sliding_attention",
                "compressed_sparse_attention",
            ],
            mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        ),
    }


def main() -> None:
    write("DeepSeek-V4-Flash", from_transformers("deepseek_v4", "DeepseekV4ForCausalLM"))
    write("GLM-5", from_transformers("glm_moe_dsa", "GlmMoeDsaForCausalLM"))
    write("Mixtral-8x7B", from_transformers("mixtral", "MixtralForCausalLM"))
    kimi = json.loads((OUT / "Kimi-K2-Instruct.json").read_text())
    text = {k: v for k, v in kimi.items() if k not in ("auto_map", "quantization_config", "architectures")}
    text["model_type"] = "kimi_k2"
    write(
        "Kimi-K2.6",
        {
            "architectures": ["KimiK25ForConditionalGeneration"],
            "model_type": "kimi_k25",
            "text_config": text,
            "tie_word_embeddings": False,
        },
    )
    for name, cfg in tiny().items():
        write(name, cfg)


if __name__ == "__main__":
    main()
