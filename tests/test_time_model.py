"""The time model (mlite.time): FLOPs against the FLOP counter's formula, the step's arithmetic, what each mesh and
option costs, the hardware profiles and the ``mlite time`` command's edges."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace

import pytest

from mlite.errors import MliteError
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.models.flops import flops_per_token
from mlite.options import TrainingOptions
from mlite.paths import REPO_ROOT
from mlite.time import PARTS, hardware_names, load_hardware, predict
from mlite.time.hardware import REQUIRED, profile_from_dict
from mlite.time.model import COMM_PARTS


def _ideal():
    """A profile on which compute is exactly FLOPs / peak: no memory-bound floor, no fixed costs."""
    return replace(
        load_hardware("H100"),
        hbm_bytes_per_s=1e30,
        gemm_efficiency=1.0,
        grouped_gemm_efficiency=1.0,
        attention_efficiency=1.0,
        attention_bwd_efficiency=1.0,
        gdn_efficiency=1.0,
        gemm_overhead_s=0.0,
        kernel_launch_s=0.0,
    )


@pytest.mark.parametrize(
    "name",
    [
        "tiny-dense",
        "tiny-moe",
        "tiny-qwen2",
        "Qwen3-30B-A3B",
        "Moonlight-16B-A3B-Instruct",
        "Llama-3.1-8B",
        "tiny-hybrid",
    ],
)
def test_forward_flops_are_the_flop_counters(name):
    """GEMM + expert + attention work of the forward at peak = flops_per_token's forward (the formula
    tests/test_flops.py holds to FlopCounterMode), times the tokens: no weight counted twice or dropped."""
    spec = from_hf_config(name)
    o = TrainingOptions(seq_len=1024, num_microbatches=1)
    plan = resolve(spec, 1, ParallelConfig(), seq_len=o.seq_len)
    hw = _ideal()
    t = predict(spec, plan, o, hw)
    fwd = t.compute["forward"]
    got = (fwd.get("gemm", 0) + fwd.get("experts", 0) + fwd.get("attention", 0)) * hw.peak_bf16_flops
    want = flops_per_token(spec, o.seq_len, training=False) * o.seq_len  # routers: neither counts them here
    # the formula also counts vectors of the mixer (q/k norms, biases, dt_bias) as matrix weights: < 0.2 % on the
    # tiny models, nothing on the real ones
    assert got == pytest.approx(want, rel=2e-3 if name.startswith("tiny") else 1e-4)
    assert got <= want


def test_parts_add_up_and_keys():
    spec = from_hf_config("Qwen3-30B-A3B")
    o = TrainingOptions(seq_len=4096, num_microbatches=8)
    plan = resolve(spec, 32, ParallelConfig(tp=2, pp=2, ep=8), seq_len=4096)
    t = predict(spec, plan, o, "H100")
    assert set(t.parts) == set(PARTS)
    assert sum(t.parts.values()) == pytest.approx(t.step_s)
    assert t.exposed_comm_s == pytest.approx(sum(t.parts[k] for k in COMM_PARTS))
    assert t.tokens_per_s_per_gpu == pytest.approx(4096 * 8 * plan.dp / t.step_s / 32)
    d = t.to_dict()
    for k in ("step_s", "tokens_per_s_per_gpu", "mfu", "parts", "exposed_comm_s", "assumptions", "hardware"):
        assert k in d
    assert all(t.comm_total[k] >= t.parts[k] - 1e-12 for k in COMM_PARTS)  # exposed never exceeds what is sent
    json.dumps(d)


def test_pipeline_bubble_is_pp_minus_one_over_m_vpp():
    """The bubble is (pp - 1) / vpp mean micro-batches: the same at any m, halved by VPP 2, and never more than
    (pp - 1) / (m x vpp) of the slowest rank's micro-batches."""
    spec = from_hf_config("Llama-3.1-8B")
    got = {}
    for m, vpp in ((4, 1), (16, 1), (8, 2)):
        o = TrainingOptions(seq_len=2048, num_microbatches=m)
        plan = resolve(spec, 4, ParallelConfig(pp=4, vpp=vpp), seq_len=2048)
        t = predict(spec, plan, o, "H100")
        per_mb = (t.step_s - t.parts["pp_bubble"] - t.parts["optimizer"] - t.parts["dp_comm"]) / m
        assert 0.8 * 3 / (m * vpp) < t.parts["pp_bubble"] / (m * per_mb) <= 3 / (m * vpp)
        got[m, vpp] = t.parts["pp_bubble"]
    assert got[4, 1] == pytest.approx(got[16, 1], rel=1e-9)
    assert got[8, 2] == pytest.approx(got[4, 1] / 2, rel=0.02)


