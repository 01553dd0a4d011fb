"""The estimator's ``megatron`` activation model against Megatron-Core itself (CPU oracle, exact bytes).

One subprocess (its shims and its gloo process group stay out of this test process) builds Megatron-Core's GPTModel
with the local spec for every case and counts what autograd saves per layer and component
(:mod:`mlite.validation.mcore_oracle`); each test compares one case with the estimator's components. The CPU runs the
norms as torch's composite RMSNorm (fp32 copies), which the estimator models as ``lite_device="cpu"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from mlite.validation.mcore_oracle import OracleCase, predicted

ROOT = Path(__file__).resolve().parents[1]

WIDE = {"hidden": 128, "heads": 4, "kv_heads": 2, "head_dim": 64}
"""A Qwen3-30B-A3B-shaped attention, small: GQA with qk-norm, heads x head_dim twice the hidden size."""

CASES = {
    # dense GQA with qk-norm (Qwen3-like): recompute none / selective / full, micro-batch 1-4, several lengths
    "dense_none_mb1_s32": OracleCase(),
    "dense_none_mb3_s48": OracleCase(micro_batch=3, seq=48),
    "dense_sel_mb2_s64": OracleCase(recompute="selective", micro_batch=2, seq=64),
    "dense_sel_mb4_s32": OracleCase(recompute="selective", micro_batch=4),
    "dense_full_mb1_s64": OracleCase(recompute="full", seq=64),
    "dense_full_mb4_s32": OracleCase(recompute="full", micro_batch=4),
    # MHA without qk-norm (Llama-like): V is a view of the fused QKV output, which then stays alive whole
    "mha_none_mb2_s32": OracleCase(kv_heads=4, qk_norm=False, micro_batch=2),
    "mha_sel_mb1_s64": OracleCase(kv_heads=4, qk_norm=False, recompute="selective", seq=64),
    "gqa1_none_mb1_s32": OracleCase(heads=8, kv_heads=1, head_dim=8, qk_norm=False),
    # MoE: router, all-gather dispatcher, SequentialMLP experts
    "moe_none_mb1_s32": OracleCase(experts=4, topk=2),
    "moe_none_mb2_s48_top3": OracleCase(experts=8, topk=3, qk_norm=False, micro_batch=2, seq=48),
    "moe_sel_mb1_s64": OracleCase(experts=4, topk=2, recompute="selective", seq=64),
    "moe_full_mb4_s32": OracleCase(experts=4, topk=2, recompute="full", micro_batch=4),
    "moe_mha_sel_mb3_s40": OracleCase(
        experts=6, topk=3, kv_heads=4, qk_norm=False, recompute="selective", micro_batch=3, seq=40
    ),
    "moe_gqa1_none_mb3_s24": OracleCase(experts=6, topk=2, heads=8, kv_heads=1, head_dim=8, micro_batch=3, seq=24),
    # attention width heads x head_dim = 256 != hidden 128 (Qwen3-30B-A3B / Qwen3.5 shape: 32 x 128 = 2 x 2048)
    "wide_none_mb1_s32": OracleCase(**WIDE),
    "wide_moe_none_mb2_s32": OracleCase(**WIDE, experts=4, topk=2, micro_batch=2),
    "wide_moe_sel_mb1_s48": OracleCase(**WIDE, experts=4, topk=2, recompute="selective", seq=48),
    "wide_full_mb2_s32": OracleCase(**WIDE, recompute="full", micro_batch=2),  # RoPE table (s x 64 fp32) = 2 s h
}
TP2 = {  # tensor parallelism over two gloo processes (dense: see OracleCase.tp), the wide attention
    "wide_tp2_none_mb1_s32": OracleCase(**WIDE, tp=2),
    "wide_tp2_sel_mb2_s32": OracleCase(**WIDE, tp=2, recompute="selective", micro_batch=2),
    "wide_tp2_full_mb1_s32": OracleCase(**WIDE, tp=2, recompute="full"),
}
FLASH = {  # core attention swapped for PyTorch SDPA (the flash rows of the H200 bench)
    "flash_dense_none_mb2_s64": OracleCase(micro_batch=2, seq=64),
    "flash_moe_sel_mb1_s32": OracleCase(experts=4, topk=2, recompute="selective"),
}

PERSIST = {  # what stays allocated between steps besides the model state
    "dense_none": OracleCase(seq=64, micro_batch=2),
    "dense_full": OracleCase(seq=64, micro_batch=2, recompute="full"),
    "moe_none": OracleCase(experts=4, topk=2, seq=64, micro_batch=2),
    "moe_full": OracleCase(experts=4, topk=2, seq=64, micro_batch=2, recompute="full"),
    "moe_sel_top3": OracleCase(experts=8, topk=3, recompute="selective"),
}

_SCRIPT = """
import json, sys, warnings
warnings.filterwarnings("ignore")
from mlite.validation.mcore_oracle import OracleCase, alive_after_backward, build_gpt, saved_bytes, sdpa_layer_spec
import torch
out = {}
for name, (kw, kind) in json.loads(sys.argv[1]).items():
    case = OracleCase(**kw)
    torch.manual_seed(0)
    model = build_gpt(case, layer_spec=sdpa_layer_spec(case) if kind == "flash" else None)
    model.train()
    out[name] = alive_after_backward(model, case) if kind == "persist" else saved_bytes(model, case)
