"""Model catalog: exact parameter accounting against official figures and the transformers meta-device oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, assert_one_line_error, run_cli

from mlite.errors import ConfigError
from mlite.models import COMPONENTS, available_models, from_hf_config
from mlite.models.hf_meta import meta_param_count, transformers_knows

# Official figures from ../shared/reference/models/README.md. "exact" rows are checkpoint-derived counts
# (safetensors total_size / 2 or the Hugging Face parameter metadata): the kit must reproduce them to the
# parameter. "card" rows are model-card figures, compared within 0.5 %.
OFFICIAL = {
    # name: (kind, figure, what the figure counts)
    "Qwen3-8B": ("exact", 8_190_735_360, "total"),
    "Qwen3-30B-A3B": ("exact", 30_532_122_624, "total"),
    "Qwen3-235B-A22B": ("exact", 235_093_634_560, "total"),
    "Qwen3-Next-80B-A3B-Thinking": ("exact", 81_324_862_720, "total"),  # HF count, main + MTP
    "Qwen3.5-35B-A3B": ("exact", 35_951_822_704, "total+vision"),  # HF count: text + MTP + vision
    "Llama-3.1-8B": ("exact", 8_030_261_248, "total"),
    "Llama-3.1-70B": ("exact", 70_553_706_496, "total"),
    "DeepSeek-V3": ("card", 685e9, "total"),  # 671B main + 14B MTP on the hub (FP8 checkpoint: no byte count)
    # data/models/README.md: Hy3-preview card "Total Parameters 295B" (+ 3.8B MTP, not counted on the meta device)
    "Hy3": ("card", 295e9, "total"),
    "Moonlight-16B-A3B-Instruct": ("card", 16e9, "total"),  # Moonlight card: 16B total / 3B activated
    # data/models/README.md: Qwen2.5-VL-7B-Instruct's HF count 8,292,166,656 (checkpoint: text + vision)
    "Qwen2.5-VL-7B-Instruct-derived": ("exact", 8_292_166_656, "total+vision"),
    "Qwen3-VL-8B-Instruct": ("exact", 8_767_123_696, "total+vision"),  # HF count of Qwen/Qwen3-VL-8B-Instruct
}
# The README's "computed" column (summing every tensor the architecture defines), where no checkpoint count exists.
COMPUTED = {
    "DeepSeek-V3": dict(main=671_026_419_200, mtp=13_463_426_304, active=37_552_297_472),
    "Kimi-K2-Instruct": dict(main=1_026_408_232_448, mtp=0, active=32_861_500_928),
    "Qwen3-30B-A3B": dict(active=3_353_032_704),
    "Qwen3-235B-A22B": dict(active=22_190_763_520),
    "Qwen3-Next-80B-A3B-Thinking": dict(main=79_674_391_296, mtp=1_650_471_424, active=3_874_929_408),
    "Qwen3.5-35B-A3B": dict(main=34_660_610_688, mtp=844_640_768, active=3_454_988_928),
}


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_official_totals(name):
    spec = from_hf_config(name)
    kind, figure, what = OFFICIAL[name]
    ours = spec.total + (spec.vision_params or 0) if what == "total+vision" else spec.total
    if kind == "exact":
        assert ours == figure
    else:
        assert abs(ours - figure) / figure < 0.005, (ours, figure)


@pytest.mark.parametrize("name", sorted(COMPUTED))
def test_computed_column(name):
    spec = from_hf_config(name)
    want = COMPUTED[name]
    if "main" in want:
        assert spec.total - spec.mtp == want["main"]
        assert spec.mtp == want["mtp"]
    assert spec.active == want["active"]


def test_deepseek_v3_mtp_unique_part():
    # README_WEIGHTS.md: MTP is 11.5B unique, not counting its copies of the 0.9B embedding and 0.9B head
    spec = from_hf_config("DeepSeek-V3")
    unique = spec.mtp - sum(g.numel for layer in spec.mtp_layers for g in layer.groups if g.checkpoint_only)
    assert unique == 11_610_068_224
    assert spec.training_params == spec.total - 2 * 129280 * 7168


def _oracle_input(spec):
    """The language-model config and the transformers model type that reads it.

    ``spec.config`` is the text part of a multimodal config (its own ``model_type``, e.g. ``qwen3_5_moe_text``):
    handing it to the multimodal type would build transformers' default text model instead.
    """
    cfg = dict(spec.config)
    for key in ("vision_config", "rope_scaling"):  # Qwen2.5-VL: text fields at the top level; mrope is not qwen2's
        cfg.pop(key, None)
    mt = cfg.pop("model_type", None) or spec.model_type
    if mt in ("kimi_k2", "kimi_k25"):
        mt = "deepseek_v3"  # Kimi ships remote code; it is DeepSeek-V3
    # multimodal text parts have no causal-LM class of their own; mimo ships remote code: the same layouts
    mt = {"qwen3_vl_text": "qwen3", "qwen3_vl_moe_text": "qwen3_moe", "qwen2_5_vl": "qwen2", "mimo": "qwen2"}.get(
        mt, mt
    )
    return cfg, mt


NO_TRANSFORMERS_CLASS = {
    # tests/test_ngram_memory.py holds its Engram tables to the fork's figures instead
    "DeepSeek-V4.1-Flash-derived": "deepseek_v41 is registered only by the ISEEKYAN/Megatron-LM fork's model registry",
}
"""Shipped configs transformers has no model class for (no meta-device oracle exists), with the reason."""
WITH_ORACLE = [n for n in available_models() if n not in NO_TRANSFORMERS_CLASS]


@pytest.mark.parametrize("name", WITH_ORACLE)
def test_meta_device_oracle(name):
    """total (MTP left out, router expert biases counted) equals the transformers model's element count."""
    spec = from_hf_config(name)
    cfg, mt = _oracle_input(spec)
    assert transformers_knows(mt), f"{name}: transformers ships {mt}"
    params, router_bias_buffers = meta_param_count(cfg, mt)
    assert spec.total - spec.mtp == params + router_bias_buffers


