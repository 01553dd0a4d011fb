"""The lite runtime on a mesh (gloo, CPU, 1-4 processes): EP, CP, TP, EP x CP (and TP x CP, TP x EP, TP x CP x EP
on tiny-hybrid) runs equal the data-parallel run with the same DP step for step (loss and grad norm, fp32 params,
relative bounds :data:`LOSS_REL` / :data:`GRAD_NORM_REL`, set from the measured spread), PAO stays bitwise equal to the
fp32 master on every mesh, the measured per-rank parameter / gradient / optimizer bytes equal the estimator's
(``mlite memory --optimizer fsdp2``) for 18 meshes (fp32 master) and for 3 meshes x {PAO, PAO + bf16 moments}, the
fused AdamW kernel (Triton, interpreted) updates TP and EP mesh runs as the torch ops do, the run view shows a mesh
run's measured bytes next to the estimate, the packed-batch CP split, and bad meshes refused before any process
starts. The equivalence runs are 6 steps of 2 micro-batches of 2 packed sequences
(12-24 tokens) per DP rank, so CP pads and splits packed sequences and TP pads the stream."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from conftest import assert_one_line_error, run_cli
from runtime_workers import (
    runtime_config,
    same_bits,
    shares_group,
    snapshot,
    synthetic_microbatches,
    train_curve,
    worker_name,
)

from mlite.mesh import ParallelConfig
from mlite.runtime.batch import IGNORE_INDEX, PackedBatch
from mlite.runtime.dist import run_local
from mlite.runtime.parallel.cp import split_batch
from mlite.runtime.parallel.ep import _expert_major

pytestmark = pytest.mark.slow

MODELS = ("tiny-dense", "tiny-moe", "tiny-hybrid")
MOE = ("tiny-moe", "tiny-hybrid")
STEPS = 6
MESHES_BY_WORLD = {
    1: [(m, {}) for m in MODELS],
    2: [(m, {}) for m in MODELS]
    + [(m, {"ep": 2}) for m in MOE]
    + [(m, {"cp": 2}) for m in MODELS]
    + [(m, {"tp": 2}) for m in MODELS],
    4: [(m, {"ep": 2, "cp": 2}) for m in MOE]
    + [
        ("tiny-hybrid", {"tp": 2, "cp": 2}),
        ("tiny-hybrid", {"tp": 2, "ep": 2}),
        ("tiny-hybrid", {"tp": 2, "cp": 2, "ep": 2}),
    ],
}
"""Equivalence runs per world size: DP baselines (DP = 1 and 2) and the mesh runs."""
MEMORY_MESHES = {
    2: [
        ("tiny-moe", {}),
        ("tiny-moe", {"ep": 2}),
        ("tiny-moe", {"cp": 2}),
        ("tiny-moe", {"tp": 2}),
        ("tiny-dense", {"tp": 2}),
        ("tiny-hybrid", {"tp": 2}),
    ],
    4: [
        ("tiny-moe", p)
        for p in (
            {"ep": 2},
            {"ep": 4},
            {"cp": 2},
            {"cp": 4},
            {"ep": 2, "cp": 2},
            {"ep": 4, "cp": 2},
            {"tp": 2},
            {"tp": 2, "ep": 2},
            {"tp": 2, "cp": 2},
            {"tp": 2, "cp": 2, "ep": 2},
        )
    ]
    + [("tiny-hybrid", {"ep": 4}), ("tiny-hybrid", {"tp": 2, "cp": 2})],
}
"""Meshes whose measured per-rank bytes are checked against the estimator (bf16 params, fp32 master)."""
OPTION_KINDS = {
    "PAO": {"use_precision_aware_optimizer": True},
    "PAO + bf16 moments": {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
}
"""Optimizer options besides the fp32 master (runtime OptimizerConfig fields; the estimator's TrainingOptions use the
same names): int16 remainders (10 bytes of state per element), and bf16 moments too (6)."""
OPTION_MESHES = {4: [("tiny-moe", {"tp": 2, "cp": 2, "ep": 2}), ("tiny-moe", {"ep": 4}), ("tiny-dense", {"cp": 2})]}
"""Meshes whose measured bytes are checked against the estimator for every kind of :data:`OPTION_KINDS`."""
UNEVEN = {("tiny-hybrid", 4)}
"""(model, world) where FSDP2's dim-0 chunking gives ranks different shards (tiny-hybrid's ``shared_expert_gate``
is ``[1, 64]``, ``A_log`` ``[4]``...): there the estimator's figure is the mean over ranks, checked exactly."""
EXPORT_MESHES = {2: [("tiny-hybrid", {"tp": 2})], 4: [("tiny-hybrid", {"tp": 2, "ep": 2})]}
"""Meshes on which export_weights must give back the full, unsharded weights."""
PAO_MESHES = {2: [{"ep": 2}, {"cp": 2}, {"tp": 2}], 4: [{"ep": 2, "cp": 2}]}
"""Meshes on which PAO is checked bitwise against the fp32 master."""


