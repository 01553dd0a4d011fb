"""Real debug runs on this machine (CPU, 2 processes, gloo), each started the way users start them (``mlite run``
or ``mlite.launch.start``), checked through their files only.

One run per behaviour, reused across assertions (CI has 2 cores): tiny-dense under torchrun through the CLI;
tiny-moe with PAO, bf16 moments, offload_fraction 1.0 and runtime param/optimizer offload; tiny-hybrid under the
Ray launcher; a stop mid-run; a worker that raises (torchrun and Ray); a worker killed with SIGKILL. Oracles: the
loss the workers logged falls by a clear margin, ``mlite logs check`` reads every run as format ``mlite``, the
measured parameter / gradient / optimizer bytes equal the model's parameter count times the bytes per parameter
of the mode (written out here), and the log holds every step up to the end.
"""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest
from conftest import run_cli

from mlite.launch import RunConfig, RunHandle, start
from mlite.launch.rundir import RunDir
from mlite.models import from_hf_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

STEPS = 30
RUN_TIMEOUT_S = 240


def _losses(run_dir) -> list[float]:
    return [d["train/loss"] for _, d in RunDir(run_dir).read_metrics()]


def _assert_loss_falls(run_dir) -> None:
    loss = _losses(run_dir)
    assert len(loss) == STEPS, len(loss)
    first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
    assert last < first - 1.0, (first, last, loss)


def _log_steps(run_dir) -> list[int]:
    return [
        int(ln.split(" - ", 1)[0][5:]) for ln in RunDir(run_dir).log.read_text().splitlines() if ln.startswith("step:")
    ]


def _check(run_dir) -> dict:
    res = run_cli("logs", "check", str(run_dir), "--json")
    assert res.rc == 0, res.err
    doc = res.json()["runs"][0]
    assert doc["format"] == "mlite" and doc["skipped_lines"] == 0
    return doc


def _static_bytes(run_dir) -> dict:
    mem = RunDir(run_dir).read_memory()
    assert mem and len(mem["ranks"]) == 2
    return {k: max(r[k] for r in mem["ranks"]) for k in ("params", "grads", "optimizer")} | {"peak": mem["peak"]}


@pytest.fixture(scope="module")
def dense_cli(tmp_path_factory):
    out = tmp_path_factory.mktemp("dense") / "run"
    res = run_cli(
        "run",
        "--model",
        "tiny-dense",
        "--steps",
        str(STEPS),
        "--nproc",
        "2",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--json",
        timeout=RUN_TIMEOUT_S,
    )
    return out, res


def test_dense_trains_under_torchrun_from_the_cli(dense_cli):
    out, res = dense_cli
    assert res.rc == 0, (res.err, (out / "train.log").read_text()[-2000:])
    doc = res.json()
    assert {"status", "steps", "final_loss", "log", "metrics_jsonl", "peak_memory_bytes"} <= set(doc)
    assert doc["status"] == "completed" and doc["steps"] == STEPS
    assert doc["final_loss"] == _losses(out)[-1]
    assert doc["log"] == str(out / "train.log") and doc["metrics_jsonl"] == str(out / "metrics.jsonl")
    _assert_loss_falls(out)
    lines = (out / "train.log").read_text().splitlines()
    assert lines[0] == "# mlite-lab run log" and lines[-1] == "[mlite] status: completed"
    assert _log_steps(out) == list(range(1, STEPS + 1))
    check = _check(out)
    assert check["num_steps"] == STEPS and not check["events"]
    assert {
        "train/loss",
        "train/grad_norm",
        "train/lr",
        "perf/max_memory_allocated_gb",
        "perf/cpu_memory_used_gb",
    } <= set(check["metrics"])
    cmd = (out / "command.txt").read_text().splitlines()
    assert cmd[0].startswith("torchrun ") and cmd[1].startswith("# mlite run --model tiny-dense")
    assert json.loads((out / "config.json").read_text())["model"] == "tiny-dense"


