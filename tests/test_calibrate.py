"""``mlite calibrate``: the measurements on CPU (quick sizes), the GEMM fit against an oracle, the model's GEMM shapes
against the FLOPs count, and the command from a user's folder (good input writes a profile ``load_hardware`` reads;
bad input exits 2 in one line and creates nothing)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import REPO

from mlite.cli import main
from mlite.errors import MliteError
from mlite.models import from_hf_config
from mlite.models.flops import _MATRIX_COMPONENTS, attention_flops, flops_per_token
from mlite.runtime.models.moe import expert_path
from mlite.time.calibrate import (
    MEASURED_FIELDS,
    calibrate,
    check_device,
    fit_gemm,
    host_device_bandwidth,
    model_gemm_shapes,
    resolve_base,
)
from mlite.time.hardware import load_hardware

VENDOR_FIELDS = ("peak_bf16_flops", "peak_fp8_flops", "memory_gib", "nvlink_bytes_per_s", "network_bytes_per_s")
VENDOR_FIELDS += ("gpus_per_node", "comm_efficiency", "comm_latency_s", "host_memory_gib")


@pytest.fixture(scope="module")
def quick_moe():
    """One quick CPU calibrate of tiny-moe against the H200 profile."""
    return calibrate("cpu", "tiny-moe", "H200", quick=True)


def test_quick_cpu_calibrate_loads_back_and_replaces_the_measured_fields(quick_moe, tmp_path):
    prof, base = quick_moe, load_hardware("H200")
    path = tmp_path / "p.json"
    path.write_text(json.dumps(prof.to_dict()))
    assert load_hardware(path) == prof
    assert prof.name.endswith("(calibrated)") and prof.name != base.name
    replaced = [k for k in MEASURED_FIELDS if k != "pcie_bytes_per_s"]  # no host <-> device link on CPU
    assert prof.measured["replaced"] == replaced
    from mlite.time.hardware import OPTIONAL as host  # the host costs may measure 0

    for k in replaced:
        assert getattr(prof, k) != getattr(base, k) or (k in host and getattr(prof, k) >= 0), k
        assert prof.sources[k].startswith("mlite calibrate: "), (k, prof.sources[k])
    for k in VENDOR_FIELDS + ("pcie_bytes_per_s",):
        assert getattr(prof, k) == getattr(base, k), k
        assert prof.sources[k] == base.sources[k], k
    m = prof.measured
    assert m["spec"] == "tiny-moe" and m["torch"] == torch.__version__ and m["base"] == "H200" and m["quick"]
    assert m["device"].startswith("CPU") and "smoke test" in m["note"] and m["date"][:4].isdigit()
    assert m["gemm_table"] and all(len(r) == 4 and r[3] > 0 for r in m["gemm_table"])
    assert m["grouped_gemm"]["path"] == expert_path("cpu", torch.bfloat16)  # the runtime's own expert path
    assert "no host <-> device link" in m["pcie"]
    # the derived fields are the raw figures over the peak, as recorded
    assert prof.attention_efficiency == pytest.approx(m["attention"]["fwd_flops_per_s"] / base.peak_bf16_flops)
    assert prof.host_adam_params_per_s == pytest.approx(m["host_adam"]["numel"] / m["host_adam"]["seconds"])
    # the host AdamW at the model's size (quick cap), the optimizer anchor on both backends at both layer counts
    from mlite.time.calibrate import FULL, QUICK, host_adam_numel

    assert m["host_adam"]["numel"] == host_adam_numel(from_hf_config("tiny-moe"), QUICK) == QUICK.adam_numel
    big = from_hf_config("Qwen3-30B-A3B")  # more parameters than the cap: capped (or by this host's memory)
    assert FULL.adam_numel < host_adam_numel(big, FULL) <= FULL.adam_model_numel < big.total
    assert [len(m["optimizer_anchor"]["measured_s"][b]) for b in ("dist_opt", "fsdp2")] == [2, 2]
    from mlite.time.calibrate import FLOOR_RUNS

    floor = m["host_floor_anchor"]
    assert floor["tokens"] == QUICK.floor_tokens < QUICK.anchor_tokens
    assert sorted(floor["measured_s"]) == sorted(f"{r}/{o}" for r, o in FLOOR_RUNS)
    assert all(len(v) == 2 and min(v) > 0 for v in floor["measured_s"].values())
    assert prof.host_floor_layer_s > 0  # three layers take longer to issue than one
    assert prof.hbm_bytes_per_s == pytest.approx(2 * m["memory"]["bytes"] / m["memory"]["copy_s"])


def _rows(eff, overhead, peak, shapes):
    """``[M, N, K, flops_per_s]`` rows of GEMMs that take exactly flops / (peak x eff) + overhead."""
    return [[m, n, k, 2 * m * n * k / (2 * m * n * k / (peak * eff) + overhead)] for m, n, k in shapes]


SHAPES = [(64, 64, 64), (256, 512, 128), (1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 2048)]


@pytest.mark.parametrize("eff,overhead", [(0.6, 7e-6), (0.83, 0.0), (0.05, 3e-4)])
def test_fit_gemm_recovers_a_known_efficiency_and_overhead(eff, overhead):
    got_eff, got_over = fit_gemm(_rows(eff, overhead, 1e15, SHAPES), 1e15)
    assert got_eff == pytest.approx(eff, rel=1e-9)
    assert got_over == pytest.approx(overhead, rel=1e-6, abs=1e-15)


def test_fit_gemm_keeps_the_overhead_non_negative_and_the_efficiency_at_most_one():
    rows = _rows(0.5, 0.0, 1e15, SHAPES)
    rows[0][3] *= 3  # the smallest GEMM faster than the line: the free fit's overhead would be negative
    e, c = fit_gemm(rows, 1e15)
    assert c == 0.0 and 0.5 < e < 1
    assert fit_gemm(_rows(0.9, 1e-6, 1e15, SHAPES), 1e14) == (1.0, pytest.approx(1e-6))  # faster than the peak


def _oracle_matrix(spec, tokens):
    """Matrix parameters a token touches as :mod:`mlite.models.flops` counts them, less the norm weights and biases of
    the matrix components (not GEMMs)."""
    attn = sum(attention_flops(spec, layer, tokens, True) for layer in spec.main_layers)
    matrix = (flops_per_token(spec, tokens, training=False) - attn) / 2
    groups = [g for layer in spec.main_layers for g in layer.groups] + list(spec.post)
    not_gemm = sum(
        g.numel for g in groups if g.component in _MATRIX_COMPONENTS and ("norm." in g.name or g.name.endswith(".bias"))
    )
    return matrix - not_gemm


@pytest.mark.parametrize("name", ["tiny-dense", "tiny-moe", "Qwen3-30B-A3B", "Hy3"])
def test_model_gemm_flops_are_the_matrix_parameters_a_token_touches(name):
    spec = from_hf_config(name)
    tokens = 3072  # x topk divisible by every expert count here: whole rows per expert
    shapes = model_gemm_shapes(spec, tokens)
    assert sum(s.flops for s in shapes) == 2 * tokens * _oracle_matrix(spec, tokens)
    if name == "Hy3":
        assert spec.source == "transformers-meta"
    names = {s.name: s for s in shapes}
    q = names["self_attn.q_proj.weight"]
    assert (q.m, q.n, q.k) == (tokens, spec.num_attention_heads * spec.head_dim, spec.hidden_size)
    if spec.is_moe:
        up = names["mlp.experts.gate_up_proj"]
        rows = tokens * spec.moe_router_topk // spec.num_experts
        assert (up.m, up.n, up.k) == (rows, 2 * spec.moe_ffn_hidden_size, spec.hidden_size)
        assert up.count == spec.num_experts * spec.num_moe_layers


def test_model_gemm_shapes_split_over_tensor_parallelism():
    spec = from_hf_config("tiny-dense")  # every projection is column- or row-parallel (or vocab-parallel)
    one, two = model_gemm_shapes(spec, 512), model_gemm_shapes(spec, 512, tp=2)
    assert sum(s.flops for s in two) * 2 == sum(s.flops for s in one)
    o = {s.name: s for s in two}["self_attn.o_proj.weight"]
    assert (o.n, o.k) == (spec.hidden_size, spec.num_attention_heads * spec.head_dim // 2)


def test_cpu_has_no_host_device_link_and_the_base_is_chosen_by_name(tmp_path):
    assert host_device_bandwidth("cpu") is None
    assert resolve_base(None, "cpu").name == "H100"
    custom = tmp_path / "mine.json"
    custom.write_text(json.dumps(load_hardware("B200").to_dict() | {"name": "my B200"}))
    assert resolve_base(str(custom), "cpu").name == "my B200"
    assert resolve_base("h200", "cpu").name == "H200"


def test_cuda_devices_are_named_by_index(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert check_device("cuda") == "cuda:1" and check_device("cuda:0") == "cuda:0" and check_device("cpu") == "cpu"
    with pytest.raises(MliteError, match="only 2 CUDA device"):
        check_device("cuda:2")


def _mlite(cwd, *args):
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "mlite", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_the_command_from_a_users_folder_writes_a_profile_with_a_relative_out(tmp_path):
    """The defaults: tiny-dense (a dense model: the grouped GEMM is kept, and why is said), the H100 base (no GPU name
    to match), the quick sizes (a CPU always runs them)."""
    (tmp_path / "profiles").mkdir()
    p = _mlite(tmp_path, "calibrate", "--device", "cpu", "--out", "profiles/mine.json")
    assert p.returncode == 0, p.stderr
    prof, base = load_hardware(tmp_path / "profiles" / "mine.json"), load_hardware("H100")
    m = prof.measured
    assert m["spec"] == "tiny-dense" and m["base"] == "H100" and m["sizes"] == "quick" and not m["quick"]
    assert "no routed experts" in m["grouped_gemm"] and "grouped_gemm_efficiency" not in m["replaced"]
    assert prof.grouped_gemm_efficiency == base.grouped_gemm_efficiency
    assert prof.sources["grouped_gemm_efficiency"] == base.sources["grouped_gemm_efficiency"]
    lines = {ln.split()[0]: ln for ln in p.stdout.splitlines() if "->" in ln}
    assert set(lines) == set(MEASURED_FIELDS)
    for k in ("pcie_bytes_per_s", "grouped_gemm_efficiency"):
        assert "kept: not measured" in lines[k], lines[k]
    assert "kept" not in lines["gemm_efficiency"] and f"{prof.gemm_efficiency:.4g}" in lines["gemm_efficiency"]
    assert prof.gemm_efficiency != base.gemm_efficiency
    assert sorted(x.name for x in tmp_path.rglob("*")) == ["mine.json", "profiles"]


@pytest.mark.parametrize(
    "args,needles",
    [
        (("--device", "cpu", "--base", "Z9"), ("--base 'Z9'", "H200")),
        (("--device", "cpu", "--out", "missing/p.json"), ("--out missing/p.json", "does not exist")),
        (("--device", "cuda", "--out", "p.json"), ("--device cuda", "no CUDA device", "--device cpu")),
        (("--device", "tpu", "--out", "p.json"), ("--device 'tpu'", "cpu")),
        (("no-such-model", "--device", "cpu", "--out", "p.json"), ("no-such-model",)),
    ],
    ids=["base", "out-folder", "no-cuda", "device", "config"],
)
def test_bad_input_exits_2_in_one_line_and_creates_nothing(tmp_path, monkeypatch, capsys, args, needles):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # this machine's case, on any machine
    try:
        rc = main(["calibrate", *args])
    except SystemExit as e:
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, (rc, out, err)
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert list(tmp_path.iterdir()) == []


def test_every_recorded_figure_is_finite(quick_moe):
    def walk(x):
        if isinstance(x, dict):
            for v in x.values():
                yield from walk(v)
        elif isinstance(x, list):
            for v in x:
                yield from walk(v)
        elif isinstance(x, float):
            yield x

    assert all(math.isfinite(v) for v in walk(quick_moe.measured))


def test_the_layer_anchor_recovers_what_made_its_seconds():
    """anchor_fit on seconds made by the time model itself from a known elementwise efficiency and known host costs
    gives them back (the oracle: the model's own layer)."""
    from dataclasses import replace

    from mlite.models import from_hf_config
    from mlite.options import TrainingOptions
    from mlite.time.calibrate import anchor_fit
    from mlite.time.compute import Shard, layer_backward, layer_forward
    from mlite.time.model import FSDP_GATHER_BYTES, FSDP_REDUCE_BYTES, _recompute_kinds, grad_accumulate_bytes

    spec, tokens = from_hf_config("Qwen3-30B-A3B"), 4096
    truth = replace(load_hardware("H200"), elementwise_efficiency=0.23)
    sh = Shard(tokens=tokens, tp=1, sp=False, ep=1, etp=1, seq_len=tokens)
    layer = spec.main_layers[1]
    acc = layer.params * grad_accumulate_bytes(TrainingOptions(optimizer="dist_opt")) / truth.hbm_bytes_per_s
    none = layer_forward(truth, spec, layer, sh).gpu_s + layer_backward(truth, spec, layer, sh).gpu_s + acc
    sel = _recompute_kinds(TrainingOptions(recompute="selective"))
    rec = {m: layer_forward(truth, spec, layer, sh, only=o).gpu_s for m, o in (("selective", sel), ("full", None))}
    copies = layer.params * (2 * FSDP_GATHER_BYTES + FSDP_REDUCE_BYTES) / truth.hbm_bytes_per_s
    seconds = {
        "none": none,
        "selective": none + rec["selective"] + 0.002,
        "full": none + rec["full"] + 0.005,
        "fsdp2": none - acc + copies + 0.003,
    }
    fields, _ = anchor_fit(replace(truth, elementwise_efficiency=0.9), spec, tokens, seconds)
    assert fields["elementwise_efficiency"] == pytest.approx(0.23, rel=1e-6)
    assert fields["recompute_selective_host_s"] == pytest.approx(0.002, rel=1e-6)
    assert fields["recompute_full_host_s"] == pytest.approx(0.005, rel=1e-6)
    assert fields["fsdp_layer_host_s"] == pytest.approx(0.003, rel=1e-6)


def test_the_optimizer_anchor_recovers_the_host_costs_that_made_its_seconds():
    """optimizer_anchor_fit on seconds made from the time model's optimizer bytes plus known per-layer and per-step
    host costs gives those costs back; the time model then adds them to the optimizer part of each backend."""
    from dataclasses import replace

    from mlite.mesh import ParallelConfig, resolve
    from mlite.options import TrainingOptions
    from mlite.time import predict
    from mlite.time.calibrate import _anchor_layers, cut_params, optimizer_anchor_fit
    from mlite.time.model import optimizer_bytes_per_param

    spec, hw = from_hf_config("Qwen3-30B-A3B"), load_hardware("H200")
    lo, hi = _anchor_layers(spec)
    truth = {"dist_opt": (0.0004, 0.003), "fsdp2": (0.0009, 0.005)}
    seconds = {}
    for b, (layer, step) in truth.items():
        per, _ = optimizer_bytes_per_param(TrainingOptions(optimizer=b))
        seconds[b] = [
            cut_params(spec, n) * per / hw.hbm_bytes_per_s + 8 * hw.kernel_launch_s + n * layer + step for n in (lo, hi)
        ]
    fields, _ = optimizer_anchor_fit(hw, spec, seconds)
    assert fields["optimizer_layer_host_s"] == pytest.approx(0.0004, rel=1e-6)
    assert fields["optimizer_step_host_s"] == pytest.approx(0.003, rel=1e-6)
    assert fields["fsdp_optimizer_layer_host_s"] == pytest.approx(0.0009, rel=1e-6)
    assert fields["fsdp_optimizer_step_host_s"] == pytest.approx(0.005, rel=1e-6)
    assert cut_params(spec, spec.num_layers) == spec.total
    small = from_hf_config("tiny-dense")
    plan = resolve(small, 1, ParallelConfig(), seq_len=256)
    for b, (layer, step) in truth.items():
        o = TrainingOptions(optimizer=b, seq_len=256)
        before = predict(small, plan, o, hardware=hw).parts["optimizer"]
        after = predict(small, plan, o, hardware=replace(hw, **fields)).parts["optimizer"]
        assert after - before == pytest.approx(small.num_layers * layer + step, rel=1e-9), b


def test_host_adam_rate_times_the_runtimes_own_host_path():
    """calibrate's host AdamW rate is the path ShardedAdamW takes (its default ``auto``: the one-pass C kernel where
    it builds), not the eager ops the runtime no longer runs; ``torch`` forces the eager path."""
    from mlite.runtime.optim import host_fused
    from mlite.time.calibrate import host_adam_rate

    auto = host_adam_rate(1 << 16, repeats=1)
    assert auto["host_kernel"] == host_fused.choose("auto")
    assert host_adam_rate(1 << 16, repeats=1, host_kernel="torch")["host_kernel"] == "torch"


def test_the_host_floor_anchor_recovers_what_made_its_seconds_and_floors_the_micro_batch():
    """host_floor_fit on seconds made from known per-layer host costs and a known intercept gives them back; with
    them the time model never predicts a micro-batch faster than its host floor, and leaves a GPU-bound one alone."""
    from dataclasses import replace

    from mlite.mesh import ParallelConfig, resolve
    from mlite.options import TrainingOptions
    from mlite.time import predict
    from mlite.time.calibrate import _anchor_layers, host_floor_fit
    from mlite.time.model import host_floor_s

    spec = from_hf_config("Qwen3-30B-A3B")
    lo, hi = _anchor_layers(spec)
    layer, fixed, extra = 0.004, 0.006, {"selective": 0.0005, "full": 0.002, "fsdp2": 0.0027}

    def run(per):
        return [fixed + n * per for n in (lo, hi)]

    seconds = {
        ("none", "dist_opt"): run(layer),
        ("selective", "dist_opt"): run(layer + extra["selective"]),
        ("full", "dist_opt"): run(layer + extra["full"]),
        ("none", "fsdp2"): run(layer + extra["fsdp2"]),
    }
    fields, _ = host_floor_fit(spec, seconds)
    want = {"host_floor_layer_s": layer, "host_floor_microbatch_s": fixed, "host_floor_selective_s": 0.0005}
    want |= {"host_floor_full_s": 0.002, "host_floor_fsdp_layer_s": 0.0027}
    assert fields == pytest.approx(want, rel=1e-9)
    small = from_hf_config("tiny-moe")
    plan = resolve(small, 1, ParallelConfig(), seq_len=256)
    hw = load_hardware("H200")
    for o in (
        TrainingOptions(optimizer="fsdp2", seq_len=256, num_microbatches=4, recompute="full"),
        TrainingOptions(optimizer="dist_opt", seq_len=256, num_microbatches=1),
    ):
        before, after = predict(small, plan, o, hardware=hw), predict(small, plan, o, hardware=replace(hw, **fields))
        rec = small.num_layers * (0.002 if o.recompute == "full" else 0)
        both = fixed + small.num_layers * (layer + (0.0027 if o.optimizer == "fsdp2" else 0))
        floor_f, floor_b = host_floor_s(replace(hw, **fields), o, small.num_layers, 0.25)
        assert (floor_f, floor_b) == pytest.approx((both / 4, both * 3 / 4 + rec), rel=1e-9)  # recompute: backward
        per = both + rec
        assert before.parts["host_bound"] == 0  # no floor known: the device model alone
        # the tiny model's micro-batch is far below its floor: the step is the floor per micro-batch + the update
        update = after.parts["optimizer"] + after.parts["offload"]
        assert after.step_s == pytest.approx(o.num_microbatches * per + update, rel=1e-9)
        assert after.parts["host_bound"] > 0 and sum(after.parts.values()) == pytest.approx(after.step_s)
    # a GPU-bound micro-batch (a long sequence) keeps its device time: the floor does not add to it
    big_plan = resolve(spec, 8, ParallelConfig(ep=8), seq_len=8192)
    o = TrainingOptions(seq_len=8192, num_microbatches=2)
    b, a = predict(spec, big_plan, o, hardware=hw), predict(spec, big_plan, o, hardware=replace(hw, **fields))
    assert a.parts["host_bound"] == 0 and a.step_s == b.step_s


def test_the_forward_host_floor_does_not_hide_behind_the_backwards_gpu_time():
    """A micro-batch whose whole host floor is below its device time still waits on the host in the forward when
    the forward alone issues slower than its GPU runs (the backward cannot start before the forward's loss): a long
    sequence, whose flash backward is 2.5 x its forward."""
    from dataclasses import replace

    from mlite.mesh import ParallelConfig, resolve
    from mlite.options import TrainingOptions
    from mlite.time import predict
    from mlite.time.model import host_floor_s

    spec = from_hf_config("tiny-dense")
    plan = resolve(spec, 1, ParallelConfig(), seq_len=32768)
    o = TrainingOptions(seq_len=32768, num_microbatches=2, optimizer="dist_opt")
    hw = load_hardware("H200")
    base = predict(spec, plan, o, hardware=hw)
    device_mb = sum(v for k, v in base.parts.items() if k not in ("optimizer", "offload", "pp_bubble")) / 2
    fwd_mb = base.parts["forward"] / 2
    # a floor of 0.95 x the device time, its forward third above the forward's device time
    floored = replace(hw, host_floor_layer_s=0.95 * device_mb / spec.num_layers)
    floor_f, floor_b = host_floor_s(floored, o, spec.num_layers, 1 / 3)
    assert floor_f + floor_b < device_mb and floor_f > fwd_mb
    t = predict(spec, plan, o, hardware=floored)
    assert t.parts["host_bound"] > 0
    assert t.step_s > base.step_s
