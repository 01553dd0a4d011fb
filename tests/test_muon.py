"""Muon (``--optimizer-algorithm muon``, issue #26): the lite runtime's step against an independent reference written
from Keller Jordan's Muon (sum momentum ``buf = mu buf + g``, Nesterov ``g + mu buf``, NS5 on the matrix), on one
rank and on a 2-rank distributed-optimizer shard (CPU, gloo, one spawned group for every multi-rank check); the
measured optimizer bytes per rank against the estimate; every rule's refusal (CLI exit 2); the launcher keys'
round trip; the estimator's bytes against the formula.

The runtime's momentum is the EMA form (Emerging-Optimizers ``lerp``): (1 - mu) times Keller's, a factor the
Newton-Schulz normalisation removes, so the two agree to fp32 rounding (checked at relative 1e-4 of the update).
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import run_cli
from runtime_workers import runtime_config, synthetic_microbatches

from mlite.errors import MliteError
from mlite.mesh import ParallelConfig, resolve
from mlite.runtime.dist import run_local

KELLER = {
    "simple": [(3.4445, -4.7750, 2.0315)] * 5,
    "quintic": [
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ],
}
"""The published coefficients (Keller Jordan's NS5; modded-nanogpt's tuned quintic sets)."""
VARIANTS = {
    "nesterov-simple": {"muon_nesterov": True, "muon_coefficient_type": "simple"},
    "plain-quintic-adamw-scale": {"muon_momentum": 0.9, "muon_match_adamw_update_rms": True},
    "whole-state-per-rank": {"muon_nesterov": True, "use_distributed_optimizer": False},
}
"""Runtime settings of the step checks; the last keeps every matrix whole on each rank (plain DDP: the data-parallel
path without a gather), the others shard the state over the two ranks."""
STEPS = 2
MEMORY_MODELS = ("tiny-dense", "tiny-moe")


def _ns_reference(g: torch.Tensor, coeffs) -> torch.Tensor:
    """Keller Jordan's zeropower_via_newtonschulz5 in fp32 (one matrix)."""
    x = g.double().float()
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for a, b, c in coeffs:
        A = x @ x.T
        B = b * A + c * A @ A
        x = a * x + B @ x
    return x.T if tall else x


def _keller_muon(w0, grads, *, lr, wd, mu, nesterov, coeffs, extra):
    """w after len(grads) Muon steps from w0 (stacked experts: one matrix each)."""
    w, buf = w0.clone(), torch.zeros_like(w0)
    for g in grads:
        buf = mu * buf + g
        u = g + mu * buf if nesterov else buf
        mats = u.reshape(-1, *u.shape[-2:])
        o = torch.stack([_ns_reference(m, coeffs) for m in mats]).reshape(u.shape)
        w = w * (1 - lr * wd)
        w = w - lr * max(u.shape[-2], u.shape[-1]) ** 0.5 * extra * o
    return w


def _full_reduced_grads(rt) -> dict:
    """Every parameter's whole reduced gradient (the ranks' shard ranges summed), after the buffers' sync."""
    import torch.distributed as dist

    out = {}
    for b in rt.ddp.buffers:
        lo, hi = b.shard_range()
        for name, p, a in zip(b.names, b.params, b.starts):
            n = p.numel()
            full = torch.zeros(n)
            s, e = max(a, lo), min(a + n, hi)
            if s < e:
                full[s - a : e - a] = b.grad_data[s:e].float()
            if b.distributed and b.size > 1:
                dist.all_reduce(full, group=b.group)
            out[name] = full.view(p.shape).clone()
    return out


def _cfg(model, **kw):
    kw = {"optimizer": "dist_opt", "optimizer_algorithm": "muon", "lr_warmup_steps": 0, **kw}
    kw.setdefault("lr_decay_style", "constant")
    cfg = runtime_config(model, **kw)
    cfg.backend_cfg.parallel = ParallelConfig()
    return cfg


