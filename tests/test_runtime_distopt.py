"""``optimizer dist_opt`` in the lite runtime (Megatron-Core DDP + distributed optimizer; gloo, CPU, 2 and 4
processes): the losses and grad norms equal the fsdp2 run's on the same mesh and, on EP, EP x CP and TP meshes, the
dist_opt run's with the same DP (fp32 params, relative 1e-5, 6 steps of 2 micro-batches), plain DDP
(``use_distributed_optimizer=False``) too; PAO stays bitwise equal to the fp32 master;
and for 7 meshes x {dist_opt, + PAO + bf16 grads, + bf16 moments, no distributed optimizer} the measured per-rank
parameter, gradient and optimizer bytes equal ``mlite memory``'s (18, 6 + 12/d, 4 + 10/d, 4 + 6/d bytes/param).

Padding (Megatron-Core's one-bucket layout, :func:`mlite.runtime.ddp.buffer_layout`): each parameter starts at a
multiple of 64 elements and the buffer ends at a multiple of lcm(d, 128). Padding elements carry no optimizer state
and are reported on their own (``*_buffer_padding``), so parameters and gradients (replicated) equal the estimate on
every rank, while a rank's optimizer state covers the real elements of its shard range (checked per rank, byte for
byte): the estimator's figure is the mean over the ranks, checked exactly (the sum over all ranks is world x
estimate)."""

from __future__ import annotations

import math

import pytest
from conftest import run_cli
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
from mlite.runtime.ddp import buffer_layout

pytestmark = pytest.mark.slow

STEPS = 6
EQUIV = {
    1: [("tiny-hybrid", {})],
    2: [("tiny-moe", {}), ("tiny-moe", {"ep": 2}), ("tiny-hybrid", {"tp": 2})],
    4: [("tiny-moe", {"cp": 2, "ep": 2})],
}
"""(model, mesh) per world size whose dist_opt runs are compared with fsdp2 on the same mesh (and, for the mesh
runs, with the dist_opt run of the same DP: :data:`SAME_DP`)."""
SAME_DP = [
    (("tiny-moe", {"ep": 2}, 2), ("tiny-moe", {}, 2)),
    (("tiny-moe", {"cp": 2, "ep": 2}, 4), ("tiny-moe", {}, 2)),
    (("tiny-hybrid", {"tp": 2}, 2), ("tiny-hybrid", {}, 1)),
]
"""(mesh run, data-parallel run with the same DP) as (model, mesh, world): EP, EP x CP and TP under dist_opt."""
KINDS = {
    "dist_opt": {},
    "dist_opt + PAO + bf16 grads": {"use_precision_aware_optimizer": True, "main_grads_dtype": "bf16"},
    "+ bf16 moments": {
        "use_precision_aware_optimizer": True,
        "main_grads_dtype": "bf16",
        "exp_avg_dtype": "bf16",
        "exp_avg_sq_dtype": "bf16",
    },
    "no distributed optimizer": {"use_distributed_optimizer": False},
}
"""The four rows of the byte table (runtime OptimizerConfig fields; the estimator's TrainingOptions use the same)."""
MEMORY_MESHES = {
    2: [("tiny-moe", {}), ("tiny-moe", {"ep": 2}), ("tiny-hybrid", {"tp": 2})],
    4: [
        ("tiny-moe", {"ep": 4}),
        ("tiny-moe", {"cp": 2, "ep": 2}),
        ("tiny-moe", {"tp": 2, "ep": 2}),
        ("tiny-hybrid", {"tp": 2, "cp": 2}),
    ],
}
PAO_MESHES = {2: [{}], 4: [{"tp": 2, "ep": 2}]}
EXPORT_MESHES = {4: [("tiny-hybrid", {"tp": 2, "ep": 2})]}
"""Meshes on which export_weights of a dist_opt run gives back the full weights (EP experts and TP slices gathered)."""


def _config(model: str, par: dict, **kw):
    cfg = runtime_config(model, **kw)
    cfg.backend_cfg.parallel = ParallelConfig(**par)
    return cfg


