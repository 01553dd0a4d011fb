"""The launch layer without starting workers: RunConfig validation and its mapping onto the runtime and the
estimator, the run-directory format as mlite.logs reads it, RunHandle's status from files, failure reasons from
real torchrun output, the CLI's bad-input contract and dry run. (Real runs: ``test_launch_runs.py``.)"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from conftest import REPO, assert_one_line_error, run_cli

from mlite.errors import MliteError
from mlite.launch import RunConfig, RunHandle, start
from mlite.launch.rundir import LOG_HEADER, RunDir
from mlite.launch.supervisor import failure_reason

LAUNCH_DATA = REPO / "tests" / "data" / "launch"


# ---------------------------------------------------------------------------------------------- RunConfig
@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"steps": 0}, "steps"),
        ({"nproc": 0}, "nproc"),
        ({"device": "tpu"}, "device"),
        ({"launcher": "slurm"}, "launcher"),
        ({"optimizer": "adam"}, "optimizer"),
        ({"moment_dtype": "bf16"}, "--pao"),
        ({"offload_fraction": 1.5}, "offload_fraction"),
        ({"offload_fraction": float("nan")}, "offload_fraction"),
        ({"lr": 0.0}, "lr"),
        ({"steps": True}, "steps"),
        ({"recompute": "some"}, "recompute"),
        ({"crash_at_step": 0}, "crash_at_step"),
        ({"model": " "}, "model"),
        ({"param_dtype": "fp16"}, "param_dtype"),
        ({"threads": 0}, "threads"),
    ],
)
def test_run_config_rejects_bad_fields_in_one_line(kwargs, needle):
    with pytest.raises(MliteError) as e:
        RunConfig(**kwargs)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_run_config_maps_onto_runtime_config():
    cfg = RunConfig(
        model="tiny-hybrid", steps=40, pao=True, moment_dtype="bf16", offload_fraction=1.0, lr=2e-3, recompute="full"
    )
    rc = cfg.runtime_config()
    opt = rc.backend_cfg.optimizer
    assert rc.hf_path == "tiny-hybrid" and rc.device == "cpu" and rc.backend_cfg.recompute == "full"
    assert opt.pao and opt.exp_avg_dtype == opt.exp_avg_sq_dtype == "bf16" and opt.offload_fraction == 1.0
    assert opt.lr == 2e-3 and opt.min_lr == pytest.approx(2e-4) and opt.lr_decay_steps == 40
    assert cfg.resolved_param_dtype() == "bf16"  # PAO stores bf16 params (the runtime's auto rule)
    assert RunConfig().resolved_param_dtype() == "fp32"
    assert RunConfig(param_dtype="bf16").runtime_config().param_dtype == "bf16"


def test_run_config_round_trips_through_json_and_the_cli_flags():
    from mlite.cli import build_parser
    from mlite.cli.run import _config

    cfg = RunConfig(
        model="tiny-dense",
        steps=7,
        nproc=3,
        pao=True,
        moment_dtype="bf16",
        offload_fraction=0.5,
        param_offload=True,
        optimizer_offload=True,
        launcher="ray",
        seed=5,
        lr=1e-3,
        lr_warmup_steps=1,
        tokens_per_microbatch=256,
        num_microbatches=2,
        recompute="selective",
        param_dtype="bf16",
        threads=2,
        crash_at_step=3,
        out="/tmp/somewhere",
    )
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    args = build_parser().parse_args(["run", *cfg.cli_args(), "--out", cfg.out])
    assert _config(args) == cfg
    with pytest.raises(MliteError, match="unknown key"):
        RunConfig.from_dict({**cfg.to_dict(), "nprocs": 2})


def test_estimator_options_follow_the_run(tmp_path):
    """The estimate the view shows uses the run's own bytes per parameter: checked against the fsdp2 rule
    written out by hand (param + grad in the param dtype, remainder 2 + bf16 moments 2 + 2, all over d = nproc)."""
    from mlite.launch.memory_check import estimate_for, memory_rows
    from mlite.models import from_hf_config

    n = from_hf_config("tiny-moe").training_params
    plain = estimate_for(RunConfig(model="tiny-moe", nproc=2)).worst  # fp32 params: no master copy
    assert (plain.params, plain.grads, plain.optimizer) == (
        pytest.approx(n / 2 * 4),
        pytest.approx(n / 2 * 4),
        pytest.approx(n / 2 * 8),
    )
    cfg = RunConfig(model="tiny-moe", nproc=2, pao=True, moment_dtype="bf16", offload_fraction=1.0)
    rows = {r["item"]: r for r in memory_rows(cfg, None)}
    assert rows["parameters"]["estimated"] == pytest.approx(n / 2 * 2, abs=1)
    assert rows["optimizer state"]["estimated"] == pytest.approx(n / 2 * 6, abs=1)  # on the host, still counted
    assert rows["peak"]["measured"] is None and rows["peak"]["estimated"] > rows["parameters"]["estimated"]
    measured = {
        "ranks": [
            {"params": 10, "grads": 20, "optimizer": 30, "peak": 100},
            {"params": 11, "grads": 19, "optimizer": 31, "peak": 90},
        ],
        "peak": 100,
    }
    rows = {r["item"]: r for r in memory_rows(cfg, measured)}
    assert [rows[k]["measured"] for k in ("parameters", "gradients", "optimizer state", "peak")] == [11, 20, 31, 100]


def test_a_running_run_shows_no_peak_ratio_until_the_peak_is_measured():
    """While a run goes, memory.json holds the first step's per-rank figures (on a CPU the tally of parameters,
    gradients and optimizer state, not a peak): the peak row waits for the finished run's gathered peak, and the
    note says so, so measured / estimated is never two different quantities."""
    from mlite.launch.memory_check import memory_rows
    from widgets.run_monitor import peak_note

    cfg = RunConfig(model="tiny-moe", nproc=2)
    running = {"ranks": [{"params": 10, "grads": 20, "optimizer": 30, "peak": 60, "peak_kind": "cpu_tensor_peak"}]}
    rows = {r["item"]: r for r in memory_rows(cfg, running)}
    assert rows["parameters"]["measured"] == 10 and rows["parameters"]["ratio"] is not None
    assert rows["peak"]["measured"] is None and rows["peak"]["ratio"] is None
    assert "shown when the run ends" in peak_note(running)
    ended = dict(running, peak=500, peak_kind="cpu_tensor_peak")
    rows = {r["item"]: r for r in memory_rows(cfg, ended)}
    assert rows["peak"]["measured"] == 500 and rows["peak"]["ratio"] == pytest.approx(500 / rows["peak"]["estimated"])
    assert "MemTracker" in peak_note(ended)


# ---------------------------------------------------------------------------------------------- run directory
def test_run_directory_is_read_by_mlite_logs_bit_for_bit(tmp_path):
    from mlite.logs import read_log

    rd = RunDir(tmp_path / "run")
    rd.create(RunConfig().to_dict(), "torchrun -m mlite.launch.worker run", "mlite run ...")
    values = [(1, 0.1 + 0.2, 1e-300, 3.0), (2, 2.0 / 3.0, 123456.789e10, 2.5e-5), (3, math.pi, 5e-324, 0.0)]
    for step, loss, gn, lr in values:
        rd.log_step(
            step,
            {
                "train/loss": loss,
                "train/grad_norm": gn,
                "train/lr": lr,
                "perf/max_memory_allocated_gb": 0.5,
                "perf/cpu_memory_used_gb": 1.25,
            },
        )
    rd.append_log(
        '[mlite] worker 1 raised:\nTraceback (most recent call last):\n  File "w.py", line 1, in f\n'
        "RuntimeError: boom\n"
    )
    rd.lifecycle("status: failed (worker 1 exited with code 1: RuntimeError: boom)")
    assert rd.log.read_text().splitlines()[0] == LOG_HEADER
    for path in (rd.path, rd.log):  # the run directory (metrics from metrics.jsonl) and the console log alone
        run = read_log(path)
        assert run.format == "mlite" and run.num_steps == 3 and run.skipped_lines == 0
        for step, loss, gn, lr in values:
            row = run.wide.loc[step]
            assert (row["train/loss"], row["train/grad_norm"], row["train/lr"]) == (loss, gn, lr)
    kinds = {e.kind for e in read_log(rd.path).events}
    assert {"traceback", "exit_code"} <= kinds
    res = run_cli("logs", "check", str(rd.path), "--json")
    assert res.rc == 0 and res.json()["runs"][0]["format"] == "mlite"


def test_run_directory_refuses_to_mix_runs(tmp_path):
    rd = RunDir(tmp_path)
    rd.create({}, "cmd", "cli")
    with pytest.raises(MliteError, match="already holds a run"):
        RunDir(tmp_path).create({}, "cmd", "cli")
    rd.log_step(1, {"train/loss": 1.0})
    RunDir(tmp_path).create({}, "cmd2", "cli", overwrite=True)
    assert not rd.metrics_jsonl.exists() and rd.read_command() == "cmd2"


def test_handle_reads_metrics_with_a_half_written_line(tmp_path):
    rd = RunDir(tmp_path)
    rd.create(RunConfig(steps=5).to_dict(), "cmd", "cli")
    for s in (1, 2):
        rd.log_step(s, {"train/loss": 3.0 - s, "train/grad_norm": 1.0})
    rd.append(rd.metrics_jsonl, '{"step": 3, "data": {"train/lo')  # a worker in the middle of a write
    h = RunHandle.open(tmp_path)
    df = h.metrics()
    assert list(df.index) == [1, 2] and list(df["train/loss"]) == [2.0, 1.0]
    assert h.steps_done == 2 and h.progress == pytest.approx(0.4) and h.final_loss == 1.0


def test_handle_fails_a_run_whose_launcher_vanished(tmp_path):
    rd = RunDir(tmp_path)
    rd.create(RunConfig(steps=5).to_dict(), "cmd", "cli")
    rd.log_step(1, {"train/loss": 1.0})
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    rd.write_status(status="running", pid=os.getpid())
    assert RunHandle.open(tmp_path).status == "running"  # this process is alive
    rd.write_status(status="running", pid=gone.pid)
    h = RunHandle.open(tmp_path)
    assert h.status == "failed" and "launcher process died" in h.reason
    lines = rd.log.read_text().splitlines()
    assert lines[-1].startswith("[mlite] status: failed (the launcher process died")
    assert sum(ln.startswith("[mlite] status: failed") for ln in lines) == 1
    assert RunHandle.open(tmp_path).status == "failed"  # a second look does not write again
    assert sum(ln.startswith("[mlite] status: failed") for ln in rd.log.read_text().splitlines()) == 1


def test_handle_of_a_run_directory_without_status_file_uses_the_log(tmp_path):
    rd = RunDir(tmp_path)
    rd.append_log(
        f"{LOG_HEADER}\n[mlite] status: running\nstep:1 - train/loss:1.5\n"
        "[mlite] status: stopped (stop requested; stopped after step 1)\n"
    )
    h = RunHandle.open(tmp_path)
    assert (h.status, h.reason) == ("stopped", "stop requested; stopped after step 1")
    with pytest.raises(MliteError, match="not a run"):
        RunHandle.open(tmp_path / "nothing")


# ---------------------------------------------------------------------------------------------- failure reasons
def _error(rd: RunDir, rank: int, line: str, t: float) -> None:
    rd.write_json(rd.error_file(rank), {"rank": rank, "error": line, "traceback": "", "time": t})


def test_failure_reason_names_the_root_cause_from_real_torchrun_output(tmp_path):
    """Texts captured from torchrun 2.13 (a worker that raised; a worker killed with SIGKILL, after which its
    peer failed on the lost connection and left the only error record)."""
    rd = RunDir(tmp_path)
    raised = (LAUNCH_DATA / "torchrun_worker_raised.txt").read_text()
    killed = (LAUNCH_DATA / "torchrun_worker_sigkill.txt").read_text()
    _error(rd, 0, "RuntimeError: Connection closed by peer", 2.0)
    _error(rd, 1, "RuntimeError: crash_at_step=4", 1.0)
    assert (
        failure_reason(rd, 1, raised, launcher="torchrun")
        == "worker 1 exited with code 1: RuntimeError: crash_at_step=4"
    )
    rd.error_file(1).unlink()
    assert (
        failure_reason(rd, 1, killed, launcher="torchrun")
        == "worker 1 was killed by SIGKILL: killed from outside, e.g. by the host's OOM killer"
    )
    assert failure_reason(rd, 1, "", launcher="ray") == "worker 0 raised RuntimeError: Connection closed by peer"
    rd.error_file(0).unlink()
    assert (
        failure_reason(rd, 1, "worker 1 (Ray actor) failed: RayActorError: died", launcher="ray")
        == "worker 1 (Ray actor) failed: RayActorError: died"
    )
    assert failure_reason(rd, -9, "", launcher="torchrun") == "launcher killed by SIGKILL"


# ---------------------------------------------------------------------------------------------- start / CLI
def test_dry_run_gives_the_command_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    h = start(RunConfig(model="tiny-dense", nproc=3, out=str(out)), dry_run=True)
    assert h.status == "not_started" and h.wait() == "not_started" and h.stop() == "not_started"
    assert h.command.startswith("torchrun ") and "--nproc-per-node 3" in h.command
    assert h.command.endswith(f"-m mlite.launch.worker {out}")
    ray = start(RunConfig(launcher="ray", out=str(out)), dry_run=True)
    assert "mlite.launch.ray_launcher" in ray.command
    res = run_cli(
        "run", "--model", "tiny-moe", "--steps", "3", "--nproc", "2", "--device", "cpu", "--out", str(out), "--dry-run"
    )
    assert res.rc == 0 and res.out.strip() == h.command.replace("--nproc-per-node 3", "--nproc-per-node 2")
    assert not out.exists()


def test_cli_bad_input_is_one_line_exit_2(tmp_path):
    base = ["run", "--steps", "3", "--nproc", "2", "--device", "cpu", "--out", str(tmp_path / "r")]
    assert_one_line_error(
        run_cli(*base, "--model", "tiny-moe", "--moment-dtype", "bf16"), "exp_avg_dtype: bf16", "--pao"
    )
    assert_one_line_error(
        run_cli(*base, "--model", "tiny-moe", "--optimizer", "dist_opt", "--pao", "--no-distributed-optimizer"),
        "use_distributed_optimizer",
        "--no-distributed-optimizer",
    )
    assert_one_line_error(run_cli(*base, "--model", "no-such-model"), "no-such-model")
    assert_one_line_error(run_cli(*base, "--model", "tiny-moe", "--offload-fraction", "2"), "offload_fraction")
    assert_one_line_error(run_cli(*base, "--model", "tiny-moe", "--device", "cuda"), "cuda")
    old = tmp_path / "old"
    RunDir(old).create({}, "cmd", "cli")
    assert_one_line_error(
        run_cli("run", "--model", "tiny-moe", "--steps", "3", "--nproc", "2", "--device", "cpu", "--out", str(old)),
        "already holds a run",
        "--overwrite",
    )
    assert not (tmp_path / "r").exists()


def test_importing_the_launch_layer_loads_no_torch_and_no_ui():
    code = (
        "import sys, mlite.launch, mlite.launch.memory_check, mlite.launch.supervisor, mlite.cli.run; "
        "bad = [m for m in ('torch', 'ipywidgets', 'IPython', 'matplotlib.pyplot', 'pandas', 'ray') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_run_view_shows_a_finished_run_through_its_presenter():
    """The run view attached to the real crash sample: the presenter (widgets/run_monitor.py) reads its files, the
    status line says failed with the worker's reason, the curves are a PNG, the memory table has the four items."""
    from widgets.run_monitor import RunMonitor, fmt_bytes
    from widgets.run_view import RunView

    run = RunHandle.open(REPO / "data" / "logs" / "mlite_tiny_moe_crash")
    snap = RunMonitor(run).poll()
    assert (snap["status"], snap["step"], snap["total"]) == ("failed", 12, 40) and "crash_at_step=13" in snap["reason"]
    view = RunView()
    view.attach(run)
    view.wait(timeout=30)
    assert (
        'class="mlite-run-state" style="color:#b00020' in view._status.value
        and "crash_at_step=13" in view._status.value
    )
    assert view._progress.value == 12 and view._progress.bar_style == "danger"
    assert view._plot.value[:8] == b"\x89PNG\r\n\x1a\n"
    for item in ("parameters", "gradients", "optimizer state", "peak"):
        assert f'<td style="text-align:left;padding:1px 10px 1px 0">{item}</td>' in view._memory.value
    assert fmt_bytes(None) == "—" and fmt_bytes(3 * 2**30) == "3.00 GiB" and fmt_bytes(1536) == "1.5 KiB"


