"""DeepSeek-V4.1's Engram n-gram tables: counted by ``mlite params``, their bytes per rank by owners in the estimator.

Oracle: the fork's table of the maximum persistent Engram storage per rank (ISEEKYAN/Megatron-LM
``experimental/lite/docs/deepseek_v41.md`` @ 04baccf4, "Resident Engram row owners"), in GiB, for the official two
tables (384,006,168 and 384,016,682 rows x 256). The estimator derives its figures from the table shapes of
``data/models/DeepSeek-V4.1-Flash-derived.json``; nothing below feeds them the figures.
"""

from __future__ import annotations

import pytest
from conftest import run_cli

from mlite.memory import GIB, estimate
from mlite.memory.ngram import local_rows, ngram_bytes
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.models.hf_meta import transformers_knows
from mlite.options import TrainingOptions

V41 = "DeepSeek-V4.1-Flash-derived"
SPEC = from_hf_config(V41)

# owners: (FP8 + scales, FP32 master if trainable, FP32 main gradient), GiB, as the doc prints them
DOC_TABLE = {
    1: (188.833133, 732.443666, 732.443666),
    8: (23.604142, 91.555459, 91.555459),
    16: (11.802071, 45.777730, 45.777730),
    32: (5.901036, 22.888865, 22.888865),
}


def test_params_counts_the_engram_tables_as_the_doc_gives_them():
    tables = SPEC.ngram_tables
    assert [(i, g.rows, g.width) for i, g in tables] == [(1, 384_006_168, 256), (14, 384_016_682, 256)]
    assert all(g.parallel == "rows" and g.component == "ngram_tables" for _, g in tables)
    n = sum(g.numel for _, g in tables)
    # the doc's one-owner master is the whole tables in fp32: 732.443666 GiB / 4 bytes
    assert abs(n * 4 / GIB - DOC_TABLE[1][1]) < 5e-7
    assert SPEC.components["ngram_tables"] == n
    assert SPEC.active < SPEC.total - n  # a token reads a few rows, no matrix product: not active
    res = run_cli("params", V41, "--json")
    assert res.rc == 0, res.err
    doc = res.json()
    assert doc["components"]["ngram_tables"] == n and doc["total"] == SPEC.total
    assert [t["rows"] for t in doc["ngram_tables"]] == [384_006_168, 384_016_682]


def test_no_transformers_class_so_no_meta_oracle():
    # why tests/test_models.py leaves this config out of the meta-device oracle
    assert SPEC.model_type == "deepseek_v41" and not transformers_knows("deepseek_v41")


@pytest.mark.parametrize("owners", sorted(DOC_TABLE))
def test_bytes_per_rank_reproduce_the_doc_table(owners):
    fp8_scales, master, grad = DOC_TABLE[owners]
    tables = [g for _, g in SPEC.ngram_tables]
    frozen = ngram_bytes(tables, owners, trainable=False)
    assert set(frozen) == {"fp8", "scales"}
    assert abs((frozen["fp8"] + frozen["scales"]) / GIB - fp8_scales) < 5e-7
    trained = ngram_bytes(tables, owners, trainable=True)
    assert abs(trained["master"] / GIB - master) < 5e-7 and abs(trained["main_grad"] / GIB - grad) < 5e-7
    assert trained["momentum"] == trained["master"]  # Sinkhorn's fp32 M over the same local rows


