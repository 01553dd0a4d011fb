"""The run-directory schema (:mod:`mlite.rundir`) holds writer and reader together: a run directory written by the
launch layer's writer, for every status it can end in, reads back through :mod:`mlite.logs` (the reader) and
:class:`mlite.launch.RunHandle` with the same status, steps and bit-identical values."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

import pytest

from mlite import rundir as schema
from mlite.launch import RunHandle
from mlite.launch.rundir import RunDir
from mlite.launch.supervisor import finalize
from mlite.logs import read_log, sniff_format
from mlite.logs.input.detect import is_run_dir

# values whose repr is long and that a float32 round trip or a decimal cut would change
STEPS = [
    (1, {"train/loss": 6.244490356445312, "train/grad_norm": 3.94938796431667, "train/lr": 0.0}),
    (2, {"train/loss": 5.9 + 1e-13, "train/grad_norm": math.pi, "train/lr": 1.5e-3}),
    (3, {"train/loss": 5.123456789012345, "train/grad_norm": 1 / 3, "train/lr": 3e-3}),
]


def _write(path, status: str) -> RunDir:
    """A run directory through the writer's own calls, ending in ``status`` the way the launcher ends it."""
    rd = RunDir(path)
    rd.create({"model": "tiny-moe"}, "torchrun ... -m mlite.launch.worker RUN", "mlite run --model tiny-moe")
    rd.write_status(
        status=schema.RUNNING,
        reason=None,
        launcher="torchrun",
        started_at="t0",
        pid=None,
        ended_at=None,
        exit_code=None,
        steps=0,
    )
    steps = STEPS if status != schema.STOPPED else STEPS[:2]
    for step, data in steps:
        rd.log_step(step, data)
    if status == schema.COMPLETED:
        rd.write_result(schema.COMPLETED, len(steps))
        finalize(rd, exit_code=0)
    elif status == schema.STOPPED:
        rd.request_stop()
        rd.lifecycle(f"stop requested: the workers stopped after step {len(steps)} of 3")
        rd.write_result(schema.STOPPED, len(steps))
        finalize(rd, exit_code=0)
    elif status == schema.FAILED:
        tb = 'Traceback (most recent call last):\n  File "w.py", line 1, in train\nRuntimeError: boom\n'
        rd.append_log(f"[mlite] worker 1 raised:\n{tb}")
        rd.write_error(1, "RuntimeError: boom", tb)
        finalize(rd, exit_code=1)
    return rd


@pytest.mark.parametrize("status", schema.STATUSES)
def test_the_reader_reads_what_the_writer_wrote(tmp_path, status):
    rd = _write(tmp_path / status, status)
    assert is_run_dir(rd.path) and schema.is_run_dir(rd.path)
    assert rd.log.read_text().splitlines()[0] == schema.LOG_HEADER
    assert sniff_format(rd.log) == "mlite"
    assert set(p.name for p in rd.path.iterdir()) <= set(schema.RUN_FILES) | {schema.error_file_name(1)}

    # status: status.json, the last status line of train.log and the handle agree
    doc = json.loads(rd.status_file.read_text())
    assert set(doc) == set(schema.STATUS_KEYS) and doc["status"] == status
    assert rd.log_status_line()[0] == status
    assert RunHandle.open(rd.path).status == status  # pid None: the launcher counts as just started
    if status in schema.FINAL:
        result = rd.read_result()
        assert (result is None) == (status == schema.FAILED)
        if result is not None:
            assert set(result) == set(schema.RESULT_KEYS) and result["outcome"] == status
    if status == schema.FAILED:
        assert set(json.loads(rd.error_file(1).read_text())) == set(schema.ERROR_KEYS)

    # values: the reader gets every step bit for bit, from metrics.jsonl and from train.log alone
    expect = STEPS if status != schema.STOPPED else STEPS[:2]
    for source in ("metrics.jsonl", "train.log"):
        if source == "train.log":
            rd.metrics_jsonl.unlink()
        run = read_log(rd.path)
        assert run.format == "mlite" and run.num_steps == len(expect) and run.last_step == expect[-1][0]
        wide = run.wide
        for step, data in expect:
            for k, v in data.items():
                assert wide.loc[step, k] == v, (source, step, k)

    # events: what the final status line means to the reader
    kinds = {e.kind for e in run.events}
    if status == schema.FAILED:
        assert {"exit_code", "traceback"} <= kinds
        assert any("worker 1" in e.message for e in run.events if e.kind == "exit_code")
    elif status == schema.STOPPED:
        assert "cancelled" in kinds and "exit_code" not in kinds
    else:
        assert kinds.isdisjoint({"exit_code", "traceback", "cancelled", "oom"}), kinds


def test_status_lines_round_trip_and_refuse_unknown_statuses():
    for status in schema.STATUSES:
        for reason in ("", "worker 1 exited with code 1: RuntimeError: x (y)"):
            line = schema.status_line(status, reason)
            assert line.startswith(schema.STATUS_PREFIX)
            assert schema.parse_status_line(line) == (status, reason)
    assert schema.parse_status_line("[mlite] command: torchrun") is None
    with pytest.raises(ValueError, match="not one of"):
        schema.status_line("crashed")
    rd = RunDir("/nonexistent")
    with pytest.raises(ValueError, match="unknown key"):
        rd.write_status(state="running")
    with pytest.raises(ValueError, match="not one of"):
        rd.write_status(status="crashed")


def test_an_empty_folder_is_no_run_dir(tmp_path):
    assert not schema.is_run_dir(tmp_path) and not schema.is_run_dir(tmp_path / "missing")
    (tmp_path / schema.METRICS_FILE).write_text("")
    assert schema.is_run_dir(tmp_path)


def test_the_schema_module_imports_nothing_heavy():
    code = (
        "import sys, mlite.rundir; print(sorted(m for m in sys.modules if m.startswith('mlite') "
        "or m in ('torch', 'pandas', 'numpy', 'ipywidgets', 'matplotlib')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['mlite', 'mlite.rundir']"


def test_the_crash_sample_is_a_real_run_of_its_recorded_command():
    """``data/logs/mlite_tiny_moe_crash`` was made by ``mlite run --crash-at-step 13``: its files say so and agree."""
    from conftest import REPO

    from mlite.launch import RunConfig

    rd = RunDir(REPO / "data" / "logs" / "mlite_tiny_moe_crash")
    cfg = RunConfig.from_dict(rd.read_config_dict())
    cli = rd.command_file.read_text().splitlines()[1]
    assert cli.startswith("# mlite run ") and "--crash-at-step 13" in cli and cfg.crash_at_step == 13
    words = rd.read_command().split()
    module = words[words.index("-m") + 1]
    assert importlib.util.find_spec(module) is not None and words[-1] == cfg.out  # a worker module that exists
    doc = rd.read_status()
    assert doc["status"] == schema.FAILED and doc["steps"] == 12 and doc["exit_code"] == 1
    assert rd.log_status_line() == (schema.FAILED, doc["reason"]) and "crash_at_step=13" in doc["reason"]
    assert rd.read_result() is None and [e["rank"] for e in rd.read_errors()] == [1, 0]  # worker 1 raised first
    run = read_log(rd.path)
    assert (run.num_steps, run.last_step) == (12, 12) and {"traceback", "exit_code"} <= {e.kind for e in run.events}
