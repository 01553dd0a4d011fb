"""Committed benchmark results stay in step with the code that derives them.

Every CSV in ``bench/results/`` with a ``command`` column records how it was made: a measuring step (on the GPU) that
wrote raw JSON, then ``&&`` a report step that turns the raw JSON into the CSV on any machine. This test re-runs the
report step with today's code into a temporary file and requires the committed CSV to be what it gives: a change to the
estimator (or to a report) that moves a predicted column fails here until the CSV is regenerated.
"""

from __future__ import annotations

import csv
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

RESULTS = REPO / "bench" / "results"
CSVS = sorted(p for p in RESULTS.glob("*.csv") if "command" in (p.open().readline().strip().split(",")))


def _report_step(path: Path) -> list[str]:
    with path.open(newline="") as f:
        commands = {row["command"] for row in csv.DictReader(f)}
    steps = {c.split("&&")[-1].strip() for c in commands}
    assert len(steps) == 1, f"{path.name}: rows name different report steps: {sorted(steps)}"
    argv = shlex.split(steps.pop())
    assert argv[0].startswith("python") and argv[1].startswith("bench/"), f"{path.name}: no report step in {argv}"
    rel = str(path.relative_to(REPO))
    assert rel in argv, f"{path.name}: the report step does not write this CSV: {argv}"
    return argv


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_results_have_csvs():
    assert {p.name for p in CSVS} >= {
        "gpu_memory.csv",
        "gpu_speed.csv",
        "mcore_memory.csv",
        "gpu_verl_sft.csv",
        "gpu_fla.csv",
    }


@pytest.mark.parametrize("path", CSVS, ids=lambda p: p.name)
def test_csv_rederived_from_raw_json(path, tmp_path):
    argv = _report_step(path)
    out = tmp_path / path.name
    argv = [sys.executable, *argv[1:]]
    argv[argv.index(str(path.relative_to(REPO)))] = str(out)
    res = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONWARNINGS="ignore")
    )
    assert res.returncode == 0, res.stderr[-2000:]
    why = _stale(path, _rows(path), _rows(out))
    assert why is None, why


def _stale(path: Path, committed: list[dict], fresh: list[dict]) -> str | None:
    """Why the committed rows are not what the report gives now (None when they are)."""
    name = lambda r: r.get("config") or r.get("configuration") or r.get("measurement") or r.get("run")
    if [name(r) for r in fresh] != [name(r) for r in committed]:
        return f"{path.name}: rows differ"
    for old, new in zip(committed, fresh, strict=True):
        if old != new:
            diff = {k: (old.get(k), new.get(k)) for k in {*old, *new} if old.get(k) != new.get(k)}
            return f"{path.name} is stale ({name(old)}: {diff}): regenerate it with `{' '.join(_report_step(path))}`"
    return None


@pytest.mark.parametrize("path", CSVS, ids=lambda p: p.name)
def test_a_stale_predicted_column_is_caught(path):
    """The check fails on a CSV whose predicted figures are not today's (one cell changed)."""
    rows = _rows(path)
    assert _stale(path, rows, rows) is None
    col = next((c for c in rows[0] if c.startswith("predicted")), "value")
    # value CSVs: the estimator's row where there is one (gpu_verl_sft.csv), else the first
    r = next((i for i, row in enumerate(rows) if "estimate" in row.get("measurement", "")), 0)
    doctored = [dict(row) for row in rows]
    doctored[r][col] += "1"  # 123 -> 1231, 0.25 -> 0.251, a text value gets a character more
    assert "is stale" in (_stale(path, rows, doctored) or "")


SPEED_MFU = {
    "mfu dense mb4": ("dense", "lite", "mb4"),
    "mfu dense mb4 transformers": ("dense", "hf_fsdp2", "mb4"),
    "mfu dense mb4 compile": ("compile", "mb4"),
}
"""The MFU rows of gpu_speed.csv and where their measured tokens/s lie in gpu_speed_raw.json (all the dense model)."""


def _mfu_from_tokens_per_s(raw: dict, path: tuple[str, ...], unit: str) -> float:
    """Tokens/s from the raw JSON x today's FLOPs/token of the dense model at 4096 x peak FLOP/s read from the unit."""
    sys.path.insert(0, str(REPO / "bench"))
    from gpu_configs import DENSE_1B

    from mlite.models import from_hf_config

    m = raw
    for k in path:
        m = m[k]
    peak = float(unit.removeprefix("fraction of ").removesuffix(" TFLOP/s")) * 1e12
    return from_hf_config(DENSE_1B).flops_per_token(4096) * m["tokens_per_s"] / peak


def test_speed_mfu_recomputed_from_tokens_per_s():
    """Each MFU row of gpu_speed.csv is its tokens/s x FLOPs/token / peak with today's ``mlite.models.flops`` (not
    the ``mfu`` the raw JSON stored with the FLOPs of its day): a stale MFU, or a FLOPs change that the CSV did not
    follow, fails here."""
    import json

    raw = json.loads((RESULTS / "gpu_speed_raw.json").read_text())
    rows = {r["measurement"]: r for r in _rows(RESULTS / "gpu_speed.csv")}
    assert set(SPEED_MFU) <= set(rows), sorted(rows)
    for name, path in SPEED_MFU.items():
        want = round(_mfu_from_tokens_per_s(raw, path, rows[name]["unit"]), 4)
        assert float(rows[name]["value"]) == want, (name, rows[name]["value"], want)
    # the raw JSON's own figure agrees only when it was stored with today's FLOPs/token (a run from before issue 29
    # counted no tied output projection: recomputing is what moves it)
    sys.path.insert(0, str(REPO / "bench"))
    from gpu_configs import DENSE_1B

    from mlite.models import from_hf_config

    stored = raw["dense"]["lite"]["mb4"]
    today = from_hf_config(DENSE_1B).flops_per_token(4096)
    same = round(stored["mfu"], 4) == float(rows["mfu dense mb4"]["value"])
    assert same == (stored["flops_per_token"] == today), (stored["flops_per_token"], today)


def test_offload_rows_are_the_median_of_alternating_pairs_with_their_spread():
    """gpu_speed's offload rows from a raw section of three pairs: the ratio row is the median of the per-pair step
    time ratios (not the stored ``ratio``), the min / max rows their ends; a single unpaired run keeps its row."""
    import statistics

    sys.path.insert(0, str(REPO / "bench"))
    import gpu_speed

    steps = [(0.050, 0.140), (0.060, 0.120), (0.055, 0.165)]
    pairs = [{"resident": {"step_s": r}, "offload_1.0": {"step_s": o}} for r, o in steps]
    raw = {"offload": {"ratio": 99.0, "pairs": pairs, "eager_host_ratio": 3.5}}
    rows = {r["measurement"]: r["value"] for r in gpu_speed.rows(raw)}
    ratios = [o / r for r, o in steps]
    assert rows["offload1.0/resident dense-small"] == round(statistics.median(ratios), 3) == 2.8
    assert (rows["offload1.0/resident dense-small min"], rows["offload1.0/resident dense-small max"]) == (2.0, 3.0)
    assert rows["offload1.0 eager host/resident dense-small"] == 3.5
    one = {r["measurement"]: r["value"] for r in gpu_speed.rows({"offload": {"ratio": 3.754}})}
    assert one == {"offload1.0/resident dense-small": 3.754}