def _worker(rank, world):
    from mlite.runtime.runtime import create_runtime

    out: dict = {"steps": {}, "memory": {}}
    for name, kw in VARIANTS.items():
        rt = create_runtime(
            _cfg("tiny-moe", param_dtype="fp32", clip_grad=0.0, muon_fp32_matmul_prec="high", lr=2e-2, **kw)
        )
        h = rt.build_model()
        w0 = {n: p.detach().clone() for n, p in h.model.named_parameters()}
        grads = []
        for k in range(STEPS):
            rt.forward_backward(h, synthetic_microbatches(k, rt.pstate.dp_rank))
            rt._grad_groups(h)  # the buffers' reduction (once per step; optimizer_step reuses it)
            grads.append(_full_reduced_grads(rt))
            ok, _, _ = rt.optimizer_step(h)
            assert ok
            rt.zero_grad(h)
        w1 = {n: p.detach().clone() for n, p in h.model.named_parameters()}
        muon = sorted(s.name for s in h.optimizer.muon_slots)
        out["steps"][name] = (w0, grads, w1, muon, h.optimizer.extra_scale)
    for model in MEMORY_MODELS:
        rt = create_runtime(_cfg(model, param_dtype="bf16"))
        h = rt.build_model()
        rt.train_step(h, synthetic_microbatches(0, rt.pstate.dp_rank))
        st = rt.memory_stats(h)
        out["memory"][model] = {k: st[k]["bytes"] for k in ("master", "exp_avg", "exp_avg_sq")}
    return out