def test_tp_across_nodes_costs_the_network():
    spec = from_hf_config("Llama-3.1-70B")
    o = TrainingOptions(seq_len=4096, num_microbatches=8, sequence_parallel=True)
    inside = predict(spec, resolve(spec, 16, ParallelConfig(tp=8), seq_len=4096, gpus_per_node=8), o, "H100")
    across = predict(spec, resolve(spec, 16, ParallelConfig(tp=8), seq_len=4096, gpus_per_node=4), o, "H100")
    hw = load_hardware("H100")
    # the same TP 8 collectives, over the network once the node holds 4 GPUs: the ring's channels use the 4 NICs of
    # the group's ranks in each node side by side
    ratio = across.parts["tp_comm"] / inside.parts["tp_comm"]
    net = min(hw.nvlink_bytes_per_s, 4 * hw.network_bytes_per_s)
    assert ratio == pytest.approx(hw.nvlink_bytes_per_s / net, rel=0.15)  # + fixed latency
    assert across.step_s > inside.step_s


def test_a_ring_across_nodes_uses_the_nics_of_its_ranks_in_each_node():
    from mlite.time.comm import ranks_per_node, ring_s

    hw = load_hardware("H100")
    b = 140e9
    assert ranks_per_node(64, 1, 8) == 8 and ranks_per_node(8, 8, 8) == 1 and ranks_per_node(4, 2, 8) == 4
    assert ranks_per_node(2, 1, 8) == 2
    # 64 ranks over 8 full nodes: 8 NICs per node in parallel (8 x 50 GB/s = 400 GB/s, under NVLink's 450)
    full = ring_s(hw, b, 64, True, "all_gather", ranks_per_node(64, 1, 8))
    assert full == pytest.approx(63 / 64 * b / (8 * hw.network_bytes_per_s * hw.comm_efficiency) + hw.comm_latency_s)
    # one rank per node (a DP group strided over a full TP node): one NIC
    one = ring_s(hw, b, 8, True, "all_gather", ranks_per_node(8, 8, 8))
    assert one == pytest.approx(7 / 8 * b / (hw.network_bytes_per_s * hw.comm_efficiency) + hw.comm_latency_s)
    # never faster than NVLink, however many NICs the node has
    many = ring_s(hw, b, 64, True, "all_gather", 16)
    assert many == pytest.approx(63 / 64 * b / (hw.nvlink_bytes_per_s * hw.comm_efficiency) + hw.comm_latency_s)
    # FSDP2 over 64 GPUs: the step's gathers move at the node's NICs, not one GPU's
    spec = from_hf_config("Llama-3.1-70B")
    o = TrainingOptions(seq_len=8192, num_microbatches=4, optimizer="fsdp2", recompute="full")
    plan = resolve(spec, 64, ParallelConfig(cp=2), seq_len=8192, gpus_per_node=8)
    strided = resolve(spec, 64, ParallelConfig(cp=2), seq_len=8192, gpus_per_node=1)
    t, t1 = predict(spec, plan, o, "H100"), predict(spec, strided, o, "H100")
    assert t1.comm_total["dp_comm"] / t.comm_total["dp_comm"] == pytest.approx(8, rel=0.01)