def test_run_view_draws_records_that_arrived_inside_the_draw_interval(monkeypatch):
    """A record that arrives less than DRAW_S after the last draw is not dropped: the next poll draws it even though
    the metrics file did not grow again (the plot used to lag one update behind until another record came)."""
    import widgets.run_view as rv

    run = RunHandle.open(REPO / "data" / "logs" / "mlite_tiny_moe_fsdp2")
    growth = iter([True, False, False])

    class Monitor(rv.RunMonitor):
        def poll(self):
            return {**super().poll(), "status": "running", "changed": next(growth)}

    view = rv.RunView()
    view.run, view.monitor = run, Monitor(run)
    drawn = []
    monkeypatch.setattr(view, "_redraw", lambda mon, r: (drawn.append(1), rv.RunView._redraw(view, mon, r)))
    clock = iter([100.0, 100.0 + rv.DRAW_S, 200.0])
    monkeypatch.setattr(rv.time, "monotonic", lambda: next(clock))
    last = view._update(100.0 - rv.DRAW_S / 2)  # new record, inside the interval: no draw yet
    assert drawn == [] and view._stale
    last = view._update(last)  # nothing new on disk, interval passed: the waiting record is drawn
    assert drawn == [1] and not view._stale
    view._update(last)  # nothing new, nothing waiting: no draw
    assert drawn == [1]


