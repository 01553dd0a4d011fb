"""The mesh table ranked by predicted speed (issue 25): on a real case the old order (fits first, then the score)
puts first a plan that the time model predicts slower than another that fits, and the speed ranking swaps them.

The case: Llama-3.1-70B on 32 H100 (80 GiB, 8 GPUs a node). The score's favourite TP 8 keeps the pipeline short,
but its TP all-gathers and reduce-scatters are on the critical path every layer; TP 4 with CP 2 needs a bit more
memory (and a worse score: 4 x log2 CP) and runs faster.
"""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error, run_cli

from mlite.memory import TrainingOptions
from mlite.mesh import enumerate_meshes
from mlite.models import from_hf_config
from mlite.time import predict
from mlite.time.model import COMM_PARTS
from mlite.time.table import mesh_table

MODEL, NGPU, GIB, HW = "Llama-3.1-70B", 32, 80.0, "H100"
AXES = ("tp", "pp", "vpp", "cp", "ep", "etp")


def _old_key(m) -> tuple:
    """The ranking before speed was in view: fits first, then (not fitting) the least bytes, then the score."""
    p = m.plan.parallel
    over = float((m.extra or {}).get("total_bytes", 0)) if m.fits is False else 0.0
    return (m.fits is False, over, m.score, p.pp, p.vpp, p.tp, p.cp, -p.ep, p.etp_size)


def _sizes(m) -> dict:
    return {k: v for k, v in m.plan.parallel.sizes().items() if k in AXES}


@pytest.fixture(scope="module")
def tables():
    spec = from_hf_config(MODEL)
    o = TrainingOptions(gpu_memory_gib=GIB)
    return spec, o, mesh_table(spec, NGPU, o), mesh_table(spec, NGPU, o, hardware=HW)


def test_without_hardware_the_order_is_the_old_one(tables):
    spec, _o, plain, _ = tables
    assert [_sizes(m) for m in plain] == [_sizes(m) for m in sorted(plain, key=_old_key)]
    assert not any("tokens_per_s_per_gpu" in (m.extra or {}) for m in plain)
    # and the meshes the speed ranking sees are the same set
    again = enumerate_meshes(spec, NGPU, fits=None)
    assert sorted(map(str, (_sizes(m) for m in again))) == sorted(map(str, (_sizes(m) for m in plain)))


def test_speed_ranking_puts_a_faster_fitting_plan_above_the_scores_favourite(tables):
    spec, o, plain, timed = tables
    old, new = plain[0], timed[0]
    assert old.fits and new.fits
    assert _sizes(old) != _sizes(new)
    # the old rule preferred the old first (lower score), the new one needs more memory
    assert old.score < new.score
    assert new.extra["total_bytes"] > old.extra["total_bytes"]
    # in the speed ranking the old first is below the new first, and every mesh that fits has a prediction
    by = {str(_sizes(m)): m for m in timed}
    old_t = by[str(_sizes(old))]
    assert timed.index(old_t) > 0
    assert all(("tokens_per_s_per_gpu" in m.extra) == bool(m.fits) for m in timed)
    fit = [m.extra["tokens_per_s_per_gpu"] for m in timed if m.fits]
    assert fit == sorted(fit, reverse=True)
    assert new.extra["tokens_per_s_per_gpu"] > old_t.extra["tokens_per_s_per_gpu"]
    # the table's numbers are predict's on the same plan and options
    t_old, t_new = predict(spec, old.plan, o, HW), predict(spec, new.plan, o, HW)
    assert t_old.tokens_per_s_per_gpu == old_t.extra["tokens_per_s_per_gpu"]
    assert t_new.step_s == new.extra["step_s"] and t_new.parts == new.extra["time_parts"]
    # the reason: the old first's largest exposed non-compute part is its TP traffic (TP 8), which the new first halves
    overhead = {k: v for k, v in t_old.parts.items() if k not in ("forward", "backward", "recompute")}
    assert max(overhead, key=overhead.get) == "tp_comm"
    assert old.plan.parallel.tp > new.plan.parallel.tp
    assert t_new.parts["tp_comm"] < t_old.parts["tp_comm"]
    # ... and of the seconds the new first saves, the TP traffic is the largest share of any part
    saved = {k: t_old.parts[k] - t_new.parts[k] for k in t_old.parts}
    assert sum(saved.values()) > 0 and max(saved, key=saved.get) == "tp_comm" and "tp_comm" in COMM_PARTS


def test_cli_gpu_mem_naming_a_profile_ranks_by_speed(tables):
    _, _, plain, timed = tables
    args = ("mesh", MODEL, "--ngpu", str(NGPU), "--list", "--json")
    by_gib = run_cli(*args, "--gpu-mem", "80").json()["meshes"]
    by_name = run_cli(*args, "--gpu-mem", HW).json()["meshes"]
    by_hw = run_cli(*args, "--hardware", HW).json()["meshes"]  # memory from the profile: 80 GiB
    assert [{k: d[k] for k in AXES} for d in by_gib] == [_sizes(m) for m in plain]
    assert (
        [{k: d[k] for k in AXES} for d in by_name]
        == [_sizes(m) for m in timed]
        == [{k: d[k] for k in AXES} for d in by_hw]
    )
    first = by_name[0]
    assert first["tokens_per_s_per_gpu"] == timed[0].extra["tokens_per_s_per_gpu"]
    assert set(first["time_parts"]) == set(timed[0].extra["time_parts"]) and "score" in first
    other = run_cli(*args, "--gpu-mem", HW, "--hardware", "A100").json()["meshes"]
    assert other[0]["tokens_per_s_per_gpu"] < first["tokens_per_s_per_gpu"]  # --hardware overrides the name's
    text = run_cli("mesh", MODEL, "--ngpu", str(NGPU), "--list", "--gpu-mem", HW, "--limit", "2")
    lines = text.out.splitlines()
    assert "fastest first by mlite time on H100" in lines[0] and "tok/s/GPU" in lines[1] and "step s" in lines[1]
    assert f"{timed[0].extra['tokens_per_s_per_gpu']:,.0f}" in lines[2].split()
    bad = run_cli("mesh", MODEL, "--ngpu", str(NGPU), "--list", "--hardware", "Z80")
    assert_one_line_error(bad, "--hardware")
