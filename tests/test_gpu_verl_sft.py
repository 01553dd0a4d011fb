"""bench/gpu_verl_sft.py (the verl SFT GPU row) and its device glue, without running verl: the rows as a function of the
raw JSON (oracle: tokens and stamps given here), the report round trip, the ray wheel repack, the two-call wheel
staging of bench/gpu_verl_sft_device.sh. The run itself is `--device cpu --tiny` (about 30 s: not run here)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
import zipfile

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import gpu_verl_sft as g
import gpu_verl_wheels as w
import result_csv

TOKENS = {1: 900, 2: 1000, 3: 1100, 4: 1200, 5: 1300}
STAMPS = {1: 10.0, 2: 10.5, 3: 11.0, 4: 11.75, 5: 12.5}


def _raw(steps=(1, 2, 3, 4, 5), status="completed", device="cuda", lite=None):
    return {
        "command": "python3 bench/gpu_verl_sft.py --out X",
        "params": {"name": "dense1b", "device": device, "steps": 5, "warmup": 2, "train_batch_size": 500,
                   "tokens_per_microbatch": 4096, "model": g.DENSE_1B},
        "status": status,
        "gpu": "NVIDIA H200",
        "torch_version": "2.11.0+cu130",
        "estimate": {"peak": 20 * g.GIB},  # what the run recorded at its start: the report does not read it
        "lite_dense_mb4_tokens_per_s": lite,
        "steps": {
            str(s): {"t_s": STAMPS[s], "train/global_tokens": TOKENS[s], "train/mfu": 0.1 * s,
                     "perf/max_memory_allocated_gb": 20.0 + s, "perf/max_memory_reserved_gb": 30.0 + s}
            for s in steps
        },
    }  # fmt: skip


def _values(rows):
    return {r["measurement"]: r["value"] for r in rows}


def test_rows_time_the_steps_after_the_warmup():
    v = _values(g.rows(_raw(lite=1000.0)))
    # steps 3..5: 3600 tokens between the stamps of step 2 (10.5 s) and step 5 (12.5 s)
    assert v["verl_sft dense1b tokens/s"] == 1800.0
    assert v["verl_sft dense1b step time"] == round(2.0 / 3, 4)
    assert v["verl_sft dense1b tokens/step"] == 1200.0
    assert v["verl_sft dense1b mfu (verl)"] == 0.4
    assert v["verl_sft dense1b / lite dense mb4"] == 1.8
    assert v["verl_sft dense1b peak allocated"] == 25 * g.GIB  # the largest record, in bytes
    assert v["verl_sft dense1b peak reserved"] == 35 * g.GIB
    est = _estimate(g.DENSE_1B, steps=5, tokens=4096, batch=500)
    assert v["verl_sft dense1b estimated peak"] == round(est)
    assert v["verl_sft dense1b peak/estimate"] == round(25 * g.GIB / est, 4)
    assert v["verl_sft dense1b completed"] == 1


def _estimate(model: dict, *, steps: int, tokens: int, batch: int) -> float:
    """Oracle: ``mlite.memory`` for the ``mlite run`` command the bench runs, built from the mlite API."""
    import tempfile

    from mlite.launch import RunConfig
    from mlite.launch.memory_check import estimate_for

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.json")
        with open(path, "w") as f:
            json.dump(model, f)
        cfg = RunConfig(trainer="verl-sft", model=path, steps=steps, nproc=1, device="cuda",
                        tokens_per_microbatch=tokens, train_batch_size=batch)  # fmt: skip
        return estimate_for(cfg).worst.peak


def test_the_estimate_is_derived_by_the_report_with_todays_estimator(monkeypatch):
    """The estimated columns follow ``mlite.memory`` as it is now (a stale CSV then fails
    tests/test_bench_results.py), not the estimate the run recorded when it started."""
    import mlite.launch.memory_check as mc

    raw = _raw()
    before = _values(g.rows(raw))["verl_sft dense1b estimated peak"]
    assert before != raw["estimate"]["peak"]
    real = mc.estimate_for

    class Doubled:
        def __init__(self, est):
            self.worst = type("W", (), {"peak": 2 * est.worst.peak})()

    monkeypatch.setattr(mc, "estimate_for", lambda cfg: Doubled(real(cfg)))
    assert _values(g.rows(raw))["verl_sft dense1b estimated peak"] == 2 * before


def test_the_run_command_is_the_estimated_config(tmp_path):
    """The flags the bench passes to ``mlite run`` parse back to the RunConfig its report estimates."""
    from mlite.cli import build_parser
    from mlite.cli.run import _config

    raw = _raw()
    model = tmp_path / "m.json"
    model.write_text(json.dumps(raw["params"]["model"]))
    bench = g.Bench.__new__(g.Bench)
    bench.raw, bench.run_dir = raw, tmp_path / "run"
    argv = bench.mlite_argv(model)
    assert argv[1:4] == ["-m", "mlite", "run"]
    words = [w for w in argv[4:] if w not in ("--overwrite", "--json")]
    assert _config(build_parser().parse_args(["run", *words])) == g.run_config(raw, model, tmp_path / "run")


def test_missing_steps_give_no_speed_rows_and_a_failed_run_says_so():
    v = _values(g.rows(_raw(steps=(1, 2, 3, 5), status="failed")))
    assert "verl_sft dense1b tokens/s" not in v and "verl_sft dense1b step time" not in v
    assert v["verl_sft dense1b peak allocated"] == 25 * g.GIB
    assert v["verl_sft dense1b completed"] == 0
    assert "verl_sft dense1b completed" not in _values(g.rows(_raw(status=None)))  # still running: no verdict yet


def test_report_rewrites_the_csv_from_the_raw_json(tmp_path):
    raw = _raw()
    (tmp_path / "raw.json").write_text(json.dumps(raw))
    g.write_csv(raw, tmp_path / "first.csv")
    assert g.main(["--report", str(tmp_path / "raw.json"), "--csv", str(tmp_path / "again.csv")]) == 0
    assert (tmp_path / "again.csv").read_text() == (tmp_path / "first.csv").read_text()
    with open(tmp_path / "again.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == result_csv.COLUMNS
    assert {r["command"] for r in rows} == {f"{raw['command']} && {g.REPORT_CMD}"}
    assert "bench/results/gpu_verl_sft.csv" in g.REPORT_CMD.split()


def test_bad_step_counts_are_refused():
    with pytest.raises(SystemExit) as e:
        g.parse_args(["--out", "x", "--steps", "2", "--warmup", "2"])
    assert e.value.code == 2


def test_the_plain_lite_row_is_read_from_gpu_speed_raw():
    doc = json.loads((REPO / "bench" / "results" / "gpu_speed_raw.json").read_text())
    got = g._lite_tokens_per_s(str(REPO / "bench" / "results" / "gpu_speed_raw.json"))
    assert got == doc["dense"]["lite"]["mb4"]["tokens_per_s"] and got > 0
    assert g.DENSE_1B["num_hidden_layers"] == 16  # the model of that row


def test_ray_repack_drops_only_the_jar_and_daemons(tmp_path):
    src, dst = tmp_path / "ray-2.60.0-cp312-cp312-x.whl", tmp_path / "out.whl"
    keep = {"ray/__init__.py": b"x = 1\n", "ray/_raylet.so": os.urandom(64)}
    record = "".join(f"{n},sha256=abc,1\n" for n in [*keep, *w.RAY_DROP]) + "ray-2.60.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(src, "w") as z:
        for n, data in keep.items():
            z.writestr(n, data)
        for n in w.RAY_DROP:
            z.writestr(n, b"big")
        z.writestr("ray-2.60.0.dist-info/RECORD", record)
    w.repack_ray(src, dst)
    with zipfile.ZipFile(dst) as z:
        names = set(z.namelist())
        assert names == {*keep, "ray-2.60.0.dist-info/RECORD"}
        assert all(z.read(n) == data for n, data in keep.items())
        rec = z.read("ray-2.60.0.dist-info/RECORD").decode()
    assert not any(n in rec for n in w.RAY_DROP) and all(n in rec for n in keep)
    bare = tmp_path / "bare.whl"
    with zipfile.ZipFile(bare, "w") as z:
        z.writestr("ray/__init__.py", b"")
    with pytest.raises(SystemExit, match="update RAY_DROP"):
        w.repack_ray(bare, tmp_path / "x.whl")


def test_wheel_set_has_one_pinned_version_each():
    names = [s.split("==")[0].lower().replace("_", "-") for s in (*w.WHEELS, *w.SDIST_BUILT)]
    assert all("==" in s for s in (*w.WHEELS, *w.SDIST_BUILT))
    assert len(names) == len(set(names))
    assert {"verl", "ray", "hydra-core", "tensordict", "antlr4-python3-runtime"} <= set(names)


def _script(*args, env):
    return subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_verl_sft_device.sh"), *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def test_two_call_staging_reassembles_the_wheel_and_fails_clearly_without_call_a(tmp_path):
    """Call B without call A's part stops at once naming the cause; after `stage`, B's wheel is put together
    byte-equal (its checksum passes) and the script goes on to pip (which refuses this fake wheel)."""
    whl = os.urandom(3000)
    name = "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / f"{name}.part-aa").write_bytes(whl[:1000])
    (b / f"{name}.part-ab").write_bytes(whl[1000:])
    w.write_sums(a)
    w.write_sums(b, {name: hashlib.sha256(whl).hexdigest()})
    stages = f"{tmp_path / 's1'} {tmp_path / 's2'}"
    env = dict(
        os.environ,
        VERL_STAGE_DIRS=stages,
        VERL_SITE=str(tmp_path / "site"),
        VERL_WORK=str(tmp_path / "work"),
        OUT=str(tmp_path / "out"),
    )
    p = _script("run", str(b), env=env)
    assert p.returncode == 1 and "call A did not run on this machine" in p.stdout, p.stdout + p.stderr
    p = _script("stage", str(a), env=env)
    assert p.returncode == 0 and (tmp_path / "s2" / f"{name}.part-aa").is_file(), p.stdout + p.stderr
    p = _script("run", str(b), env=env)
    assert (b / name).read_bytes() == whl
    assert p.returncode == 1 and "FAILED: pip install" in p.stdout, p.stdout + p.stderr