print("ORACLE" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def oracle() -> dict:
    cases = (
        {n: (asdict(c), "unfused") for n, c in CASES.items()}
        | {n: (asdict(c), "flash") for n, c in FLASH.items()}
        | {"persist_" + n: (asdict(c), "persist") for n, c in PERSIST.items()}
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    lines = [x for x in p.stdout.splitlines() if x.startswith("ORACLE")]
    assert p.returncode == 0 and lines, p.stderr[-3000:]
    return json.loads(lines[-1][len("ORACLE") :])


@pytest.fixture(scope="module")
def tp_oracle() -> list[dict]:
    """Every TP = 2 case on both ranks, in one start of two processes."""
    from mlite.runtime.dist import run_local
    from mlite.validation.mcore_oracle import tp_saved_bytes

    return run_local(tp_saved_bytes, 2, ({n: asdict(c) for n, c in TP2.items()},), timeout_s=300)


def _compare(measured: dict, want: dict) -> list:
    bad = []
    for i, (m, w) in enumerate(zip(measured["layers"], want["layers"], strict=True)):
        for k in set(m) | set(w):
            if m.get(k, 0) != w.get(k, 0):
                bad.append((f"layer {i}", k, m.get(k, 0), w.get(k, 0)))
    for k in set(measured["root"]) | set(want["root"]):
        if measured["root"].get(k, 0) != want["root"].get(k, 0):
            bad.append(("root", k, measured["root"].get(k, 0), want["root"].get(k, 0)))
    return bad


@pytest.mark.parametrize("name", list(CASES))
def test_unfused_components_equal_megatron_core(oracle, name):
    case = CASES[name]
    got = oracle[name]
    want = predicted(case, device="cpu", attention="unfused")
    assert _compare(got, want) == []
    assert got["total"] == want["total"]
    layer = got["layers"][0]
    if case.recompute == "full":
        assert set(layer) == {"layer_inputs"} and "rope" in got["root"]
    else:
        assert {"norms", "attention", "moe" if case.experts else "mlp"} <= set(layer)
        assert ("attention_core" in layer) == (case.recompute == "none")
    # MoE layers part by part: the router, the token dispatcher's permutation buffers, the experts
    assert got["moe_parts"] == want["moe_parts"]
    if case.experts and case.recompute != "full":
        assert all(set(p) == {"router", "dispatcher", "experts"} for p in got["moe_parts"])
        assert sum(got["moe_parts"][0].values()) == layer["moe"]


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if n.startswith("wide") and c.recompute != "full"])
def test_attention_output_projection_input_is_heads_x_head_dim_not_hidden(oracle, name):
    """Where heads x head_dim != hidden the out-projection's input (the attention output, [s, b, heads x head_dim]
    bf16) is what Megatron-Core saves: an estimate sized by ``hidden`` fails here (and in the exact test above)."""
    case = CASES[name]
    assert case.heads * case.head_dim != case.hidden
    got, want = oracle[name], predicted(case, device="cpu", attention="unfused")
    assert got["layers"][0]["attention"] == want["layers"][0]["attention"]
    assert got["total"] == want["total"]