LOSS_REL = 1e-5
"""Bound on |mesh - DP| / DP of the loss per step. Measured (2026-12-02, this repository's CPU box, all 13 meshes of
the equivalence test, 10 steps each, of which the 6 steps run now are the first: a deterministic prefix, so their
maximum is at most these): at most 1.4e-7 (tiny-hybrid --tp 2), 1.1e-7 for the CLI run; the bound is 70x
that, and kept at the 1e-5 that also held on the machine of issue 29 (whose loss spread was not recorded)."""
GRAD_NORM_REL = 5e-5
"""Bound on the relative grad-norm difference per step. Measured: at most 6.0e-6 on this box (tiny-moe --tp 2; the
others 3.8e-8 .. 2.5e-6) and 9.2e-6 on another machine (issue 29), where the earlier bound of 1e-5 left 1.08x: the
bound is 5.4x the largest seen. The differences are reduction orders of fp32 sums over ranks (a bug gives 1e-3 and up)."""


def _key(model: str, par: dict) -> str:
    return model + "".join(f" --{k} {v}" for k, v in sorted(par.items())) if par else model + " dp"


def _config(model: str, par: dict, **kw):
    cfg = runtime_config(model, **kw)
    cfg.backend_cfg.parallel = ParallelConfig(**par)
    return cfg


@shares_group
def _mesh_worker(rank, world):
    from mlite.runtime.runtime import create_runtime

    out = {"train": {}, "memory": [], "pao": {}}
    for model, par in MESHES_BY_WORLD[world]:
        curve = train_curve(model, par, STEPS)  # fsdp2, fp32 params (test_runtime_distopt's reference too)
        out["train"][_key(model, par)] = [(m["loss"], m["grad_norm"], m["num_tokens"]) for m in curve]
    for model, par in MEMORY_MESHES.get(world, []):
        rt = create_runtime(_config(model, par, param_dtype="bf16"))
        h = rt.build_model()
        rt.forward_backward(h, synthetic_microbatches(0, rt.pstate.dp_rank))
        rt.optimizer_step(h)
        st = rt.memory_stats(h)
        out["memory"].append(
            (model, par, st["params"]["bytes"], st["grads"]["bytes"], st["optimizer_bytes"], st["mesh"])
        )
        rt.zero_grad(h)
    for model, par in OPTION_MESHES.get(world, []):
        for kind, kw in OPTION_KINDS.items():
            rt = create_runtime(_config(model, par, param_dtype="bf16", **kw))
            h = rt.build_model()
            rt.forward_backward(h, synthetic_microbatches(0, rt.pstate.dp_rank))
            rt.optimizer_step(h)
            st = rt.memory_stats(h)
            kinds = sorted(k for k in ("master", "remainder") if st[k]["bytes"])
            out.setdefault("options", []).append(
                (model, par, kind, st["params"]["bytes"], st["grads"]["bytes"], st["optimizer_bytes"], kinds)
            )
    for model, par in EXPORT_MESHES.get(world, []):
        from mlite.runtime.models import build_lite_model

        rt = create_runtime(_config(model, par, param_dtype="fp32"))
        h = rt.build_model()
        got = dict(rt.export_weights(h))
        ref = dict(build_lite_model(model, param_dtype=torch.float32, seed=0).named_parameters())
        out.setdefault("export", {})[_key(model, par)] = same_bits(got, {n: p.detach() for n, p in ref.items()})
    for par in PAO_MESHES.get(world, []):
        runs = []
        for pao in (False, True):
            rt = create_runtime(_config("tiny-moe", par, param_dtype="bf16", use_precision_aware_optimizer=pao))
            h = rt.build_model()
            for k in range(3):
                rt.train_step(h, synthetic_microbatches(k, rt.pstate.dp_rank))
            runs.append(snapshot(h))
        out["pao"][_key("tiny-moe", par)] = (
            same_bits(runs[0]["params"], runs[1]["params"]),
            same_bits(runs[0]["masters"], runs[1]["masters"]),
        )
    return out