@pytest.fixture(scope="module")
def results():
    return {2: run_local(_worker, 2, timeout_s=600)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_muon_step_equals_the_reference(results, variant):
    world = 2
    from mlite.runtime.optim.muon import is_muon_param

    kw = {"muon_momentum": 0.95, "muon_nesterov": False, "muon_coefficient_type": "quintic", **VARIANTS[variant]}
    w0, grads, w1, muon, extra = results[world][0]["steps"][variant]
    want_extra = math.sqrt(0.1 / 1.9) if kw.get("muon_match_adamw_update_rms") else 1.0
    assert extra == pytest.approx(want_extra, rel=1e-12)
    matrices = [n for n in w0 if is_muon_param(n, w0[n])]
    assert "embed.weight" not in matrices and any(".experts." in n or "gate_up" in n for n in matrices)
    if "use_distributed_optimizer" in VARIANTS[variant]:
        assert muon == sorted(matrices)  # every rank holds every matrix whole
    else:
        assert 0 < len(muon) < len(matrices) + 2  # the shards split the matrices (one may straddle both)
    for name in matrices:
        ref = _keller_muon(
            w0[name],
            [g[name] for g in grads],
            lr=2e-2,
            wd=0.01,
            mu=kw["muon_momentum"],
            nesterov=kw["muon_nesterov"],
            coeffs=KELLER[kw["muon_coefficient_type"]],
            extra=want_extra,
        )
        delta, ref_delta = w1[name] - w0[name], ref - w0[name]
        assert ref_delta.abs().max() > 0
        err = (delta - ref_delta).abs().max() / ref_delta.abs().max()
        assert err < 1e-4, (world, variant, name, float(err))
    # the ranks end with the same (gathered) parameters
    for r in results[world][1:]:
        for name in w1:
            assert torch.equal(r["steps"][variant][2][name], w1[name])


@pytest.mark.parametrize("model", MEMORY_MODELS)
def test_measured_optimizer_bytes_equal_the_estimate(results, model):
    from mlite.memory import TrainingOptions, estimate
    from mlite.models import from_hf_config

    spec = from_hf_config(model)
    for world in (2,):
        o = TrainingOptions(optimizer="dist_opt", optimizer_algorithm="muon", param_dtype="bf16")
        det = estimate(spec, resolve(spec, world, ParallelConfig(), seq_len=4096), o).to_dict()["optimizer_detail"]
        for key in ("master", "exp_avg", "exp_avg_sq"):
            total = sum(r["memory"][model][key] for r in results[world])
            assert total == world * det[key], (model, world, key, total, det[key])


def test_bytes_per_parameter_follow_the_formula():
    """dist_opt, bf16, d = 2: Muon matrices 2 + 4 + (4 master + 4 momentum) / d, the AdamW rest 2 + 4 + 12 / d."""
    from mlite.memory import TrainingOptions, estimate
    from mlite.memory.params import stage_params
    from mlite.models import from_hf_config

    spec = from_hf_config("tiny-moe")
    plan = resolve(spec, 2, ParallelConfig(), seq_len=4096)
    est = estimate(spec, plan, TrainingOptions(optimizer_algorithm="muon")).to_dict()
    sp = stage_params(spec, plan)[0]
    mu = est["muon"]
    mats = sum(n * g.numel for layer, n in sp.layer_kinds for g in layer.groups if g.matrix and not g.checkpoint_only)
    assert mu["matrix_params"] == round(mats / 2) and mu["adamw_params"] == round(sp.total / 2 - mats / 2)
    d = est["optimizer_detail"]
    assert d["exp_avg"] == round(4 * sp.total / 2) and d["exp_avg_sq"] == round(4 * (sp.total - mats) / 2)
    assert d["master"] == round(4 * sp.total / 2)
    want = (6 * sp.total + (8 * mats + 12 * (sp.total - mats)) / 2) / sp.total
    assert est["bytes_per_param"] == pytest.approx(want, rel=1e-9)
    adam = estimate(spec, plan, TrainingOptions()).to_dict()
    assert adam["muon"] is None and adam["bytes_per_param"] == pytest.approx(6 + 12 / 2)


def test_newton_schulz_workspace_formula():
    from mlite.memory.muon import ns_workspace_bytes

    k, n = 64, 128
    assert (
        ns_workspace_bytes(128, 64) == ns_workspace_bytes(64, 128) == 4 * k * n + max(6 * k * n, 4 * k * n + 4 * k * k)
    )
    assert ns_workspace_bytes(64, 128, "high") == 4 * k * n + 8 * k * n + 8 * k * k


def test_the_router_is_a_matrix_and_norms_embeddings_are_not():
    from mlite.models import from_hf_config

    spec = from_hf_config("tiny-moe")
    groups = [g for layer in spec.layers for g in layer.groups]
    assert any(g.component == "router" and g.matrix for g in groups)
    assert not any(g.matrix for g in groups if g.component == "norms")
    assert not any(g.matrix for g in (*spec.pre, *spec.post))


REFUSALS = [
    (["--optimizer", "fsdp2"], "muon runs on dist_opt only"),
    (["--optimizer", "mfsdp"], "muon runs on dist_opt only"),
    (["--pao"], "muon does not run with the precision-aware optimizer"),
    (["--offload-fraction", "0.5"], "Megatron Lite's Muon does not support"),
    (["--chunked-optimizer-state-offload"], "Megatron Lite's Muon does not support optimizer CPU offload"),
    (["--muon-ns-steps", "3"], "muon_num_ns_steps"),
    (["--muon-match-adamw", "--muon-extra-scale", "0.3"], "muon_match_adamw_update_rms"),
]


@pytest.mark.parametrize("command", ("memory", "check"))
@pytest.mark.parametrize("words,needle", REFUSALS, ids=[r[1][:24] for r in REFUSALS])
def test_every_rule_refuses_with_its_reason(command, words, needle, capsys):
    from mlite.cli import main

    rc = main([command, "tiny-dense", "--ngpu", "2", "--optimizer-algorithm", "muon", *words])
    out = capsys.readouterr()
    assert rc == 2, (out.out, out.err)
    assert needle in out.out + out.err


def test_the_cli_exits_2_without_a_traceback():
    p = run_cli("memory", "tiny-dense", "--ngpu", "2", "--optimizer-algorithm", "muon", "--optimizer", "fsdp2")
    assert p.rc == 2 and "muon runs on dist_opt only" in p.err and "Traceback" not in p.err


def test_rules_name_their_source():
    from mlite.options import TrainingOptions

    with pytest.raises(MliteError, match="045fc78a"):
        TrainingOptions(optimizer="fsdp2", optimizer_algorithm="muon")


def test_rl_use_is_a_research_only_warning():
    from mlite.options.rules import muon_rl_research_only

    assert "research-only" in muon_rl_research_only("muon", True)
    assert muon_rl_research_only("muon", False) is None and muon_rl_research_only("adam", True) is None


@pytest.mark.parametrize("target", ("verl-mlite-sft", "verl-mlite-grpo", "verl-megatron-grpo"))
def test_export_import_round_trip(target):
    from mlite.export import ExportPlan, render
    from mlite.export.importer import import_launcher
    from mlite.options import TrainingOptions

    o = TrainingOptions(
        optimizer_algorithm="muon",
        muon_momentum=0.9,
        muon_nesterov=True,
        muon_num_ns_steps=10,
        muon_coefficient_type="simple",
        muon_match_adamw_update_rms=True,
    )
    plan = ExportPlan(model="Qwen3-8B", target=target, parallel=ParallelConfig(tp=2), options=o, nodes=1)
    res = render(plan)
    text = res.files[res.launcher]
    got = import_launcher("launcher", text=text).training_options()
    for f in ("optimizer_algorithm", "muon_momentum", "muon_nesterov", "muon_num_ns_steps", "muon_coefficient_type"):
        assert getattr(got, f) == getattr(o, f), f
    assert "optim.muon_match_adamw_update_rms=True" in text and got.muon_match_adamw_update_rms  # verl derives it
    assert "optim.optimizer=muon" in text and "+actor_rollout_ref.actor.optim.muon" not in text  # packaged keys


@pytest.mark.parametrize("target,warned", (("verl-mlite-grpo", True), ("verl-mlite-sft", False)))
def test_the_preflight_warns_that_muon_in_rl_is_research_only(target, warned):
    from mlite.check.preflight import check, from_launcher
    from mlite.export import ExportPlan, render
    from mlite.options import TrainingOptions

    o = TrainingOptions(optimizer_algorithm="muon")
    res = render(ExportPlan(model="Qwen3-8B", target=target, parallel=ParallelConfig(tp=2), options=o, nodes=1))
    rep = check(from_launcher("launcher", text=res.files[res.launcher]))
    found = [f for f in rep.findings if f.rule == "muon_rl_research_only"]
    assert [f.level for f in found] == (["warning"] if warned else [])
    assert not warned or "a0ff8077" in found[0].message


def test_the_device_bench_parses_and_reports(tmp_path):
    """bench/muon_device.py: its arguments and the --report CSV from a raw JSON (the estimate column recomputed)."""
    import csv
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("muon_device", root / "bench" / "muon_device.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a = mod.parse_args(["--out", str(tmp_path), "--tiny", "--pairs", "1"])
    assert (a.pairs, a.seq, a.device) == (3, 64, "cuda")
    with pytest.raises(SystemExit):
        mod.parse_args([])  # measuring needs --out
    est = {arm: mod.estimate_for(arm, 64, True, "cuda") for arm in mod.ARMS}
    assert est["muon"]["optimizer_state"] < est["adam"]["optimizer_state"] and est["muon"]["newton_schulz"] > 0
    arms = {
        arm: {
            "optimizer_state": est[arm]["optimizer_state"],
            "state_gpu": est[arm]["state_gpu"],
            "steady": 10,
            "full_step_peak": 30,
            "optimizer_peak": 20,
            "step_time_median_s": t,
            "optimizer_time_median_s": t / 4,
        }
        for arm, t in (("adam", 1.0), ("muon", 1.5))
    }
    raw = {"command": "python3 bench/muon_device.py --out X", "gpu": "H200", "torch_version": "2.11", "device": "cuda"}
    (tmp_path / "raw.json").write_text(json.dumps({**raw, "tiny": True, "seq": 64, "arms": arms, "pairs": []}))
    mod.report(tmp_path / "raw.json", tmp_path / "muon.csv")
    rows = list(csv.DictReader((tmp_path / "muon.csv").open()))
    by = {(r["arm"], r["measurement"]): r for r in rows}
    assert by[("muon", "optimizer_state")]["estimate"] == str(est["muon"]["optimizer_state"])
    assert by[("muon", "optimizer_peak")]["estimate"] == str(est["muon"]["peak_optimizer_only"])
    assert by[("muon", "step_time_vs_adam")]["value"] == "1.5"
    assert all(r["gpu"] == "H200" and r["command"].endswith(mod.REPORT_CMD) for r in rows)


def test_the_memory_view_has_the_muon_knobs_only_under_muon_and_they_reach_the_estimate():
    from mlite.memory import estimate as _estimate
    from mlite.mesh import ParallelConfig as _PC
    from mlite.mesh import resolve as _resolve
    from mlite.models import from_hf_config as _spec
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner

    view = MemoryView(MeshPlanner("Qwen3-8B", ngpu=8))
    c = view.controls
    assert c["muon_fp32_matmul_prec"].disabled and c["muon_num_ns_steps"].disabled  # adam: no Muon knobs
    view.set(optimizer_algorithm="muon")
    assert not c["muon_fp32_matmul_prec"].disabled
    bf16 = view.estimate.to_dict()["muon"]["newton_schulz_bytes"]
    view.set(muon_fp32_matmul_prec="high")
    o = view.options()
    assert o.muon_fp32_matmul_prec == "high"
    sp = _spec("Qwen3-8B")
    want = _estimate(sp, _resolve(sp, 8, _PC(), seq_len=o.seq_len), o).to_dict()["muon"]["newton_schulz_bytes"]
    assert view.estimate.to_dict()["muon"]["newton_schulz_bytes"] == want > bf16  # fp32 iterations: a larger workspace
    assert "--muon-matmul-prec high" in view.command()


@pytest.mark.parametrize("model", MEMORY_MODELS)
@pytest.mark.parametrize("pd,prec", [("fp32", "medium"), ("fp32", "high"), ("bf16", "medium")])
def test_the_steps_measured_transient_is_the_estimates_to_the_byte(model, pd, prec):
    """The live bytes the third Muon step allocates (tests/live_bytes.py: every storage its ops create, on the CPU)
    peak at the estimate's ``transients["optimizer_step"]``, which is ``cuda_peaks`` optimizer_only - steady: one
    tensor's Newton-Schulz (a stack of experts at once) with fp32 parameters, the chunked round_bf16 with bf16 ones
    (no fp32 gradient copy, no earlier matrix's result left alive)."""
    from live_bytes import LiveBytes

    from mlite.memory import TrainingOptions, estimate
    from mlite.models import from_hf_config
    from mlite.runtime.runtime import create_runtime

    rt = create_runtime(_cfg(model, param_dtype=pd, muon_fp32_matmul_prec=prec))
    h = rt.build_model()
    for k in range(3):
        rt.forward_backward(h, synthetic_microbatches(k, 0))
        if k < 2:
            assert rt.optimizer_step(h)[0]
            rt.zero_grad(h)
    with LiveBytes() as live:
        assert rt.optimizer_step(h)[0]
        left = live.live
    o = TrainingOptions(optimizer="dist_opt", optimizer_algorithm="muon", param_dtype=pd, activation_model="lite",
                        lite_device="cpu", seq_len=64, muon_fp32_matmul_prec=prec)  # fmt: skip
    d = estimate(from_hf_config(model), ParallelConfig(), o, ngpu=1).to_dict()
    assert live.peak == d["transients"]["optimizer_step"] > 0, live.sizes_at_peak
    assert d["cuda_peaks"]["optimizer_only"] - d["cuda_peaks"]["steady"] == live.peak
    assert left == 0  # nothing the step made stays alive