# Multimodal checkpoints: transformers' conditional-generation model (text + vision tower, no MTP) on the meta device.
MULTIMODAL = {
    "Qwen2.5-VL-7B-Instruct-derived": "Qwen2_5_VLForConditionalGeneration",
    "Qwen3-VL-8B-Instruct": "Qwen3VLForConditionalGeneration",
    "Qwen3-VL-30B-A3B-Instruct": "Qwen3VLMoeForConditionalGeneration",
    "Qwen3-VL-235B-A22B-Instruct": "Qwen3VLMoeForConditionalGeneration",
    "Qwen3.5-35B-A3B": "Qwen3_5MoeForConditionalGeneration",
}


@pytest.mark.parametrize("name", sorted(MULTIMODAL))
def test_meta_device_oracle_with_vision(name):
    """text (MTP left out) + vision tower equals the whole multimodal transformers model, and the tower alone its
    ``visual`` module."""
    import warnings

    import torch
    import transformers
    from transformers import AutoConfig

    spec = from_hf_config(name)
    cfg = json.loads((REPO / "data" / "models" / f"{name}.json").read_text())
    cfg = {k: v for k, v in cfg.items() if k not in ("architectures", "quantization_config")}
    mt = cfg.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = AutoConfig.for_model(mt, **cfg)
        with torch.device("meta"):
            model = getattr(transformers, MULTIMODAL[name])(hf_cfg)
    visual = sum(p.numel() for n, p in model.named_parameters() if n.startswith("model.visual."))
    assert spec.vision_params == visual
    assert spec.total - spec.mtp + spec.vision_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", available_models())
def test_invariants(name):
    spec = from_hf_config(name)
    assert sum(spec.components.values()) == spec.total
    assert set(spec.components) <= set(COMPONENTS)
    assert 0 < spec.active <= spec.total - spec.mtp
    assert len(spec.main_layers) == spec.num_layers
    if spec.tie_word_embeddings:
        assert spec.lm_head == 0
    if spec.is_moe:
        assert "routed_experts" in spec.split_components("expert")
        assert spec.active < spec.total - spec.mtp
    else:
        assert spec.active == spec.total - spec.mtp  # a dense model with MTP (MiMo): the MTP layers are not active
    assert spec.flops_per_token(4096) > 6 * (spec.active - spec.embedding)