@pytest.mark.parametrize("name", list(TP2))
def test_tensor_parallel_components_equal_megatron_core_on_every_rank(tp_oracle, name):
    """TP = 2 on gloo: each rank's saved bytes, layer by layer and component by component, are the estimate's per-GPU
    components (heads, the FFN and the vocabulary split; the embedding keeps its out-of-shard mask too)."""
    case = TP2[name]
    want = predicted(case, device="cpu", attention="unfused")
    for rank, res in enumerate(tp_oracle):
        got = res[name]
        assert _compare(got, want) == [], rank
        assert got["total"] == want["total"], rank
    one = predicted(OracleCase(**{**asdict(case), "tp": 1}), device="cpu", attention="unfused")
    assert want["total"] < one["total"]  # the split is real: a rank keeps less than the whole model


@pytest.mark.parametrize("name", list(FLASH))
def test_flash_components_equal_megatron_core_with_sdpa(oracle, name):
    got, want = oracle[name], predicted(FLASH[name], device="cpu", attention="flash")
    # within 2 %: the flash kernel also keeps its RNG seed and offset (a few bytes per layer)
    assert got["total"] == pytest.approx(want["total"], rel=0.02)
    for m, w in zip(got["layers"], want["layers"], strict=True):
        for k in set(m) | set(w):
            assert m.get(k, 0) == pytest.approx(w.get(k, 0), rel=0.02, abs=64), k
    assert got["moe_parts"] == want["moe_parts"]  # the SDPA swap leaves the MoE layer alone: exact


@pytest.mark.parametrize("name", list(PERSIST))
def test_persistent_buffers_equal_what_megatron_core_keeps_between_steps(oracle, name):
    from mlite.memory import TrainingOptions, estimate
    from mlite.mesh import ParallelConfig, resolve
    from mlite.models import from_hf_config

    case = PERSIST[name]
    spec = from_hf_config(case.hf_config())
    o = TrainingOptions(
        seq_len=case.seq,
        micro_batch_size=case.micro_batch,
        recompute=case.recompute,
        attention="unfused",
        lite_device="cpu",
        num_microbatches=1,
    )
    w = estimate(spec, resolve(spec, 1, ParallelConfig(), seq_len=case.seq), o, explain=False).worst
    assert "cublas_workspace" not in w.persistent  # CUDA only
    got = oracle["persist_" + name]["bytes"]
    # up to 64 bytes apart: Megatron's aux-loss tracker keeps a few fp32 scalars for MoE layers
    assert 0 <= got - sum(w.persistent.values()) <= (64 if case.experts else 0), oracle["persist_" + name]
    assert ("moe_recompute_inputs" in w.persistent) == (case.experts > 0 and case.recompute == "full")


def test_scores_grow_with_the_square_of_the_sequence(oracle):
    # the unfused core keeps fp32 softmax + bf16 probabilities (6 bytes per score) and the bool mask per layer
    a, b = oracle["dense_none_mb1_s32"]["layers"][0], oracle["dense_full_mb1_s64"]
    c = OracleCase()
    core32 = a["attention_core"]
    linear = 3 * 2 * c.seq * c.heads * c.head_dim  # q, expanded k and v (bf16)
    assert core32 == linear + c.seq**2 + 6 * c.heads * c.seq**2
    assert set(b["layers"][0]) == {"layer_inputs"} and b["layers"][0]["layer_inputs"] == 2 * 64 * c.hidden