@pytest.fixture(scope="module")
def mesh_results(shared_groups):
    """``{world: [rank] -> _mesh_worker's result}``, run in the session's shared groups (with
    test_runtime_distopt's runs)."""
    return {w: [r[worker_name(_mesh_worker)] for r in ranks] for w, ranks in shared_groups.items()}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


# every model x {EP 2, CP 2, TP 2, EP 2 x CP 2}, but EP on tiny-dense: it has no routed experts, and that mesh is
# refused before start (test_bad_mesh_is_refused_before_anything_starts); 10 + 3 extra TP meshes of tiny-hybrid
@pytest.mark.parametrize(
    "model,par",
    [(m, p) for m in MODELS for p in ({"ep": 2}, {"cp": 2}, {"tp": 2}, {"ep": 2, "cp": 2}) if m in MOE or "ep" not in p]
    + [("tiny-hybrid", p) for p in ({"tp": 2, "cp": 2}, {"tp": 2, "ep": 2}, {"tp": 2, "cp": 2, "ep": 2})],
)
def test_mesh_run_equals_the_data_parallel_run_with_the_same_dp(mesh_results, model, par):
    world = 4 if len(par) > 1 else 2  # two or three axes of size 2: 4 processes (TP x CP x DP = EP x EDP)
    dp = world // (par.get("cp", 1) * par.get("tp", 1))
    got = mesh_results[world][0]["train"][_key(model, par)]
    ref = mesh_results[dp][0]["train"][_key(model, {})]
    assert len(got) == len(ref) == STEPS
    for step, ((_, _, na), (_, _, nb)) in enumerate(zip(got, ref)):
        assert na == nb, (step, na, nb)  # the same global batch: same loss-token count
    loss = max(_rel(a[0], b[0]) for a, b in zip(got, ref))
    norm = max(_rel(a[1], b[1]) for a, b in zip(got, ref))
    print(
        f"\n{_key(model, par)}: max relative difference to DP over {STEPS} steps: loss {loss:.2e}, grad norm {norm:.2e}"
    )
    assert loss <= LOSS_REL, [(a[0], b[0]) for a, b in zip(got, ref)]
    assert norm <= GRAD_NORM_REL, [(a[1], b[1]) for a, b in zip(got, ref)]
    assert got[-1][0] < got[0][0]  # and it learns


def test_pao_is_bitwise_equal_to_the_fp32_master_on_every_mesh(mesh_results):
    seen = {}
    for w in PAO_MESHES:
        for r in mesh_results[w]:
            for key, (params, masters) in r["pao"].items():
                assert params == [] and masters == [], (w, key, params[:3], masters[:3])
                seen[key] = True
    assert len(seen) == 4


