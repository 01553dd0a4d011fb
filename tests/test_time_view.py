"""mlite.time.view: the bar rows of a predicted step (the memory view's time chart), its summary line and the
``mlite time`` command line that reproduces it."""

from __future__ import annotations

import shlex

import pytest
from conftest import run_cli

from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.options import TrainingOptions
from mlite.time import PARTS, predict
from mlite.time.view import KIND, summary, time_command, time_rows


@pytest.fixture(scope="module")
def offloaded():
    spec = from_hf_config("Qwen3-30B-A3B")
    o = TrainingOptions(offload_fraction=0.5, num_microbatches=4)
    plan = resolve(spec, 16, ParallelConfig(pp=2, ep=8), seq_len=o.seq_len)
    return spec, plan, o, predict(spec, plan, o, "H200")


def test_rows_are_the_parts_that_take_time_in_step_order(offloaded):
    *_, t = offloaded
    rows = time_rows(t)
    assert [r["part"] for r in rows] == [k for k in PARTS if t.parts[k] > 0]
    assert {"forward", "backward", "pp_bubble", "ep_comm", "offload"} <= {r["part"] for r in rows}
    assert all(r["seconds"] == t.parts[r["part"]] and r["kind"] == KIND[r["part"]] for r in rows)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert set(KIND) == set(PARTS)
    assert {r["kind"] for r in rows} >= {"compute", "comm", "bubble", "optimizer", "offload"}


def test_summary_and_command_reproduce_the_prediction(offloaded):
    _, plan, o, t = offloaded
    line = summary(t)
    assert line == f"{t.step_s:.3g} s, {t.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, MFU {100 * t.mfu:.1f} % on H200"
    cmd = time_command("Qwen3-30B-A3B", plan, o, "H200")
    words = shlex.split(cmd)
    assert words[:2] == ["mlite", "time"] and words[-1] == "--json" and "--offload-fraction" in words
    doc = run_cli(*words[1:]).json()
    assert doc["step_s"] == t.step_s and doc["parts"] == t.parts