def test_import_mlite_does_not_import_megatron():
    code = "import sys, mlite, mlite.memory, mlite.validation.mcore_oracle; print('megatron' in sys.modules)"
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        check=False,
    )
    assert p.returncode == 0 and p.stdout.strip() == "False", p.stderr


def test_h200_rows_within_bounds():
    """The committed H200 measurement (Megatron-Core 0.19.2) against the estimator as it is now."""
    from mlite.validation.mcore_oracle import predict_row

    recs = json.loads((ROOT / "bench/results/mcore_memory_raw.json").read_text())
    measured = [r for r in recs if r.get("measured_static_bytes")]
    assert len(measured) >= 12
    assert {r["attention"] for r in measured} == {"unfused", "flash"}
    for r in measured:
        p = predict_row(r)
        assert p["predicted_static_bytes"] == pytest.approx(r["measured_static_bytes"], rel=0.03), r["name"]
        assert p["predicted_peak_bytes"] == pytest.approx(r["measured_peak_bytes"], rel=0.10), r["name"]


def _raw_rows() -> dict:
    return {r["name"]: r for r in json.loads((ROOT / "bench/results/mcore_memory_raw.json").read_text())}


BF16_ROWS = sorted(n for n, r in _raw_rows().items() if r["grad"] == "bf16")


@pytest.mark.parametrize("name", BF16_ROWS)
def test_cli_grad_dtype_bf16_without_pao_gives_megatron_cores_bytes(name, tmp_path):
    """``mlite memory CONFIG --grad-dtype bf16`` (no ``--pao``), run from another directory on a relative copy of the
    row's model config, prints what Megatron-Core 0.19.2 held on the H200 for that row (static within 3 %, peak
    within 10 %), the same bytes as the bench's prediction, and the fp32 main-grad copies it makes at the step."""
    row = _raw_rows()[name]
    case = OracleCase(seq=row["seq"], micro_batch=row["micro_batch"], recompute=row["recompute"], **row["model"])
    (tmp_path / "model.json").write_text(json.dumps(case.hf_config()))
    flags = ["--seq-len", row["seq"], "--micro-batch", row["micro_batch"], "--recompute", row["recompute"]]
    flags += ["--num-microbatches", row["num_microbatches"], "--attention", row["attention"], "--grad-dtype", "bf16"]
    flags += [] if row["dist_opt"] else ["--no-distributed-optimizer"]
    p = subprocess.run(
        [sys.executable, "-m", "mlite", "memory", "model.json", "--ngpu", "1", *map(str, flags), "--gpu-mem", "H200"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore"),
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert "fp32 main-grad copies" in p.stdout and "Megatron-Core's optimizer" in p.stdout
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "mlite", "memory", "model.json", "--ngpu", "1", *map(str, flags), "--json"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore"),
            check=True,
        ).stdout
    )
    from mlite.validation.mcore_oracle import predict_row

    want = predict_row(row)
    assert (doc["static"], doc["peak"]) == (want["predicted_static_bytes"], want["predicted_peak_bytes"])
    n = doc["local_params"]
    assert n == row["params"] and doc["step_grads"] == 4 * n  # one GPU: d = 1
    assert doc["per_gpu"]["grads"] == 2 * n
    assert doc["static"] == pytest.approx(row["measured_static_bytes"], rel=0.03)
    assert doc["peak"] == pytest.approx(row["measured_peak_bytes"], rel=0.10)


def test_bf16_grad_buffer_holds_two_more_bytes_per_parameter_after_the_step_on_the_h200():
    """The measured proof of the fp32 copies: the same dense model and attention buffer (b x s^2 equal), fp32 grads
    (4 B) against bf16 grads (2 B + 4 B of fp32 copies at d = 1): Megatron-Core held 2 B per parameter more after the
    step, and so does the estimate (the RoPE table of the longer sequence aside)."""
    rows = _raw_rows()
    bf16, fp32 = rows["dense_s4096_mb1_sel_bf16grad"], rows["dense_s2048_mb4_sel"]
    n = bf16["params"]
    rope = bf16["predicted_persistent"]["rope_table"] - fp32["predicted_persistent"]["rope_table"]
    measured = bf16["measured_static_bytes"] - fp32["measured_static_bytes"]
    assert measured == pytest.approx(2 * n + rope, rel=1e-4)
    assert bf16["predicted_static_bytes"] - fp32["predicted_static_bytes"] == 2 * n + rope


