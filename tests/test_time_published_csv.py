"""bench/results/step_time_published.csv is what the time model predicts today for the published runs: re-derived
from tests/data/step_times/published.json by its command, row for row (a change to the model or a record that is
not re-run shows here)."""

from __future__ import annotations

import csv
import importlib.util
import math

from mlite.paths import REPO_ROOT

CSV = REPO_ROOT / "bench" / "results" / "step_time_published.csv"


def _bench():
    spec = importlib.util.spec_from_file_location("step_time_published", REPO_ROOT / "bench" / "step_time_published.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_table_is_todays_prediction():
    bench = _bench()
    with open(CSV, newline="") as f:
        committed = list(csv.DictReader(f))
    assert committed and tuple(committed[0]) == bench.COLUMNS
    fresh = bench.rows()
    assert [r["run"] for r in committed] == [r["run"] for r in fresh]
    for old, new in zip(committed, fresh):
        assert old == {k: str(v) for k, v in new.items()}, old["run"]


def test_ratio_and_band_follow_from_the_values():
    with open(CSV, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        m, p = float(r["measured_value"]), float(r["predicted_value"])
        ratio = p / m if r["measured"] == "step_s" else m / p
        assert math.isclose(float(r["ratio"]), ratio, rel_tol=2e-3), r["run"]
        assert (r["within_25pct"] == "yes") == (abs(float(r["ratio"]) - 1) <= 0.25), r["run"]
        assert r["hardware"] in ("A100", "H100", "H200", "B200")