def test_measured_per_rank_bytes_equal_the_estimate(mesh_results):
    from mlite.memory import TrainingOptions, estimate
    from mlite.mesh import resolve
    from mlite.models import from_hf_config

    checked = 0
    for world, meshes in MEMORY_MESHES.items():
        for i, (model, par) in enumerate(meshes):
            spec = from_hf_config(model)
            pc = ParallelConfig(**par)
            per = estimate(spec, resolve(spec, world, pc, seq_len=4096), TrainingOptions(optimizer="fsdp2")).to_dict()
            want = (per["per_gpu"]["params"], per["per_gpu"]["grads"], per["per_gpu"]["optimizer"])
            got = []
            for r in mesh_results[world]:
                m, p, params, grads, opt, mesh = r["memory"][i]
                assert (m, p) == (model, par)
                assert (mesh["tp"], mesh["cp"], mesh["ep"]) == (pc.tp, pc.cp, pc.ep)
                got.append((params, grads, opt))
            if (model, world) in UNEVEN:
                assert len(set(got)) > 1  # (else it is not uneven: move it out of UNEVEN)
                assert tuple(sum(g[k] for g in got) for k in range(3)) == tuple(world * w for w in want), (world, par)
            else:
                assert got == [want] * world, (model, world, par, got, want)
            checked += 1
    assert checked == sum(len(m) for m in MEMORY_MESHES.values()) == 18


def test_measured_per_rank_bytes_equal_the_estimate_with_pao_and_bf16_moments(mesh_results):
    from mlite.memory import TrainingOptions, estimate
    from mlite.mesh import resolve
    from mlite.models import from_hf_config

    checked = 0
    for world, meshes in OPTION_MESHES.items():
        rows = [r["options"] for r in mesh_results[world]]
        for i, (model, par, kind) in enumerate((m, p, k) for m, p in meshes for k in OPTION_KINDS):
            spec = from_hf_config(model)
            o = TrainingOptions(optimizer="fsdp2", param_dtype="bf16", **OPTION_KINDS[kind])
            per = estimate(spec, resolve(spec, world, ParallelConfig(**par), seq_len=4096), o).to_dict()["per_gpu"]
            want = (per["params"], per["grads"], per["optimizer"])
            for rank_rows in rows:
                m, p, k, params, grads, opt, kinds = rank_rows[i]
                assert (m, p, k) == (model, par, kind)
                assert kinds == ["remainder"], (model, par, kind, kinds)  # the PAO run really kept remainders
                assert (params, grads, opt) == want, (model, par, kind, (params, grads, opt), want)
            checked += 1
    assert checked == 6


def test_export_weights_gives_the_full_weights_on_a_mesh(mesh_results):
    for world, meshes in EXPORT_MESHES.items():
        for r in mesh_results[world]:
            for model, par in meshes:
                assert r["export"][_key(model, par)] == [], (world, par)


def test_memory_cli_reports_the_same_per_rank_bytes(mesh_results):
    """The figures the estimator API gave above are what ``mlite memory --optimizer fsdp2 --json`` prints."""
    res = run_cli("memory", "tiny-moe", "--ngpu", "4", "--ep", "2", "--cp", "2", "--optimizer", "fsdp2", "--json")
    assert res.rc == 0, res.err
    per = res.json()["per_gpu"]
    _, _, params, grads, opt, _ = next(
        m for m in mesh_results[4][0]["memory"] if m[:2] == ("tiny-moe", {"ep": 2, "cp": 2})
    )
    assert (params, grads, opt) == (per["params"], per["grads"], per["optimizer"])


# ---------------------------------------------------------------------- the fused AdamW kernel on a mesh
KERNEL_MESHES = [
    ("tiny-hybrid", {"tp": 2}, "fsdp2"),
    ("tiny-moe", {"ep": 2}, "fsdp2"),
    ("tiny-moe", {"ep": 2}, "dist_opt"),
]
"""2-rank meshes run through the multi-tensor kernel (Triton, interpreted) and the torch-op update: TP (its split
shards make the step take the synchronous path: norm and zero count first, then the update) and EP (the queued
path: the zero counts of the dense and the expert groups come out of the kernel), fsdp2 and dist_opt; PAO with
bf16 params."""