def test_flat_config_json_of_older_runs_loads_into_the_composed_config():
    """Run directories written before RunConfig composed ``parallel`` and ``training`` (flat keys, some fields not
    there yet) load; their values land in the nested configs and a new run writes the same flat keys back."""
    from mlite.paths import REPO_ROOT

    paths = sorted((REPO_ROOT / "data" / "logs").glob("mlite_tiny_moe_*/config.json"))
    assert len(paths) >= 4
    for p in paths:
        d = json.loads(p.read_text())
        cfg = RunConfig.from_dict(d)
        assert cfg.training.optimizer == d["optimizer"] and cfg.parallel.tp == d.get("tp", 1)
        assert cfg.training.use_precision_aware_optimizer == d["pao"]
        assert cfg.training.exp_avg_dtype == cfg.training.exp_avg_sq_dtype == d["moment_dtype"]
        assert cfg.training.offload_fraction == d["offload_fraction"] and cfg.training.num_microbatches == 1
        flat = cfg.to_dict()
        assert json.loads(json.dumps({k: flat[k] for k in d})) == d, p  # the keys a run directory has keep their values
        assert RunConfig.from_dict(json.loads(json.dumps(flat))) == cfg
    nested = RunConfig.from_dict({"training": cfg.training.to_dict(), "parallel": cfg.parallel.to_dict()})
    assert (nested.training, nested.parallel) == (cfg.training, cfg.parallel)