def test_offload_and_recompute_cost_what_they_move():
    from mlite.options.optimizers import UPDATE_CHUNK

    spec = from_hf_config("tiny-dense")
    plan = resolve(spec, 1, ParallelConfig(), seq_len=512)
    hw = load_hardware("H200")
    base = TrainingOptions(seq_len=512, num_microbatches=1, optimizer="fsdp2")
    t0 = predict(spec, plan, base, hw)
    t1 = predict(spec, plan, replace(base, offload_fraction=1.0), hw)
    half = predict(spec, plan, replace(base, offload_fraction=0.5), hw)
    n = spec.training_params
    assert t0.parts["offload"] == 0
    for f, t in ((1.0, t1), (0.5, half)):
        # serial, as the runtime runs it: every fp32 gradient down, the host Adam, then the last span's bf16 back
        down, back = f * n * 4 / hw.pcie_bytes_per_s, min(f * n, UPDATE_CHUNK) * 2 / hw.pcie_bytes_per_s
        assert t.parts["offload"] == pytest.approx(down + f * n / hw.host_adam_params_per_s + back, rel=1e-9)
    # a shard larger than a span: only one span's copy back is exposed, so the part grows with f less the span
    big = from_hf_config("Llama-3.1-8B")
    bplan = resolve(big, 1, ParallelConfig(), seq_len=512)
    b1, bh = (predict(big, bplan, replace(base, offload_fraction=f), hw).parts["offload"] for f in (1.0, 0.5))
    span_back = UPDATE_CHUNK * 2 / hw.pcie_bytes_per_s
    assert b1 - span_back == pytest.approx(2 * (bh - span_back), rel=1e-9)
    full = predict(spec, plan, replace(base, recompute="full"), hw)
    sel = predict(spec, plan, replace(base, recompute="selective"), hw)
    assert t0.parts["recompute"] == 0 < sel.parts["recompute"] < full.parts["recompute"]
    assert full.compute["recompute"]["gemm"] == pytest.approx(
        t0.compute["forward"]["gemm"] - _head_gemm(spec, plan, base, hw), rel=1e-6
    )


def _head_gemm(spec, plan, o, hw):
    from mlite.time.compute import head_cost
    from mlite.time.model import _shard

    return head_cost(hw, spec, _shard(spec, plan, o), False).parts["gemm"]


def test_optimizer_bytes_follow_the_storage():
    from mlite.time.model import optimizer_bytes_per_param

    fp32, _ = optimizer_bytes_per_param(TrainingOptions())
    pao, text = optimizer_bytes_per_param(
        TrainingOptions(
            use_precision_aware_optimizer=True, main_grads_dtype="bf16", exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"
        )
    )
    assert fp32 == 4 + 4 + 8 + 16 + 2 + 4
    assert pao == 2 + 2 + 8 + 8 + 0 + 2 and "master" in text


def test_shipped_profiles_load_with_sources():
    assert {"A100", "H100", "H200", "B200"} <= set(hardware_names())
    for name in hardware_names():
        hw = load_hardware(name.lower())
        for k in (
            "peak_bf16_flops",
            "hbm_bytes_per_s",
            "nvlink_bytes_per_s",
            "network_bytes_per_s",
            "pcie_bytes_per_s",
        ):
            assert hw.sources.get(k), (name, k)
        assert hw.peak_bf16_flops > 1e14


def test_profile_fields_refused_in_one_line(tmp_path):
    doc = load_hardware("H200").to_dict()
    for k in REQUIRED:
        bad = {kk: v for kk, v in doc.items() if kk != k}
        with pytest.raises(MliteError, match=repr(k)):
            profile_from_dict(bad, "p.json")
    with pytest.raises(MliteError, match="gemm_efficiency"):
        profile_from_dict({**doc, "gemm_efficiency": 1.5}, "p.json")
    with pytest.raises(MliteError, match="hbm_bytes_per_s"):
        profile_from_dict({**doc, "hbm_bytes_per_s": float("nan")}, "p.json")
    with pytest.raises(MliteError, match="unknown field 'peak_tf32'"):
        profile_from_dict({**doc, "peak_tf32": 1.0}, "p.json")


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "mlite", "time", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_cli_json_from_another_directory_with_a_relative_profile(tmp_path):
    prof = dict(load_hardware("H100").to_dict(), name="my node", network_bytes_per_s=12.5e9)
    (tmp_path / "node.json").write_text(json.dumps(prof))
    r = _cli("Qwen3-30B-A3B", "--ngpu", "16", "--ep", "8", "--hardware", "node.json", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["hardware"]["name"] == "my node"
    ib = _cli("Qwen3-30B-A3B", "--ngpu", "16", "--ep", "16", "--hardware", "node.json", "--json", cwd=tmp_path)
    nv = _cli("Qwen3-30B-A3B", "--ngpu", "16", "--ep", "8", "--hardware", "node.json", "--json", cwd=tmp_path)
    # EP 16 leaves the node: its all-to-all runs on the (slow) network of this profile
    assert json.loads(ib.stdout)["parts"]["ep_comm"] > 3 * json.loads(nv.stdout)["parts"]["ep_comm"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--hardware", "X100"], "--hardware 'X100'"),
        (["--hardware", "missing.json"], "--hardware 'missing.json'"),
        (["--tp", "3"], "invalid mesh"),
        (["--hardware", "partial.json"], "missing field"),
        (["--calibrate-from", "nowhere"], "--calibrate-from nowhere"),
    ],
)
def test_cli_bad_input_exits_2_in_one_line(tmp_path, args, needle):
    (tmp_path / "partial.json").write_text(json.dumps({"name": "x", "peak_bf16_flops": 1e15}))
    before = sorted(p.name for p in tmp_path.iterdir())
    r = _cli("tiny-dense", "--ngpu", "2", *args, cwd=tmp_path)
    assert r.returncode == 2
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_refit_from_a_run_reproduces_its_step():
    """--calibrate-from: the refitted profile predicts the run's own measured median step (the anchor)."""
    from mlite.time.fit import calibrate_from_run, run_step_seconds

    run = REPO_ROOT / "data" / "logs" / "mlite_tiny_moe_fsdp2"
    measured, n = run_step_seconds(run)
    hw, info = calibrate_from_run(run, load_hardware("H200"))
    assert n >= 3 and info["reached"] and info["predicted_after_s"] == pytest.approx(measured, rel=0.01)
    assert info["scale"] != pytest.approx(1.0)
    assert math.isfinite(hw.gemm_efficiency) and 0 < hw.gemm_efficiency <= 1


