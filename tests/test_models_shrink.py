"""Real configs cut to size keep their architecture, and transformers agrees with the cut inventory."""

from __future__ import annotations

import pytest
from test_models import NO_TRANSFORMERS_CLASS, _oracle_input

from mlite.errors import MliteError
from mlite.models import available_models, from_hf_config
from mlite.models.hf_meta import meta_param_count
from mlite.models.shrink import shrink_config

REAL = [n for n in available_models() if not n.startswith("tiny-")]


def _kinds(spec):
    return [(layer.attention, layer.mlp) for layer in spec.main_layers]


@pytest.mark.parametrize("name", REAL)
def test_cut_to_two_layers_keeps_the_architecture(name):
    orig = from_hf_config(name)
    cut = shrink_config(name, layers=2, experts=8 if orig.is_moe else None, vocab=4096)
    spec = from_hf_config(cut.config, name=f"{name}-cut")
    assert spec.num_layers == 2 and len(cut.source_layers) == 2
    assert spec.architecture == orig.architecture and spec.vocab_size == 4096
    assert spec.num_mtp_layers == orig.num_mtp_layers  # MTP is kept as it is
    assert _kinds(spec) == [_kinds(orig)[i] for i in cut.source_layers]
    distinct = set(_kinds(orig))
    assert set(_kinds(spec)) == distinct or len(distinct) > 2  # every kind kept when two layers can hold them
    if orig.is_moe:
        assert spec.num_experts == 8 and spec.moe_router_topk <= 8
        assert spec.hidden_size == orig.hidden_size and spec.moe_ffn_hidden_size == orig.moe_ffn_hidden_size
        assert spec.shared_expert_ffn_hidden_size == orig.shared_expert_ffn_hidden_size
    assert spec.head_dim == orig.head_dim and spec.num_key_value_heads == orig.num_key_value_heads
    assert any("layers" in c for c in cut.changes) and any("vocab_size" in c for c in cut.changes)


@pytest.mark.parametrize("name", [n for n in REAL if n not in NO_TRANSFORMERS_CLASS])
def test_cut_inventory_equals_transformers_on_meta(name):
    orig = from_hf_config(name)
    cut = shrink_config(name, layers=2, experts=8 if orig.is_moe else None, vocab=4096)
    spec = from_hf_config(cut.config, name=f"{name}-cut")
    cfg, mt = _oracle_input(spec)
    params, router_bias = meta_param_count(cfg, mt)
    assert spec.total - spec.mtp == params + router_bias


def test_layer_choice_covers_kinds_in_order():
    q = shrink_config("Qwen3.5-35B-A3B", layers=2)
    assert q.source_layers == (0, 3)  # one Gated DeltaNet layer, one full-attention layer
    assert q.config["text_config"]["layer_types"] == ["linear_attention", "full_attention"]
    d = shrink_config("DeepSeek-V3", layers=3)
    assert d.source_layers == (0, 1, 3) and d.config["first_k_dense_replace"] == 2
    assert shrink_config("Qwen3-8B", layers=36).changes == []


def test_group_limited_routing_stays_routable():
    cut = shrink_config("DeepSeek-V3", experts=8)  # n_group 8, topk_group 4, top-8
    t = cut.config
    reachable = t["topk_group"] * (8 // t["n_group"])
    assert t["num_experts_per_tok"] <= reachable and 8 % t["n_group"] == 0
    nxt = shrink_config("Qwen3-Next-80B-A3B-Thinking", experts=8)  # top-10 of 512
    assert nxt.config["num_experts_per_tok"] == 8 and any("num_experts_per_tok 10 -> 8" in c for c in nxt.changes)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"layers": 99}, "--layers 99: Qwen3-8B has 36 layers"),
        ({"layers": 0}, "--layers 0"),
        ({"experts": 8}, "no routed experts"),
        ({"vocab": 10**7}, "--vocab"),
    ],
)
def test_bad_cuts_name_the_flag(kwargs, needle):
    with pytest.raises(MliteError, match=needle.replace("(", r"\(")):
        shrink_config("Qwen3-8B", **kwargs)


def test_experts_beyond_the_model():
    with pytest.raises(MliteError, match="--experts 64: Mixtral-8x7B has 8"):
        shrink_config("Mixtral-8x7B", experts=64)