def test_dense_measured_memory_matches_the_parameter_count(dense_cli):
    out, _ = dense_cli
    n = from_hf_config("tiny-dense").training_params
    got = _static_bytes(out)
    # fp32 parameters on CPU, sharded over 2 ranks: params 4, grads 4, Adam moments 4 + 4 bytes per parameter
    assert (got["params"], got["grads"], got["optimizer"]) == (n * 4 // 2, n * 4 // 2, n * 8 // 2)
    assert got["peak"] > got["params"] + got["grads"] + got["optimizer"]
    assert RunHandle.open(out).peak_memory_bytes == got["peak"]


@pytest.fixture(scope="module")
def moe_offload(tmp_path_factory):
    out = tmp_path_factory.mktemp("moe") / "run"
    run = start(
        RunConfig(
            model="tiny-moe",
            steps=STEPS,
            nproc=2,
            pao=True,
            moment_dtype="bf16",
            offload_fraction=1.0,
            param_offload=True,
            optimizer_offload=True,
            out=str(out),
        )
    )
    run.wait(timeout=RUN_TIMEOUT_S)
    return run


def test_moe_trains_with_pao_and_every_offload_mode(moe_offload):
    run = moe_offload
    assert run.status == "completed", (run.reason, run.log_tail(30))
    _assert_loss_falls(run.run_dir)
    assert "param_offload True, optimizer_offload True" in run.log.read_text()
    n = from_hf_config("tiny-moe").training_params
    got = _static_bytes(run.run_dir)
    # bf16 parameters and gradients (2 + 2), PAO int16 remainders 2 + bf16 moments 2 + 2, over 2 ranks
    assert (got["params"], got["grads"], got["optimizer"]) == (n * 2 // 2, n * 2 // 2, n * 6 // 2)
    assert not _check(run.run_dir)["events"]


def test_hybrid_trains_under_ray(tmp_path):
    out = tmp_path / "run"
    run = start(RunConfig(model="tiny-hybrid", steps=STEPS, nproc=2, launcher="ray", out=str(out)))
    assert run.command.startswith("python -m mlite.launch.ray_launcher")
    assert run.wait(timeout=RUN_TIMEOUT_S) == "completed", (run.reason, run.log_tail(30))
    _assert_loss_falls(out)
    assert _log_steps(out) == list(range(1, STEPS + 1))
    assert _check(out)["num_steps"] == STEPS
    assert RunDir(out).read_status()["exit_code"] == 0  # the Ray driver saw every actor finish
    assert not psutil.pid_exists(run.pid) or psutil.Process(run.pid).status() == psutil.STATUS_ZOMBIE


def test_stop_mid_run_leaves_a_complete_log(tmp_path):
    out = tmp_path / "run"
    run = start(RunConfig(model="tiny-dense", steps=2000, nproc=2, out=str(out)))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while run.steps_done < 3 and run.status == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run.status == "running", (run.reason, run.log_tail(30))
    assert run.stop(timeout=120) == "stopped"
    last = run.steps_done
    assert 3 <= last < 2000
    assert run.reason == f"stop requested; stopped after step {last}"
    lines = run.log.read_text().splitlines()
    assert _log_steps(out) == list(range(1, last + 1))
    assert [d for _, d in RunDir(out).read_metrics()] and [s for s, _ in RunDir(out).read_metrics()] == list(
        range(1, last + 1)
    )
    assert all(json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines())  # every line parses
    assert lines[-2] == f"[mlite] stop requested: the workers stopped after step {last} of 2000"
    assert lines[-1] == f"[mlite] status: stopped (stop requested; stopped after step {last})"
    assert json.loads((out / "status.json").read_text())["status"] == "stopped"
    assert [e["kind"] for e in _check(out)["events"]] == ["cancelled"]


@pytest.mark.parametrize("launcher", ["torchrun", "ray"])
def test_crashing_worker_fails_the_run_with_its_traceback(tmp_path, launcher):
    out = tmp_path / "run"
    res = run_cli(
        "run",
        "--model",
        "tiny-dense",
        "--steps",
        "10",
        "--nproc",
        "2",
        "--device",
        "cpu",
        "--crash-at-step",
        "4",
        "--launcher",
        launcher,
        "--out",
        str(out),
        "--json",
        timeout=RUN_TIMEOUT_S,
    )
    assert res.rc == 1, (res.out, res.err)
    doc = res.json()
    assert doc["status"] == "failed" and doc["steps"] == 3
    assert "worker 1" in doc["reason"] and "RuntimeError: crash_at_step=4" in doc["reason"]
    text = (out / "train.log").read_text()
    assert _log_steps(out) == [1, 2, 3] and [s for s, _ in RunDir(out).read_metrics()] == [1, 2, 3]
    assert "Traceback (most recent call last):" in text
    assert "RuntimeError: crash_at_step=4: worker 1 raises on purpose" in text
    assert text.splitlines()[-1] == f"[mlite] status: failed ({doc['reason']})"
    kinds = [e["kind"] for e in _check(out)["events"]]
    assert "traceback" in kinds and "exit_code" in kinds


def test_worker_killed_by_the_host_fails_the_run_naming_it(tmp_path):
    """SIGKILL (what the host's OOM killer sends): no Python traceback from that worker, its peer dies on the
    lost connection; the status names the killed worker, not the peer."""
    out = tmp_path / "run"
    run = start(RunConfig(model="tiny-dense", steps=2000, nproc=2, out=str(out)))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while run.steps_done < 2 and run.status == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    workers = [
        p
        for p in psutil.Process(run.pid).children(recursive=True)
        if p.cmdline()[-3:-1] == ["-m", "mlite.launch.worker"] and "torch.distributed.run" not in p.cmdline()
    ]
    assert len(workers) == 2, [p.cmdline() for p in workers]
    victim = max(workers, key=lambda p: p.pid)
    rank = int(victim.environ()["RANK"])
    os.kill(victim.pid, signal.SIGKILL)
    assert run.wait(timeout=120) == "failed"
    assert run.reason == f"worker {rank} was killed by SIGKILL: killed from outside, e.g. by the host's OOM killer"
    assert _log_steps(out) == list(range(1, run.steps_done + 1)) and run.steps_done >= 2