@pytest.mark.parametrize("name", sorted(n for n, r in _raw_rows().items() if isinstance(r.get("saved"), dict)))
def test_h200_saved_bytes_equal_todays_components(name):
    """The per-component bytes Megatron-Core 0.19.2 saved on the H200 (``--saved``, fused CUDA RMSNorm) against
    today's ``megatron`` components for CUDA: exact, except the flash kernel's RNG seed and offset (24 B a layer)."""
    from mlite.validation.mcore_oracle import predicted

    row = _raw_rows()[name]
    case = OracleCase(seq=row["seq"], micro_batch=row["micro_batch"], recompute=row["recompute"], **row["model"])
    got, want = row["saved"], predicted(case, device="cuda", attention=row["attention"])
    bad = _compare(got, want)
    if row["attention"] == "flash":
        assert all(k == "attention_core" and 0 <= m - w <= 24 for _, k, m, w in bad), bad
    else:
        assert bad == [] and got["total"] == want["total"]


def test_readme_table_shows_the_csv():
    """The README's Megatron-Core table is ``bench/results/mcore_memory.csv``: every row, its settings, GiB and
    errors as the CSV gives them."""
    import csv
    import re

    with (ROOT / "bench/results/mcore_memory.csv").open(newline="") as f:
        rows = {r["config"]: r for r in csv.DictReader(f)}
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Megatron-Core memory") :]
    section = section[: section.index("\n#", 1)] if "\n#" in section[1:] else section  # up to the next heading
    table = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+)` \| (.*) \|$", line)
        if m:
            table[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    assert list(table) == list(rows)

    def gib(b: str) -> str:
        return f"{int(b) / 2**30:.2f}"

    for name, r in rows.items():
        att, shape, rec, dist, grad, static, static_err, peak, peak_err = table[name]
        mb = f" × {r['num_microbatches']}" if r["num_microbatches"] != "1" else ""
        assert att.startswith(r["attention"]) and shape == f"{r['seq']} × {r['micro_batch']}{mb}", name
        assert (rec, dist, grad) == (r["recompute"], "on" if r["dist_opt"] == "True" else "off", r["grad_buffer"])
        assert static == f"{gib(r['measured_static_bytes'])} ({gib(r['predicted_static_bytes'])})", name
        assert peak == f"{gib(r['measured_peak_bytes'])} ({gib(r['predicted_peak_bytes'])})", name
        assert (static_err, peak_err) == (f"{float(r['static_error']):+.2%}", f"{float(r['peak_error']):+.2%}"), name
        assert abs(float(r["static_error"])) <= 0.03 and abs(float(r["peak_error"])) <= 0.10, name


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (("--attention", "unfused"), ("unfused = Megatron-Core's local spec (DotProductAttention", "mcore_memory.csv")),
        (("--attention", "flash"), ("flash = Transformer Engine / flash-attn kernels", "PyTorch SDPA", "not measured")),
        (("--activation-model", "lite"), ("the kit's lite runtime", "gpu_memory.csv")),
    ],
    ids=["unfused", "flash", "lite"],
)
def test_output_says_what_each_attention_choice_is_and_what_it_was_checked_against(flags, needles):
    from conftest import run_cli

    text = run_cli("memory", "Qwen3-8B", "--ngpu", "1", *flags).out
    doc = run_cli("memory", "Qwen3-8B", "--ngpu", "1", *flags, "--json").json()
    for n in needles:
        assert n in text and n in doc["validated_against"], n