def test_layer_kinds():
    q35 = from_hf_config("Qwen3.5-35B-A3B")
    kinds = [layer.kind for layer in q35.layers]
    assert kinds[:4] == ["gdn+moe"] * 3 + ["gated_full+moe"] and kinds[-1] == "mtp:gated_full+moe"
    ds = from_hf_config("DeepSeek-V3")
    assert [layer.kind for layer in ds.layers[:4]] == ["mla+dense"] * 3 + ["mla+moe"]
    assert ds.layers[-1].kind == "mtp:mla+moe" and ds.num_mtp_layers == 1
    v4 = from_hf_config("DeepSeek-V4-Flash")
    assert {layer.attention for layer in v4.main_layers} == {"csa", "hca"}
    assert v4.layers[0].mlp == "hash_moe" and "hyper_connections" in v4.components
    glm5 = from_hf_config("GLM-5")
    assert glm5.layers[0].kind == "dsa+dense" and glm5.layers[3].kind == "dsa+moe"


def test_tied_embeddings_counted_once():
    spec = from_hf_config("tiny-qwen2")
    assert spec.tie_word_embeddings and spec.lm_head == 0
    untied = from_hf_config(dict(spec.config, tie_word_embeddings=False))
    assert untied.total - spec.total == spec.vocab_size * spec.hidden_size


def test_kimi_read_as_deepseek_v3():
    kimi = from_hf_config("Kimi-K2-Instruct")
    assert kimi.model_type == "kimi_k2" and kimi.architecture == "deepseek_v3"
    k26 = from_hf_config("Kimi-K2.6")
    assert k26.model_type == "kimi_k25" and k26.total == kimi.total


def test_transformers_fallback_path():
    cfg = dict(
        model_type="mistral",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=300,
        head_dim=16,
    )
    spec = from_hf_config(cfg)
    assert spec.source == "transformers-meta"
    assert any("meta device" in n for n in spec.notes)
    params, _ = meta_param_count(cfg)
    assert spec.total == params
    assert spec.components["embedding"] == 300 * 64 and spec.components["lm_head"] == 300 * 64
    assert spec.components["attention"] == 3 * (64 * 64 + 2 * 64 * 32 + 64 * 64)
    assert spec.components["dense_mlp"] == 3 * 3 * 64 * 128


def test_cli_json_contract():
    res = run_cli("params", "Qwen3-30B-A3B", "--json")
    assert res.rc == 0, res.err
    doc = res.json()
    for key in ("model_type", "total", "active", "embedding", "mtp", "num_layers", "components", "layers"):
        assert key in doc
    assert doc["total"] == 30_532_122_624
    assert doc["layers"][0] == {"index": 0, "kind": "full+moe", "params": doc["layers"][0]["params"]}
    assert (
        sum(layer["params"] for layer in doc["layers"]) + doc["embedding"] + doc["components"]["lm_head"] + 2048
        == doc["total"]
    )  # + the final norm


def test_cli_reads_a_path(tmp_path):
    src = (REPO / "data" / "models" / "Qwen3-8B.json").read_text()
    (tmp_path / "config.json").write_text(src)
    assert run_cli("params", tmp_path / "config.json", "--json").json()["total"] == 8_190_735_360
    assert run_cli("params", tmp_path, "--json").json()["total"] == 8_190_735_360


@pytest.mark.parametrize(
    "content, needles",
    [
        ("{not json", ["invalid JSON", "line 1"]),
        ("[1, 2]", ["JSON object"]),
        (json.dumps({"hidden_size": 8}), ["model_type", "missing"]),
        (json.dumps({"model_type": "nonesuch"}), ["unknown model_type 'nonesuch'", "qwen3_moe"]),
        (json.dumps({"model_type": "llama", "hidden_size": 64}), ["num_attention_heads", "missing"]),
        (json.dumps({"model_type": "qwen3", "hidden_size": "big"}), ["hidden_size", "integer"]),
        (
            json.dumps(
                {
                    "model_type": "qwen3_next",
                    "hidden_size": 64,
                    "num_attention_heads": 4,
                    "num_hidden_layers": 4,
                    "vocab_size": 10,
                    "layer_types": ["weird"] * 4,
                }
            ),
            ["layer_types", "weird"],
        ),
    ],
)
def test_cli_bad_input(tmp_path, content, needles):
    p = tmp_path / "config.json"
    p.write_text(content)
    assert_one_line_error(run_cli("params", p), *needles)