def test_uneven_rows_use_the_largest_interval():
    # boundaries rows * rank // owners (the doc): the largest interval is ceil(rows / owners)
    for rows, owners in ((384_006_168, 7), (10, 3), (5, 8), (12, 4)):
        sizes = [rows * (r + 1) // owners - rows * r // owners for r in range(owners)]
        assert local_rows(rows, owners) == max(sizes)


def _est(ngpu, mesh, **opts):
    plan = resolve(SPEC, ngpu, ParallelConfig(**mesh))
    assert plan.valid, [f.message for f in plan.errors]
    return estimate(SPEC, plan, TrainingOptions(gpu_memory_gib=141, **opts))


def test_estimator_holds_23_6_gib_per_rank_at_8_owners():
    e = _est(8, dict(ep=8))  # DP 8 x CP 1 = 8 owners, EP over the same ranks
    doc = e.to_dict()
    assert doc["ngram_detail"]["owners"] == 8 and doc["ngram_detail"]["trainable"] is False
    assert abs(doc["per_gpu"]["ngram_tables"] / GIB - DOC_TABLE[8][0]) < 5e-7
    assert doc["per_gpu"]["total"] == sum(v for k, v in doc["per_gpu"].items() if k != "total")
    # owners are DP x CP: CP 2 x DP 4 is 8 owners too
    cp = _est(8, dict(cp=2)).to_dict()
    assert cp["ngram_detail"]["owners"] == 8 and cp["per_gpu"]["ngram_tables"] == doc["per_gpu"]["ngram_tables"]
    assert any(f["name"] == "ngram_tables" for f in doc["formulas"])


def test_trainable_adds_master_grad_and_momentum_and_offload_never_moves_them():
    frozen = _est(16, dict(ep=16)).worst
    trained = _est(16, dict(ep=16), engram_trainable=True).worst
    add = sum(trained.ngram.values()) - sum(frozen.ngram.values())
    assert abs(trained.ngram["master"] / GIB - DOC_TABLE[16][1]) < 5e-7
    assert add == pytest.approx(3 * trained.ngram["master"])
    assert trained.static - frozen.static == pytest.approx(add)
    off = _est(16, dict(ep=16), engram_trainable=True, param_offload=True, optimizer_offload=True, grad_offload=True)
    w = off.worst
    assert w.ngram == trained.ngram and w.idle_gpu >= sum(w.ngram.values())  # resident in the idle phase too
    assert not any("ngram" in k for k in w.host)


def test_pp2_holds_both_tables_on_the_first_stage():
    e = _est(4, dict(pp=2))  # stage 0: layers 0-19 (Engram layers 1 and 14), DP 2
    first, second = e.ranks
    assert first.ngram_owners == 2 and second.ngram == {} and second.ngram_owners == 0
    assert first.ngram["fp8"] == sum(local_rows(g.rows, 2) * g.width for _, g in SPEC.ngram_tables)


def test_models_without_tables_keep_their_json_keys():
    doc = estimate(from_hf_config("Qwen3-8B"), ParallelConfig(), ngpu=8).to_dict()
    assert "ngram_tables" not in doc["per_gpu"] and "ngram_detail" not in doc


def test_cli_memory_shows_the_engram_row():
    res = run_cli("memory", V41, "--ngpu", "8", "--ep", "8", "--gpu-mem", "H200", "--engram-trainable")
    assert res.rc == 1, res.err  # 1: it does not fit on 8 GPUs
    row = next(ln for ln in res.out.splitlines() if ln.strip().startswith("ngram_tables"))
    assert "8 DP x CP owners" in row and "trainable" in row
    doc = run_cli("memory", V41, "--ngpu", "8", "--ep", "8", "--json").json()
    assert abs(doc["per_gpu"]["ngram_tables"] / GIB - DOC_TABLE[8][0]) < 5e-7


def test_memory_chart_draws_the_engram_segment():
    import re

    from widgets.memory_chart import memory_svg

    e = _est(8, dict(ep=8))
    shown = re.findall(r'class="mlite-memory-seg-ngram_tables"[^>]* data-bytes="(\d+)"', memory_svg(e))
    assert [int(b) for b in shown] == [round(sum(e.worst.ngram.values()))]


def test_the_memory_view_engram_switch_is_only_for_models_with_tables():
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner

    view = MemoryView(MeshPlanner("Qwen3-8B", ngpu=1))
    assert view.controls["engram_trainable"].disabled  # no n-gram tables
    view = MemoryView(MeshPlanner(V41, ngpu=8, ep=8))
    c = view.controls["engram_trainable"]
    assert not c.disabled and not view.estimate.to_dict()["ngram_detail"]["trainable"]
    frozen = view.estimate.worst.static
    c.value = True
    doc = view.estimate.to_dict()
    assert doc["ngram_detail"]["trainable"] and view.estimate.worst.static > frozen
    assert (
        doc["per_gpu"]["ngram_tables"]
        == _est(8, dict(ep=8), engram_trainable=True).to_dict()["per_gpu"]["ngram_tables"]
    )
    assert "--engram-trainable" in view.command()
