"""bench/gpu_fla.py (the fla-vs-torch Gated DeltaNet GPU row): its --smoke mode runs every step's code on the CPU
in child processes (the dispatcher there takes the torch path; fla's naive recurrent reference is the independent
oracle), and the CSV rows are a function of the raw JSON (a GPU-shaped record given here)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import gpu_fla as g
import result_csv

SCRIPT = REPO / "bench" / "gpu_fla.py"


def _run(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("fla_smoke")
    res = _run("--smoke", "--out", str(out), "--site", "local=", "--iters", "1", "--warmup", "0", "--train-steps", "1")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return out, json.loads((out / "gpu_fla_raw.json").read_text())


def test_smoke_runs_every_step_and_takes_the_torch_path(smoke):
    _, raw = smoke
    assert raw["finished"] and raw["gpu"] == "cpu"
    site = raw["sites"]["local"]
    steps = {**raw["shared"], **site["steps"]}
    ran = {k: v for k, v in steps.items() if isinstance(v, dict) and "rc" in v}
    assert {"op_ref", "op_torch", "env", "op_fla", "op_fla_naive", "train_torch", "train_fla"} <= set(ran)
    assert all(v["rc"] == 0 for v in ran.values()), {k: v.get("error") for k, v in ran.items()}
    env = site["steps"]["env"]["result"]
    assert env["auto_backend"] == "torch" and env["probe"]["ran"] is False
    assert env["versions"]["fla_core"] is not None  # the kit's fla extra, read from its metadata (not imported)
    assert site["steps"]["op_fla"]["result"]["backends"] == {"cpu/bfloat16/torch": 1 + 1}  # first call + 1 timed


def test_smoke_differences_against_the_references(smoke):
    _, raw = smoke
    d = raw["sites"]["local"]["diffs"]
    # MLITE_GDN_BACKEND=fla on the CPU is the torch path: the same bits as the torch step
    assert all(x["max_abs"] == 0.0 for x in d["fla"]["vs_torch"].values())
    # bf16 inputs against the fp32 run of the same inputs, and fla's own recurrent reference (fp32 inside) against
    # mlite's fp32 chunked path: within bf16 rounding, for the output and every input's gradient
    for which in (raw["shared"]["torch_vs_ref"], d["fla_naive"]["vs_ref"], d["fla_naive"]["vs_torch"]):
        assert set(which) == set(g.GRADS)
        assert all(x["max_rel"] < 2e-2 and x["ref_max"] > 0 for x in which.values()), which
    losses = [s["loss"] for s in raw["shared"]["train_torch"]["result"]["steps"]]
    assert losses == [s["loss"] for s in raw["sites"]["local"]["steps"]["train_fla"]["result"]["steps"]]
    assert 5.0 < losses[0] < 7.5  # ~ln(512) for a fresh tiny-hybrid


def test_smoke_report_writes_the_csv_contract(smoke, tmp_path):
    out, _ = smoke
    path = tmp_path / "gpu_fla.csv"
    res = _run("--report", str(out / "gpu_fla_raw.json"), "--csv", str(path))
    assert res.returncode == 0, res.stderr
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == result_csv.COLUMNS
    v = {r["measurement"]: r["value"] for r in rows}
    assert v["local auto backend"] == "torch" and v["local fla backend"] == "cpu/bfloat16/torch"
    assert v["local train_fla max loss diff vs torch"] == "0.0"
    assert all(r["command"].endswith(" && " + g.REPORT_CMD) and "--smoke" in r["command"] for r in rows)


def _gpu_raw():
    """A GPU-shaped record: one site whose probe refused (the Hopper guard), one whose kernels ran."""
    diff = {n: {"max_abs": 0.01, "max_rel": 0.004, "ref_max": 2.5} for n in g.GRADS}
    steps = [
        {"step": i, "loss": 10.0 - i, "grad_norm": 1.0, "ok": True, "step_s": s}
        for i, s in ((1, 9.0), (2, 0.5), (3, 0.7))
    ]
    fla_steps = [dict(s, loss=s["loss"] + 0.002 * s["step"]) for s in steps]
    guard = "fla kernel failed (RuntimeError: Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results)"
    return {
        "command": "python3 bench/gpu_fla.py --out X --site a=/a --site b=/b",
        "params": {"op": g.OP_GPU},
        "gpu": "NVIDIA H200",
        "torch_version": "2.11.0+cu130",
        "shared": {
            "op_torch": {"rc": 0, "result": {"median_ms": 18.0, "times_ms": [18.0] * 20}},
            "torch_vs_ref": diff,
            "train_torch": {"rc": 0, "result": {"steps": steps, "backends": {"cuda/bfloat16/torch": 9}}},
        },
        "sites": {
            "a": {
                "steps": {
                    "env": {"rc": 0, "result": {"versions": {"fla_core": "0.6.0"}, "auto_backend": "torch",
                                                "probe": {"ran": True, "ok": False, "message": guard}}},
                    "warm": {"rc": 1, "result": {"variant": "fla_native"}, "error": "RuntimeError: Triton >= 3.4.0 ..."},
                    "train_fla": {"skipped": f"probe did not pass: {guard}"},
                    "op_fla": {"rc": 1, "error": "mlite.errors.MliteError: MLITE_GDN_BACKEND=fla: ..."},
                }
            },
            "b": {
                "steps": {
                    "env": {"rc": 0, "result": {"versions": {"fla_core": "0.6.0"}, "auto_backend": "fla",
                                                "probe": {"ran": True, "ok": True, "message": "ok"}}},
                    "warm": {"rc": 0, "result": {"variant": "fla_native", "forward_backward_s": 41.5}},
                    "op_fla": {"rc": 0, "result": {"median_ms": 6.0, "times_ms": [6.0] * 20,
                                                   "backends": {"cuda/bfloat16/fla": 24}}},
                    "train_fla": {"rc": 0, "result": {"steps": fla_steps, "backends": {"cuda/bfloat16/fla": 9}}},
                },
                "diffs": {"fla": {"vs_torch": diff, "vs_ref": diff}},
                "speed": {"fla": {"median_ms": 6.0, "torch_median_ms": 18.0, "torch_over_this": 3.0}},
            },
        },
    }  # fmt: skip


def test_rows_of_a_gpu_record():
    rows = g.rows(_gpu_raw())
    v = {r["measurement"]: r["value"] for r in rows}
    u = {r["measurement"]: r["unit"] for r in rows}
    assert v["a probe ok"] == 0 and "Hopper" in u["a probe ok"] and v["a auto backend"] == "torch"
    assert v["a fla"] == "failed" and "MLITE_GDN_BACKEND=fla" in u["a fla"]
    assert v["a train_fla"] == "skipped"
    assert v["a first fla call"] == "failed" and u["a first fla call"].startswith("(fla_native) RuntimeError: Triton")
    assert v["b first fla call"] == 41.5
    assert v["b probe ok"] == 1 and v["b auto backend"] == "fla" and v["b fla backend"] == "cuda/bfloat16/fla"
    assert v["b fla fwd+bwd"] == 6.0 and v["b fla speedup over torch"] == 3.0 and v["gdn torch fwd+bwd"] == 18.0
    assert v["b fla vs_torch max_rel dbeta"] == 0.004
    # step 1 (compilation) is left out of the step time: median of 0.5 and 0.7 -> the upper middle, 0.7
    assert v["train_torch step time"] == 0.7
    assert v["b train_fla max loss diff vs torch"] == 0.006 and v["b train_fla losses"] == "9.00200 8.00400 7.00600"


def test_bad_site_is_one_clear_error(tmp_path):
    res = _run("--out", str(tmp_path / "x"), "--site", "nolabel")
    assert res.returncode == 2 and "LABEL=PATH" in res.stderr
    assert not (tmp_path / "x").exists()
