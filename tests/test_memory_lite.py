"""The lite-runtime activation model against what autograd really saves (mlite.runtime.saved), on CPU."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import REPO

from mlite.memory import TrainingOptions, estimate
from mlite.memory.lite import LiteDims, block_per_token, root_parts
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.runtime.batch import PackedBatch
from mlite.runtime.models import build_lite_model
from mlite.runtime.saved import saved_activation_bytes


def _cfg(name, **over):
    cfg = json.loads((REPO / "data" / "models" / f"{name}.json").read_text())
    cfg.update(hidden_size=192, intermediate_size=384, head_dim=32, num_attention_heads=6, num_key_value_heads=2)
    if "num_experts" in cfg:
        cfg.update(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=96)
    if "linear_num_value_heads" in cfg:
        cfg.update(
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=32,
            linear_value_head_dim=48,
            shared_expert_intermediate_size=96,
        )
    cfg.update(over)
    return cfg


@pytest.mark.parametrize("name, tol", [("tiny-dense", 0.0), ("tiny-moe", 0.0), ("tiny-hybrid", 0.05)])
@pytest.mark.parametrize("recompute", ["none", "selective"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_block_formula_matches_saved_tensors(name, tol, recompute, dtype):
    torch.set_num_threads(1)
    cfg = _cfg(name)
    spec = from_hf_config(cfg)
    model = build_lite_model(spec, param_dtype=dtype, recompute=recompute)
    T = 384  # a multiple of the CPU Gated DeltaNet chunk (64)
    g = torch.Generator().manual_seed(0)
    batch = PackedBatch.from_sequences([torch.randint(0, spec.vocab_size, (T,), generator=g).tolist()])
    measured = saved_activation_bytes(model, batch)
    dims = LiteDims(tokens=T, recompute=recompute, device="cpu", act_bytes=torch.tensor([], dtype=dtype).element_size())
    rot = int(spec.head_dim * float(cfg.get("partial_rotary_factor", 1.0)))
    for i, layer in enumerate(spec.main_layers):
        want = sum(block_per_token(spec, layer, dims).values()) * T
        got = measured["blocks"][i]
        if layer.attention != "gdn" and i == [x.attention for x in spec.main_layers].index(layer.attention):
            got -= 2 * dims.act_bytes * rot * T  # the first attention block computes the shared cos/sin tables
        assert abs(got - want) <= tol * want, (i, layer.kind, got, want)


def test_full_recompute_keeps_layer_inputs_only():
    spec = from_hf_config(_cfg("tiny-dense"))
    model = build_lite_model(spec, param_dtype=torch.bfloat16, recompute="full")
    batch = PackedBatch.from_sequences([list(range(1, 257))])
    measured = saved_activation_bytes(model, batch)
    dims = LiteDims(tokens=256, recompute="full", device="cpu")
    acts, _ = root_parts(spec, dims)
    layer_inputs = sum(sum(block_per_token(spec, layer, dims).values()) for layer in spec.main_layers) * 256
    assert layer_inputs == spec.num_layers * 2 * spec.hidden_size * 256
    assert measured["total"] >= layer_inputs + acts["loss"]


def test_lite_estimate_shape():
    spec = from_hf_config("tiny-moe")
    o = TrainingOptions(
        optimizer="fsdp2", activation_model="lite", seq_len=4096, num_microbatches=1, framework_overhead_gib=0
    )
    est = estimate(spec, resolve(spec, 1, ParallelConfig()), o)
    w = est.worst
    assert w.grads_at_peak == 0 and w.peak < w.static + w.activation_total + w.transient_peak
    two = estimate(
        spec,
        resolve(spec, 1, ParallelConfig()),
        TrainingOptions(
            optimizer="fsdp2", activation_model="lite", seq_len=4096, num_microbatches=2, framework_overhead_gib=0
        ),
    )
    assert two.worst.peak - w.peak == pytest.approx(w.grads)  # sharded grads live from the 2nd micro-batch on
    with pytest.raises(Exception, match="lite runtime"):
        estimate(
            spec, resolve(spec, 2, ParallelConfig(ep=2)), TrainingOptions(optimizer="fsdp2", activation_model="lite")
        )