@shares_group
def _worker(rank, world):
    from mlite.runtime.runtime import create_runtime

    out: dict = {"train": {}, "memory": [], "pao": {}, "layout": [], "shard_real": []}
    for model, par in EQUIV[world]:
        for name, kw in (("fsdp2", {}), ("dist_opt", {}), ("ddp", {"use_distributed_optimizer": False})):
            opt = "fsdp2" if name == "fsdp2" else "dist_opt"
            curve = train_curve(model, par, STEPS, optimizer=opt, **kw)  # fsdp2: test_runtime_mesh's DP/mesh run
            out["train"][(model, str(par), name)] = [(m["loss"], m["grad_norm"], m["num_zeros"]) for m in curve]
    for model, par in MEMORY_MESHES.get(world, []):
        for kind, kw in KINDS.items():
            rt = create_runtime(_config(model, par, param_dtype="bf16", optimizer="dist_opt", **kw))
            h = rt.build_model()
            rt.forward_backward(h, synthetic_microbatches(0, rt.pstate.dp_rank))
            rt.optimizer_step(h)
            st = rt.memory_stats(h)
            out["memory"].append(
                (model, par, kind, st["params"]["bytes"], st["grads"]["bytes"], st["optimizer_bytes"], st["mesh"])
            )
            assert rt.ddp is not None
            shard_real = 0
            for b in rt.ddp.buffers:
                lo, hi = b.shard_range()
                sizes = [p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in b.params]
                shard_real += sum(max(0, min(a + n, hi) - max(a, lo)) for a, n in zip(b.starts, sizes))
                out["layout"].append((b.distributed, b.size, b.starts, b.param_data.numel(), b.numel, hi - lo))
            out["shard_real"].append((model, par, kind, shard_real, st["optimizer_bytes"]))
    for model, par in EXPORT_MESHES.get(world, []):
        import torch

        from mlite.runtime.models import build_lite_model

        rt = create_runtime(_config(model, par, param_dtype="fp32", optimizer="dist_opt"))
        h = rt.build_model()
        got = dict(rt.export_weights(h))
        ref = dict(build_lite_model(model, param_dtype=torch.float32, seed=0).named_parameters())
        out.setdefault("export", {})[str(par)] = same_bits(got, {n: p.detach() for n, p in ref.items()})
    for par in PAO_MESHES.get(world, []):
        runs = []
        for pao in (False, True):
            kw = {"use_precision_aware_optimizer": True} if pao else {}
            rt = create_runtime(_config("tiny-moe", par, param_dtype="bf16", optimizer="dist_opt", **kw))
            h = rt.build_model()
            for k in range(3):
                rt.train_step(h, synthetic_microbatches(k, rt.pstate.dp_rank))
            runs.append(snapshot(h))
        out["pao"][str(par)] = (
            same_bits(runs[0]["params"], runs[1]["params"]),
            same_bits(runs[0]["masters"], runs[1]["masters"]),
            sorted(runs[1]["state"][next(iter(runs[1]["state"]))]),
        )
    return out


@pytest.fixture(scope="module")
def results(shared_groups):
    """``{world: [rank] -> _worker's result}``, run in the session's shared groups (with test_runtime_mesh's runs)."""
    return {w: [r[worker_name(_worker)] for r in ranks] for w, ranks in shared_groups.items()}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def test_dist_opt_equals_fsdp2_step_for_step(results):
    checked = 0
    for world, meshes in EQUIV.items():
        for model, par in meshes:
            ref = results[world][0]["train"][(model, str(par), "fsdp2")]
            for name in ("dist_opt", "ddp"):
                got = results[world][0]["train"][(model, str(par), name)]
                assert len(got) == len(ref) == STEPS
                for step, ((la, ga, za), (lb, gb, zb)) in enumerate(zip(got, ref)):
                    assert _rel(la, lb) <= 1e-5, (model, par, name, step, la, lb)
                    assert _rel(ga, gb) <= 1e-5, (model, par, name, step, ga, gb)
                    # zero counts: no padding counted (hundreds of elements), nothing twice; a gradient element
                    # may round to exactly 0 in one reduction order and not in the other
                    assert abs(za - zb) <= 2, (model, par, name, step, za, zb)
                assert got[-1][0] < got[0][0]
                checked += 1
    assert checked == 10


@pytest.mark.parametrize("mesh_run,dp_run", SAME_DP, ids=lambda r: f"{r[0]} {r[1]} x{r[2]}")
def test_dist_opt_mesh_run_equals_the_data_parallel_dist_opt_run(results, mesh_run, dp_run):
    """The global batch does not depend on TP, CP or EP: a dist_opt mesh run and the dist_opt run with the same DP
    see the same sequences, with the same loss and grad norm per step (fp32 params, relative 1e-5, 6 steps)."""
    (model, par, world), (ref_model, ref_par, ref_world) = mesh_run, dp_run
    assert ref_model == model and world // (par.get("cp", 1) * par.get("tp", 1)) == ref_world  # DP = world / TP·CP
    for name in ("dist_opt", "ddp"):
        got = results[world][0]["train"][(model, str(par), name)]
        ref = results[ref_world][0]["train"][(model, str(ref_par), name)]
        assert len(got) == len(ref) == STEPS
        for step, ((la, ga, _), (lb, gb, _)) in enumerate(zip(got, ref)):
            assert _rel(la, lb) <= 1e-5, (model, par, name, step, la, lb)
            assert _rel(ga, gb) <= 1e-5, (model, par, name, step, ga, gb)


