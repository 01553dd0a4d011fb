"""bench/step_time.py (predicted vs measured step time, issue 25): its CPU smoke (``--device cpu --tiny``) runs the
GPU code paths on tiny models and writes the raw JSON the report reads; the report writes the CSV contract with
``mlite.time.predict`` on the calibrated profile; :func:`plan_of` gives the estimator the options the built runtime
runs (the runtime's own objects are the oracle), and every configuration's name says what it runs."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import step_time as st

SCRIPT = REPO / "bench" / "step_time.py"
SMOKE = ("dense_mb1", "moe_mb1_pao", "dense_mb1_offload0.5")
"""The configurations the smoke measures: fsdp2, dist_opt + PAO on the MoE, update offload."""


def _run(*args, timeout=300):
    path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
    env = dict(os.environ, PYTHONPATH=path, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("step_time")
    res = _run("--out", str(out), "--device", "cpu", "--tiny", "--only", ",".join(SMOKE))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return out, json.loads((out / st.RAW).read_text())


def test_smoke_measures_every_configuration(smoke):
    _, raw = smoke
    assert raw["gpu"] == "cpu" and raw["tiny"] and raw["torch_version"] and raw["date"]
    assert raw["command"].startswith("python3 bench/step_time.py --out ")
    assert [r["configuration"] for r in raw["configurations"]] == list(SMOKE)
    for r in raw["configurations"]:
        assert "error" not in r, r.get("error")
        assert r["warmup_steps"] == 1 and r["timed_steps"] == len(r["steps_s"]) == 2
        assert r["min_s"] <= r["median_s"] <= r["max_s"] and r["min_s"] > 0
        for k in ("forward_backward", "optimizer"):
            assert len(r["phase_s"][k]) == 2 and all(x > 0 for x in r["phase_s"][k])
        # on CPU the phases are consecutive host-clock intervals of each step
        for i, s in enumerate(r["steps_s"]):
            assert r["phase_s"]["forward_backward"][i] + r["phase_s"]["optimizer"][i] == pytest.approx(s, rel=1e-3)
        assert r["peak_bytes"] is None  # CPU: no allocator peak
        assert r["tokens_per_step"] == 256 * r["run"]["num_microbatches"]


def test_smoke_profiles_one_step_into_categories(smoke):
    _, raw = smoke
    for r in raw["configurations"]:
        p = r["profile"]
        assert p["activity"] == "cpu" and p["step_wall_s"] > 0
        assert sum(p["categories_s"].values()) == pytest.approx(p["kernel_total_s"])
        assert set(p["categories_s"]) <= {c for c, _ in st.CATEGORIES} | {"other"}
        assert p["categories_s"]["gemm"] > 0 and p["categories_s"]["attention"] > 0
        times = [k["s"] for k in p["top"]]
        assert times == sorted(times, reverse=True) and len(times) == min(st.TOP_KERNELS, p["distinct_kernels"])
        assert all(k["category"] == st.category(k["name"]) for k in p["top"])


def test_smoke_calibrates_each_model(smoke):
    from mlite.time.hardware import profile_from_dict

    _, raw = smoke
    cal = raw["calibration"]
    assert "error" not in cal, cal.get("error")
    assert set(cal["profiles"]) == set(cal["wall_s"]) == {"dense", "moe"} and cal["quick"] is True
    for m, doc in cal["profiles"].items():
        assert profile_from_dict(doc, m).peak_bf16_flops > 0


def test_report_writes_the_csv_contract(smoke, tmp_path):
    out, raw = smoke
    path = tmp_path / "step_time.csv"
    res = _run("--report", str(out / st.RAW), "--csv", str(path))
    assert res.returncode == 0, res.stderr[-3000:]
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == st.COLUMNS
    assert [r["configuration"] for r in rows] == list(SMOKE)
    for r, m in zip(rows, raw["configurations"], strict=True):
        assert float(r["measured_step_s"]) == pytest.approx(m["median_s"], rel=1e-4)
        assert float(r["measured_min_s"]) == pytest.approx(m["min_s"], rel=1e-4)
        assert float(r["measured_max_s"]) == pytest.approx(m["max_s"], rel=1e-4)
        ratio = float(r["predicted_step_s"]) / float(r["measured_step_s"])
        assert float(r["ratio"]) == pytest.approx(ratio, rel=2e-3)
        assert r["within_15pct"] == ("yes" if abs(float(r["ratio"]) - 1) <= 0.15 else "no")
        assert r["predicted_part_1"] and r["gpu"] == "cpu" and "--tiny" in r["command"]
        assert r["command"].endswith(" && " + st.REPORT_CMD)
        secs = [float(r[f"predicted_part_{i}"].rsplit(" ", 1)[1]) for i in (1, 2, 3) if r[f"predicted_part_{i}"]]
        assert secs == sorted(secs, reverse=True) and secs[0] <= float(r["predicted_step_s"]) * (1 + 1e-4)
    assert f"of {len(rows)} configurations within 15%" in res.stdout


def test_report_predicts_with_the_calibrated_profile(smoke):
    """A machine half as fast in every respect (rates halved, fixed costs doubled in the raw JSON's calibrated
    profiles) predicts a longer step for every row: the report reads the profiles the calibration stored."""
    _, raw = smoke
    slow = json.loads(json.dumps(raw))
    for doc in slow["calibration"]["profiles"].values():
        for k in list(doc):
            if k.endswith(("_flops", "_bytes_per_s", "_params_per_s")):
                doc[k] /= 2
            elif k.endswith("_s"):
                doc[k] *= 2
    base = {r["configuration"]: r["predicted_step_s"] for r in st.rows(raw)}
    halved = {r["configuration"]: r["predicted_step_s"] for r in st.rows(slow)}
    assert all(halved[k] > base[k] for k in base), (base, halved)


def test_report_without_a_profile_is_one_line(smoke, tmp_path, capsys, monkeypatch):
    _, raw = smoke
    bad = dict(raw, calibration={"profiles": {}, "wall_s": {}, "error": "RuntimeError: no GPU"})
    path = tmp_path / "raw.json"
    path.write_text(json.dumps(bad))
    monkeypatch.setattr(sys, "argv", ["step_time.py", "--report", str(path)])
    assert st.main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no calibrated profile for dense" in err[0] and "no GPU" in err[0]


def _built(name: str):
    """The runtime ``measure_one`` builds for configuration ``name`` (tiny, CPU), and what it reports."""
    import tempfile
    from pathlib import Path

    from mlite.runtime.runtime import create_runtime

    row = st.config_row(name, "cpu", True)
    with tempfile.TemporaryDirectory() as d:
        rt = create_runtime(st.run_config(row, Path(d)).runtime_config())
        h = rt.build_model()
    return row, st.runtime_facts(rt, h)


@pytest.mark.parametrize("name", list(st.CONFIGS))
def test_plan_of_gives_the_options_the_runtime_runs(name):
    from mlite.options.optimizers import BACKENDS, runtime_class

    row, facts = _built(name)
    spec, plan, t = st.plan_of(row)
    assert not plan.errors, plan.errors
    par = plan.parallel
    assert (par.tp, par.pp, par.cp, par.ep, plan.dp, plan.ngpu) == (1, 1, 1, 1, 1, 1)
    assert spec.training_params == facts["params"]  # the model the runtime built
    assert runtime_class(t.optimizer_algorithm, t.optimizer).__name__ == facts["optimizer_class"]
    assert t.optimizer == facts["backend"]
    assert t.use_precision_aware_optimizer == facts["pao"]
    assert ("remainder" in facts["state_modes"]) == (t.use_precision_aware_optimizer and t.store_param_remainders)
    assert t.offload_fraction == facts["offload_fraction"]
    assert (t.exp_avg_dtype, t.exp_avg_sq_dtype) == (facts["exp_avg_dtype"], facts["exp_avg_sq_dtype"])
    assert BACKENDS.entry(t.optimizer).grad_buffer == (facts["main_grads_dtype"] is not None)
    if facts["main_grads_dtype"] is not None:
        assert t.main_grads_dtype == facts["main_grads_dtype"]
    assert t.recompute == facts["recompute"]
    assert {"bf16": "bfloat16"}[t.param_dtype] == facts["param_dtype"]
    assert t.activation_model == "lite" and t.gpus_per_node == 1 and t.micro_batch_size == 1
    assert t.seq_len == row["run"]["tokens_per_microbatch"]


@pytest.mark.parametrize("name", list(st.CONFIGS))
def test_each_name_says_what_the_runtime_runs(name):
    """A configuration's name is honest about the built runtime: ``mbN`` micro-batches per step, ``selective`` /
    ``full`` recompute, ``offloadX`` the offloaded share, ``pao`` the distributed optimizer's PAO with bf16 grads,
    ``dist_opt`` the distributed optimizer; otherwise fsdp2 with an fp32 master, nothing recomputed or offloaded."""
    row, facts = _built(name)
    model, mb, *rest = name.split("_", 2)
    tag = rest[0] if rest else ""
    assert model == row["model"] and st.plan_of(row)[2].num_microbatches == int(mb.removeprefix("mb"))
    assert facts["recompute"] == (tag if tag in ("selective", "full") else "none")
    off = re.fullmatch(r"offload([\d.]+)", tag)
    assert facts["offload_fraction"] == (float(off.group(1)) if off else 0.0)
    assert facts["offloaded_share"] == pytest.approx(facts["offload_fraction"], abs=0.25)  # whole tensors
    assert facts["backend"] == ("dist_opt" if tag in ("pao", "dist_opt") else "fsdp2")
    assert facts["pao"] == (tag == "pao") and facts["state_modes"] == (["remainder"] if tag == "pao" else ["master"])
    assert facts["main_grads_dtype"] == {"pao": "bf16", "dist_opt": "fp32"}.get(tag)


def test_deadline_skips_configurations_and_the_report_names_them(tmp_path, capsys, monkeypatch):
    out = tmp_path / "late"
    monkeypatch.setattr(
        sys, "argv", ["step_time.py", "--out", str(out), "--device", "cpu", "--tiny", "--only", "moe_mb4",
                      "--deadline-s", "0"]
    )  # fmt: skip
    assert st.main() == 0
    raw = json.loads((out / st.RAW).read_text())
    (row,) = raw["configurations"]
    assert row["configuration"] == "moe_mb4" and row["skipped"].startswith("deadline") and "median_s" not in row
    assert set(raw["calibration"]["profiles"]) == {"moe"}
    assert st.rows(raw) == []
    monkeypatch.setattr(sys, "argv", ["step_time.py", "--report", str(out / st.RAW)])
    capsys.readouterr()
    assert st.main() == 0
    assert "not measured: moe_mb4" in capsys.readouterr().out