def test_knobs_change_what_they_name():
    from mlite.time.comm import all_to_all_s
    from mlite.time.knobs import Knobs

    spec = from_hf_config("Qwen3-30B-A3B")
    o = TrainingOptions(seq_len=4096, num_microbatches=8)
    plan = resolve(spec, 16, ParallelConfig(ep=16), seq_len=4096)
    hw = load_hardware("H100")
    base = predict(spec, plan, o, hw)
    hidden = predict(spec, plan, o, hw, Knobs(ep_comm_overlap=0.7))
    assert hidden.parts["ep_comm"] == pytest.approx(0.3 * base.parts["ep_comm"])
    assert hidden.comm_total["ep_comm"] == pytest.approx(base.comm_total["ep_comm"])  # the links carry the same
    fp8 = predict(spec, plan, o, hw, Knobs(gemm_dtype="fp8"))
    assert fp8.compute["forward"]["experts"] < 0.75 * base.compute["forward"]["experts"]
    assert fp8.compute["forward"]["elementwise"] > base.compute["forward"]["elementwise"]  # the casts
    half = predict(spec, plan, o, hw, Knobs(dispatch_dtype="fp8"))
    assert 0.7 * base.comm_total["ep_comm"] < half.comm_total["ep_comm"] < 0.8 * base.comm_total["ep_comm"]
    # EP 16 on two nodes of 8: half of each rank's buffer leaves the node, 7/16 stays on NVLink
    b = 1e9
    t = all_to_all_s(hw, b, 16, 1, 8)
    expect = max(
        8 / 16 * b / (hw.network_bytes_per_s * hw.comm_efficiency),
        7 / 16 * b / (hw.nvlink_bytes_per_s * hw.comm_efficiency),
    )
    assert t == pytest.approx(expect + hw.comm_latency_s)
    dense = from_hf_config("Llama-3.1-8B")
    dplan = resolve(dense, 16, ParallelConfig(), seq_len=4096)
    fo = TrainingOptions(seq_len=4096, num_microbatches=4, optimizer="fsdp2")
    two = predict(dense, dplan, fo, hw)
    one = predict(dense, dplan, fo, hw, Knobs(fsdp_reshard_after_forward=False, fsdp_reduce_every_microbatch=False))
    assert one.comm_total["dp_comm"] < 0.6 * two.comm_total["dp_comm"]
    with pytest.raises(MliteError, match="tp_comm_overlap"):
        Knobs(tp_comm_overlap=1.5).check()
    r = _cli("tiny-dense", "--ngpu", "2", "--ep-comm-overlap", "2", cwd="/")
    assert r.returncode == 2 and "ep_comm_overlap" in r.stderr