def test_cli_missing_file_and_binary(tmp_path):
    assert_one_line_error(run_cli("params", tmp_path / "nope.json"), "no such file", "Qwen3-8B")
    p = tmp_path / "bin.json"
    p.write_bytes(b"\xff\xfe\x00garbage")
    assert_one_line_error(run_cli("params", p), "UTF-8")


@pytest.mark.parametrize(
    "field, literal, shown",
    [
        ("num_attention_heads", "NaN", "NaN"),
        ("intermediate_size", "Infinity", "Infinity"),
        ("num_key_value_heads", "-Infinity", "-Infinity"),
        ("head_dim", "NaN", "NaN"),
        ("vocab_size", "1e999", "Infinity"),  # an overflowing literal reads as infinity
        ("vocab_size", "1" + "0" * 400, "a 401-digit integer"),
        ("rope_theta", "NaN", "NaN"),  # a field no count reads: still not a number the kit can hold
    ],
)
def test_non_finite_numbers_are_refused_in_one_line(tmp_path, field, literal, shown):
    """Python's json reads NaN / Infinity (JSON has neither): ``mlite params`` and ``mlite memory`` name the field
    and the file in one line, exit 2, no traceback."""
    cfg = json.loads((REPO / "data" / "models" / "Qwen3-8B.json").read_text())
    assert field in cfg
    cfg[field] = "@"
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg).replace('"@"', literal))
    needles = (str(p), f"field '{field}' is {shown}", "finite number")
    assert_one_line_error(run_cli("params", p), *needles)
    if field == "head_dim":
        assert_one_line_error(run_cli("memory", p, "--ngpu", "8"), *needles)


def test_non_finite_numbers_are_refused_in_nested_fields_and_dicts():
    cfg = json.loads((REPO / "data" / "models" / "Qwen3-VL-8B-Instruct.json").read_text())
    cfg["text_config"]["num_attention_heads"] = float("nan")
    with pytest.raises(ConfigError, match=r"^config: field 'text_config.num_attention_heads' is NaN"):
        from_hf_config(cfg)
    cfg = json.loads((REPO / "data" / "models" / "Qwen3-8B.json").read_text())
    cfg["layer_types"] = ["full_attention", float("inf")]
    with pytest.raises(ConfigError, match=r"field 'layer_types\[1\]' is Infinity"):
        from_hf_config(cfg)


def test_a_config_json_is_named_after_its_folder_from_any_directory(tmp_path):
    """``mlite params config.json`` in the model's folder names the model after that folder (not an empty name)."""
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text((REPO / "data" / "models" / "Qwen3-8B.json").read_text())
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=str(REPO))
    for ref in ("config.json", "./config.json", "."):
        p = subprocess.run(
            [sys.executable, "-m", "mlite", "params", ref], capture_output=True, text=True, cwd=folder, env=env
        )
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines()[0].startswith("my-model  (qwen3,"), (ref, p.stdout)
    assert from_hf_config(folder / "config.json").name == "my-model"
    (folder / "other.json").write_text((folder / "config.json").read_text())
    assert from_hf_config(folder / "other.json").name == "other"


def test_mimo_mtp_layer_is_the_released_layout():
    spec = from_hf_config("MiMo-7B-Base")
    (mtp,) = spec.mtp_layers
    names = {g.name.removeprefix("mtp_layers.0.") for g in mtp.groups}
    # the 16 model.mtp_layers.0 tensors of the released checkpoint; embedding and lm_head shared with the main model
    assert len(mtp.groups) == 16 and {"token_layernorm.weight", "hidden_layernorm.weight", "input_proj.weight"} < names
    assert "final_layernorm.weight" in names and not any(g.checkpoint_only for g in mtp.groups)
    assert spec.training_params == spec.total


def test_nemotron_h_follows_the_pattern_and_counts_the_scan():
    from mlite.models.flops import attention_flops

    spec = from_hf_config("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    pattern = spec.config["hybrid_override_pattern"]
    want = {"M": "mamba2+none", "E": "none+moe", "*": "full+none"}
    assert [layer.kind for layer in spec.layers] == [want[c] for c in pattern]
    mamba = spec.layers[0]
    assert attention_flops(spec, mamba, 4096, True) == 7 * 64 * 64 * 128  # 7 x d_inner x state (Megatron-LM)
    assert spec.is_moe and spec.num_moe_layers == pattern.count("E")