def _kernel_worker(rank, world):
    from mlite.runtime.runtime import create_runtime

    out = {}
    for model, par, opt in KERNEL_MESHES:
        runs = {}
        for kernel in ("torch", "triton"):
            cfg = _config(model, par, param_dtype="bf16", optimizer=opt, use_precision_aware_optimizer=True)
            rt = create_runtime(cfg)
            h = rt.build_model()
            h.optimizer.kernel = kernel
            before = snapshot(h)["masters"]
            curve = []
            for k in range(3):
                m = rt.train_step(h, synthetic_microbatches(k, rt.pstate.dp_rank, num_microbatches=2))
                curve.append((m["loss"], m["grad_norm"], m["num_zeros"]))
            launched = {g.launch is not None for g in h.optimizer.groups}
            runs[kernel] = (curve, snapshot(h), before, launched)
        (ct, st, _, lt), (ck, sk, before, lk) = runs["torch"], runs["triton"]
        assert (lt, lk) == ({False}, {True}), (model, par, opt, lt, lk)  # the kernel ran on every group
        differ = same_bits(st["params"], sk["params"]) + same_bits(st["masters"], sk["masters"])
        out[(model, str(par), opt)] = (ct, ck, differ, len(same_bits(sk["masters"], before)), len(before))
    return out


def test_the_fused_kernel_updates_a_mesh_run_as_the_torch_ops_do(monkeypatch):
    assert importlib.util.find_spec("triton"), "triton (the fla extra) is part of the test environment"
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read by Triton at import, in the fresh worker processes
    results = run_local(_kernel_worker, 2, timeout_s=600)
    for r in results:
        assert len(r) == len(KERNEL_MESHES)
        for key, (curve_torch, curve_kernel, differ, moved, n) in r.items():
            assert curve_kernel == curve_torch, (key, curve_kernel, curve_torch)  # loss, grad norm, zero count
            assert differ == [] and moved == n, (key, differ[:3], moved, n)  # every master moved, to the same bits