def test_pao_is_bitwise_equal_to_the_fp32_master_under_dist_opt(results):
    for world in PAO_MESHES:
        for r in results[world]:
            for key, (params, masters, kinds) in r["pao"].items():
                assert params == [] and masters == [], (world, key, params[:3], masters[:3])
                assert "remainder" in kinds and "master" not in kinds  # the PAO run really kept remainders


def test_measured_per_rank_bytes_equal_the_estimate(results):
    from mlite.memory import TrainingOptions, estimate
    from mlite.mesh import resolve
    from mlite.models import from_hf_config

    checked = 0
    for world, meshes in MEMORY_MESHES.items():
        rows = [r["memory"] for r in results[world]]
        for i, (model, par, kind) in enumerate((m, p, k) for m, p in meshes for k in KINDS):
            spec = from_hf_config(model)
            pc = ParallelConfig(**par)
            o = TrainingOptions(optimizer="dist_opt", param_dtype="bf16", **KINDS[kind])
            per = estimate(spec, resolve(spec, world, pc, seq_len=4096), o).to_dict()["per_gpu"]
            got = []
            for rank_rows in rows:
                m, p, k, params, grads, opt, mesh = rank_rows[i]
                assert (m, p, k) == (model, par, kind)
                assert (mesh["tp"], mesh["cp"], mesh["ep"]) == (pc.tp, pc.cp, pc.ep)
                assert (params, grads) == (per["params"], per["grads"]), (model, par, kind, rank_rows[i], per)
                got.append(opt)
            if kind == "no distributed optimizer":
                assert got == [per["optimizer"]] * world, (model, par, got, per["optimizer"])
            else:
                assert sum(got) == world * per["optimizer"], (model, par, kind, got, per["optimizer"])
            checked += 1
    assert checked == 7 * 4


def test_byte_table_per_parameter():
    """The four rows in bytes per parameter, from the estimator (the runtime test above holds it to the runs)."""
    from mlite.memory.optimizer import state_bytes
    from mlite.options import TrainingOptions

    d = 4
    for kind, want in zip(KINDS, (6 + 12 / d, 4 + 10 / d, 4 + 6 / d, 18)):
        sb = state_bytes(TrainingOptions(optimizer="dist_opt", param_dtype="bf16", **KINDS[kind]))
        dd = d if sb.shard_optimizer else 1
        assert sb.param + sb.grad + (sb.master + sb.exp_avg + sb.exp_avg_sq) / dd == want, kind


def test_buffers_are_laid_out_as_megatron_pads_them(results):
    for world in MEMORY_MESHES:
        for r in results[world]:
            for distributed, size, starts, padded, real, shard in r["layout"]:
                if distributed:
                    assert padded % math.lcm(size, 128) == 0 and all(a % 64 == 0 for a in starts)
                    assert shard * size == padded
                else:
                    assert padded == real and shard == padded


STATE_BYTES = {"dist_opt": 12, "dist_opt + PAO + bf16 grads": 10, "+ bf16 moments": 6, "no distributed optimizer": 12}
"""Optimizer-state bytes per element of a rank's shard (master or remainder + exp_avg + exp_avg_sq)."""


def test_each_rank_holds_state_for_the_real_elements_of_its_shard_only(results):
    """Per rank, byte for byte: the state covers the parameter elements inside the rank's buffer range, no padding."""
    for world in MEMORY_MESHES:
        for r in results[world]:
            for model, par, kind, real, opt_bytes in r["shard_real"]:
                assert opt_bytes == STATE_BYTES[kind] * real, (model, par, kind, real, opt_bytes)


def test_buffer_layout():
    assert buffer_layout([3, 100, 1], 4, True) == ([0, 64, 192], 256)
    assert buffer_layout([3, 100, 1], 3, True) == ([0, 64, 192], 384)  # lcm(3, 128)
    assert buffer_layout([3, 100, 1], 4, False) == ([0, 3, 103], 104)


def test_export_weights_gives_the_full_weights(results):
    for world, meshes in EXPORT_MESHES.items():
        for r in results[world]:
            for _, par in meshes:
                assert r["export"][str(par)] == [], (world, par)


def test_memory_cli_reports_the_same_per_rank_bytes(results):
    """What ``mlite memory --optimizer dist_opt --pao --grad-dtype bf16 --json`` prints is what the runs measured."""
    res = run_cli(
        *("memory", "tiny-moe", "--ngpu", "4", "--ep", "2", "--cp", "2", "--optimizer", "dist_opt"),
        *("--pao", "--grad-dtype", "bf16", "--param-dtype", "bf16", "--json"),
    )
    assert res.rc == 0, res.err
    per = res.json()["per_gpu"]
    rows = [
        next(m for m in r["memory"] if m[:3] == ("tiny-moe", {"cp": 2, "ep": 2}, "dist_opt + PAO + bf16 grads"))
        for r in results[4]
    ]
    assert {(m[3], m[4]) for m in rows} == {(per["params"], per["grads"])}
    assert sum(m[5] for m in rows) == 4 * per["optimizer"]
