"""The mesh table's fast estimates (:class:`mlite.memory.table_fast.TableEstimator`) against the reference
``estimate(spec, plan, o)`` on every valid mesh of a sample of models and option sets: the same fits verdict and the
same total, peak, static and host bytes, bit for bit (``==`` on the floats, not a tolerance)."""

from __future__ import annotations

import pytest

from mlite.memory import TrainingOptions, estimate, mesh_table
from mlite.memory.table_fast import TableEstimator
from mlite.mesh import enumerate_meshes
from mlite.models import from_hf_config

MODELS = [  # MLA + MoE, GQA MoE, dense, MTP, Gated DeltaNet, a vision tower, Mamba hybrid
    ("Kimi-K2-Instruct", 64),
    ("Qwen3-235B-A22B", 32),
    ("Llama-3.1-70B", 64),
    ("DeepSeek-V3", 32),
    ("Qwen3-Next-80B-A3B-Thinking", 16),
    ("Qwen3-VL-8B-Instruct", 16),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 16),
]

OPTIONS = {
    "default": TrainingOptions(gpu_memory_gib=141),
    "fsdp2_recompute": TrainingOptions(optimizer="fsdp2", recompute="full", gpu_memory_gib=80),
    "mfsdp_offload": TrainingOptions(optimizer="mfsdp", offload_fraction=0.5, mfsdp_grad_staging="ring"),
    "unfused_selective": TrainingOptions(
        attention="unfused", recompute="selective", num_microbatches=2, micro_batch_size=2, seq_len=8192
    ),
    "runtime_offload_pao": TrainingOptions(
        param_offload=True,
        optimizer_offload=True,
        grad_offload=True,
        use_precision_aware_optimizer=True,
        exp_avg_dtype="bf16",
        exp_avg_sq_dtype="bf16",
        offload_fraction=0.25,
        fused_cross_entropy=True,
    ),
}

SPECS = {name: from_hf_config(name) for name, _ in MODELS}
PLANS = {name: [m.plan for m in enumerate_meshes(SPECS[name], ngpu)] for name, ngpu in MODELS}


def reference(spec, plan, o):
    est = estimate(spec, plan, o, explain=False)
    w = est.worst
    return est.fits, w.total, w.peak, w.static, w.host_total


@pytest.mark.parametrize("opts", list(OPTIONS))
def test_fast_figures_equal_estimate_on_every_mesh(opts):
    o = OPTIONS[opts]
    checked = 0
    for name, _ in MODELS:
        spec = SPECS[name]
        fast = TableEstimator(spec, o)
        assert fast.applies, (name, opts)  # the fast arithmetic itself, not the fallback
        for plan in PLANS[name]:
            got, want = fast.figures(plan), reference(spec, plan, o)
            assert got == want, (name, opts, plan.parallel.sizes(), got, want)
            checked += 1
    assert checked > 1000


def test_fallback_outside_scope_and_table_unchanged():
    """FP8 weights, chunked offload and the lite activation model go through estimate itself; the table's rows are
    the reference estimate's, rounded as the table rounds them."""
    spec = SPECS["Qwen3-235B-A22B"]
    for o in (
        TrainingOptions(optimizer="fsdp2", precision="mxfp8_fp8_weight"),
        TrainingOptions(chunked_optimizer_state_offload=True, optimizer_state_offload_fraction=0.5),
    ):
        fast = TableEstimator(spec, o)
        assert not fast.applies
        for plan in PLANS["Qwen3-235B-A22B"][:200]:
            assert fast.figures(plan) == reference(spec, plan, o)
    o = OPTIONS["default"]
    rows = mesh_table(spec, 32, o)
    assert len(rows) == len(PLANS["Qwen3-235B-A22B"])
    for m in rows:
        fits, total, peak, static, host = reference(spec, m.plan, o)
        assert m.fits is fits
        assert m.extra == {
            "total_bytes": round(total),
            "peak_bytes": round(peak),
            "static_bytes": round(static),
            "host_bytes": round(host),
        }