# ---------------------------------------------------------------------- the packed CP split (no processes)
def test_cp_split_of_a_packed_batch_is_load_balanced_and_reassembles():
    seqs = [list(range(1, 6)), list(range(10, 22)), [7, 8, 9]]
    masks = [[True] * 5, [i > 3 for i in range(12)], [True] * 3]
    b = PackedBatch.from_sequences(seqs, masks)
    cp = 2
    parts = [split_batch(b, cp, r) for r in range(cp)]
    full = (8, 12, 4)  # every sequence padded to a multiple of 2*CP
    for r, (mb, meta) in enumerate(parts):
        assert meta.full_lengths == full and mb.lengths == tuple(f // cp for f in full)
        # rank r holds chunks r and 2*CP-1-r of each sequence, with their positions inside the sequence
        want_pos = []
        for f in full:
            c = f // (2 * cp)
            want_pos += list(range(r * c, (r + 1) * c)) + list(range((2 * cp - 1 - r) * c, (2 * cp - r) * c))
        assert mb.position_ids.tolist() == want_pos
    # the rank-major gather, permuted, is the padded stream: real tokens in order, pads with no loss
    gathered = torch.cat([mb.input_ids for mb, _ in parts])
    labels = torch.cat([mb.targets() for mb, _ in parts])
    stream = gathered[parts[0][1].gather_perm]
    lab = labels[parts[0][1].gather_perm]
    off = 0
    for s, f in zip(seqs, full):
        assert stream[off : off + len(s)].tolist() == s
        assert lab[off + len(s) : off + f].tolist() == [IGNORE_INDEX] * (f - len(s))
        off += f
    assert sum(mb.num_loss_tokens() for mb, _ in parts) == b.num_loss_tokens()


def test_expert_major_permutation():
    rows = [[2, 0, 1], [1, 3, 0]]  # [source][local expert] counts, rows source-major
    perm = _expert_major(torch.tensor(rows), 7).tolist()
    # source-major layout: s0e0 0-1, s0e2 2, s1e0 3, s1e1 4-6  -> expert-major: e0 (s0, s1), e1 (s1), e2 (s0)
    assert perm == [0, 1, 3, 4, 5, 6, 2]


# ---------------------------------------------------------------------- CLI: bad meshes, exit 2, nothing created
@pytest.mark.parametrize(
    "args,needles",
    [
        (["--model", "tiny-moe", "--nproc", "3", "--cp", "2"], ["mesh", "not divisible by TP*CP*PP"]),
        (["--model", "tiny-moe", "--nproc", "4", "--tp", "4"], ["mesh", "not divisible by TP 4"]),
        (["--model", "tiny-moe", "--nproc", "3", "--ep", "3"], ["mesh", "routed experts 8 are not divisible by EP 3"]),
        (["--model", "tiny-dense", "--nproc", "2", "--ep", "2"], ["mesh", "no routed experts"]),
        (["--model", "tiny-moe", "--nproc", "2", "--etp", "2"], ["etp", "--etp 1"]),
    ],
)
def test_bad_mesh_is_refused_before_anything_starts(tmp_path, args, needles):
    out = tmp_path / "run"
    res = run_cli("run", *args, "--steps", "3", "--device", "cpu", "--out", str(out))
    assert_one_line_error(res, *needles)
    assert not out.exists()


def test_bad_mesh_of_a_users_relative_config_is_refused_and_nothing_is_created(tmp_path):
    """As a user runs it: from their own folder, their own copies of the configs by relative path, a relative --out;
    the torchrun and the Ray launchers: exit 2, one line with the planner's reason, the folder left as it was."""
    import os
    import shutil
    import subprocess
    import sys

    from conftest import REPO, CliResult

    home = tmp_path / "work"
    home.mkdir()
    for name, copy in (("tiny-moe", "moe.json"), ("tiny-dense", "dense.json")):
        shutil.copy(REPO / "data" / "models" / f"{name}.json", home / copy)
    before = sorted(p.name for p in home.iterdir())
    cases = [
        (["moe.json", "--nproc", "3", "--ep", "2"], "ngpu 3 is not divisible by ETP*EP*PP = 1*2*1 = 2"),
        (["moe.json", "--nproc", "3", "--cp", "2"], "ngpu 3 is not divisible by TP*CP*PP = 1*2*1 = 2"),
        (["moe.json", "--nproc", "2", "--tp", "2", "--cp", "2"], "ngpu 2 is not divisible by TP*CP*PP = 2*2*1 = 4"),
        (["moe.json", "--nproc", "3", "--tp", "3"], "num_attention_heads 4 is not divisible by TP 3"),
        (["moe.json", "--nproc", "4", "--tp", "4"], "num_key_value_heads (query groups) 2 is not divisible by TP 4"),
        (["moe.json", "--nproc", "3", "--ep", "3"], "routed experts 8 are not divisible by EP 3"),
        (["dense.json", "--nproc", "2", "--ep", "2"], "dense has no routed experts"),
        (["moe.json", "--nproc", "2", "--etp", "2"], "use --etp 1"),
    ]
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=str(REPO), MLITE_RUNS=str(tmp_path / "default-runs"))
    for launcher, some in (("torchrun", cases), ("ray", cases[::3])):  # (the same check: a few for Ray)
        for args, needle in some:
            cmd = [sys.executable, "-m", "mlite", "run", "--model", *args, "--launcher", launcher]
            cmd += ["--steps", "2", "--device", "cpu", "--out", "runs/r1"]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=home, env=env)
            assert_one_line_error(CliResult(p.returncode, p.stdout, p.stderr), needle)
            assert sorted(q.name for q in home.iterdir()) == before, (args, launcher)
    assert not (tmp_path / "default-runs").exists()


def test_cli_mesh_run_sees_the_data_parallel_runs_data_and_matches_the_estimate(tmp_path):
    """``mlite run --nproc 2 --cp 2 --ep 2`` (DP 1) trains on the same sequences as ``--nproc 1`` (data rank = DP
    rank): equal loss and grad norm per step; memory.json carries the mesh and equals the run view's estimate."""
    from mlite.launch.memory_check import memory_rows
    from mlite.launch.rundir import RunDir

    common = [
        "--model",
        "tiny-moe",
        "--steps",
        "3",
        "--device",
        "cpu",
        "--tokens-per-microbatch",
        "128",
        "--param-dtype",
        "fp32",
        "--json",
    ]
    runs = {}
    for name, extra in (("mesh", ["--nproc", "2", "--cp", "2", "--ep", "2"]), ("dp", ["--nproc", "1"])):
        out = tmp_path / name
        res = run_cli("run", *common, *extra, "--out", str(out))
        assert res.rc == 0, res.err + res.out
        runs[name] = RunDir(out)
    rd = runs["mesh"]
    assert "mesh: tp 1, cp 2, ep 2, etp 1, dp 1, edp 1" in rd.log.read_text()
    mesh, dp = (dict(r.read_metrics()) for r in (runs["mesh"], runs["dp"]))
    assert sorted(mesh) == sorted(dp) == [1, 2, 3]
    for key, bound in (("train/loss", LOSS_REL), ("train/grad_norm", GRAD_NORM_REL)):
        worst = max(_rel(mesh[step][key], dp[step][key]) for step in mesh)
        print(f"\nmlite run --cp 2 --ep 2 vs --nproc 1: max relative difference of {key} {worst:.2e}")
        assert worst <= bound, [(mesh[step][key], dp[step][key]) for step in mesh]
    mem = rd.read_memory()
    assert [(r["mesh"]["cp_rank"], r["mesh"]["ep_rank"]) for r in mem["ranks"]] == [(0, 0), (1, 1)]
    rows = {r["item"]: r for r in memory_rows(rd.read_config(), mem)}
    for item in ("parameters", "gradients", "optimizer state"):
        assert rows[item]["measured"] == rows[item]["estimated"], (item, rows[item])
    # the run view attached to the finished run (its form left at the defaults: tiny-moe, 2 processes, no mesh)
    # shows the run's mesh and, per item, the measured bytes next to the estimate of the same mesh, ratio 1.00x
    from mlite.launch import RunHandle
    from widgets.run_monitor import fmt_bytes
    from widgets.run_view import RunView

    view = RunView()
    assert "cp 1 · ep 1" in view._mesh.value
    view.attach(RunHandle.open(tmp_path / "mesh"))
    view.wait(timeout=60)
    assert view._mesh.value == "mesh: tp 1 · cp 2 · ep 2 · etp 1 · dp 1 · edp 1 · measured on 2 ranks"
    assert "estimated (mlite memory, fsdp2)" in view._memory.value
    cells = [c.split("<", 1)[0] for c in view._memory.value.split('padding:1px 10px 1px 0">')[1:]]
    for item in ("parameters", "gradients", "optimizer state"):
        got = cells[cells.index(item) + 1 : cells.index(item) + 4]
        assert got == [fmt_bytes(rows[item]["measured"]), fmt_bytes(rows[item]["estimated"]), "1.00x"], (item, got)


def test_run_config_carries_the_mesh():
    from mlite.launch import RunConfig

    cfg = RunConfig(model="tiny-moe", nproc=4, tp=2, ep=2)
    assert cfg.cli_args()[cfg.cli_args().index("--tp") + 1] == "2"
    assert cfg.cli_args()[cfg.cli_args().index("--ep") + 1] == "2"
    assert "--cp" not in cfg.cli_args()
    assert RunConfig.from_dict(cfg.to_dict()).parallel_config().to_dict() == cfg.parallel_config().to_dict()
    rc = cfg.runtime_config()
    assert (rc.backend_cfg.parallel.tp, rc.backend_cfg.parallel.ep) == (2, 2)


def test_run_view_shows_the_mesh_and_its_estimate():
    from mlite.launch import RunConfig
    from mlite.launch.memory_check import estimate_for
    from widgets.run_monitor import fmt_bytes
    from widgets.run_view import RunView

    cfg = RunConfig(model="tiny-moe", nproc=4, cp=2, ep=2)
    v = RunView(cfg)
    assert v.config().parallel_config().to_dict() == cfg.parallel_config().to_dict()
    assert v._mesh.value == "mesh: tp 1 · cp 2 · ep 2 · etp 1 · dp 2 · edp 2"
    w = estimate_for(cfg).worst
    dp_only = estimate_for(RunConfig(model="tiny-moe", nproc=4)).worst
    assert w.local_params < dp_only.local_params  # the mesh's estimate: experts split over EP
    assert fmt_bytes(round(w.params)) in v._memory.value
    v._axes["ep"].value = 3  # an invalid mesh: one line in the banner, with the planner's reason
    assert "routed experts 8 are not divisible by EP 3" in v.errors.message
