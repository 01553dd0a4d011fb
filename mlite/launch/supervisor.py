"""The launcher process: what runs between :func:`mlite.launch.start` and the workers, and ends every run with a
final status.

``start`` spawns ``python -m mlite.launch.torchrun RUN_DIR`` or ``python -m mlite.launch.ray_launcher RUN_DIR`` in a
new session (so a Ctrl-C in the notebook or terminal does not reach it), with stdout/stderr going to
``console.log``. That process starts the workers, waits for them and calls :func:`finalize`, which appends
``[mlite] status: completed|stopped|failed (reason)`` to ``train.log`` and writes ``status.json``. Nothing here
imports torch, so the launcher process stays small.

SIGTERM to the launcher process (``RunHandle.stop`` after its grace period, ``RunHandle.kill``) ends the workers and
still finalizes: ``stopped`` when a stop had been requested, else ``failed (terminated)``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..paths import REPO_ROOT
from ..rundir import COMPLETED, FAILED, OUTCOMES, STOPPED
from .rundir import RunDir, now_iso

_ROOT_CAUSE_RE = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")


def worker_env(threads: int) -> dict:
    """Environment of the worker processes: this interpreter's packages, one OpenMP pool of ``threads``; paths
    absolute (the workers start in the run directory, not in the caller's)."""
    env = dict(os.environ)
    paths = [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + paths)
    for name in ("MLITE_DATA", "MLITE_RUNS", "MLITE_RESULTS"):  # the workers start in the run directory
        if env.get(name):
            env[name] = str(Path(env[name]).expanduser().resolve())
    env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning,ignore::FutureWarning")
    return env


def signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def failure_reason(rd: RunDir, exit_code: int | None, launcher_output: str, *, launcher: str) -> str:
    """One line saying why the run failed.

    torchrun names the first worker it saw fail ("Root Cause"): its own error record when it left one, else its
    exit code or signal (a worker killed by SIGKILL leaves no record, while its peers then fail on the lost
    connection and do leave records: those are consequences, not the cause). Without torchrun's summary (Ray, or
    a launcher that died), the earliest error record, then whatever the launcher said.
    """
    errors = {e.get("rank"): e for e in rd.read_errors()}
    first = min(errors.values(), key=lambda e: e.get("time", 0)) if errors else None
    if launcher == "ray":
        if first is not None:
            return f"worker {first.get('rank', '?')} raised {first.get('error', 'an error')}"
        return launcher_output.strip() or f"Ray launcher exited with code {exit_code}"
    at = launcher_output.rfind("Root Cause")
    m = _ROOT_CAUSE_RE.search(launcher_output, at) if at >= 0 else None
    if m:
        rank, code = int(m.group(1)), int(m.group(2))
        if rank in errors:
            return f"worker {rank} exited with code {code}: {errors[rank].get('error', 'an error')}"
        if code < 0:
            name = signal_name(-code)
            hint = ": killed from outside, e.g. by the host's OOM killer" if name == "SIGKILL" else ""
            return f"worker {rank} was killed by {name}{hint}"
        return f"worker {rank} exited with code {code}"
    if first is not None:
        return f"worker {first.get('rank', '?')} exited with code 1: {first.get('error', 'an error')}"
    last = next((ln.strip() for ln in reversed(launcher_output.splitlines()) if ln.strip()), "")
    if exit_code is not None and exit_code < 0:
        return f"launcher killed by {signal_name(-exit_code)}"
    return f"launcher exited with code {exit_code}" + (f": {last[:200]}" if last else "")


def last_step(rd: RunDir) -> int:
    recs = rd.read_metrics()
    return recs[-1][0] if recs else 0


def finalize(
    rd: RunDir,
    *,
    exit_code: int | None,
    launcher_output: str = "",
    terminated: bool = False,
    launcher: str = "torchrun",
) -> dict:
    """Decide the final status from what the workers left, log it and write ``status.json``."""
    result = rd.read_result()
    if exit_code == 0 and result and result.get("outcome") in OUTCOMES:
        status = result["outcome"]
        reason = "" if status == COMPLETED else f"stop requested; stopped after step {result.get('steps')}"
    elif terminated and rd.stop_requested():
        status, reason = STOPPED, "stop requested; the workers did not stop in time and were terminated"
    elif terminated:
        status, reason = FAILED, "terminated: the launcher process received SIGTERM"
    else:
        status, reason = FAILED, failure_reason(rd, exit_code, launcher_output, launcher=launcher)
    rd.log_final_status(status, reason)
    return rd.write_status(
        status=status, reason=reason or None, ended_at=now_iso(), exit_code=exit_code, steps=last_step(rd)
    )


class Terminator:
    """Turns SIGTERM / SIGHUP into a flag plus a callback (forward the signal to the workers)."""

    def __init__(self, on_signal=None):
        self.terminated = False
        self.on_signal = on_signal
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._handle)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _handle(self, signum, frame):
        self.terminated = True
        if self.on_signal is not None:
            self.on_signal(signum)


def supervise_subprocess(rd: RunDir, argv: list[str], env: dict, *, launcher: str) -> int:
    """Run ``argv`` (torchrun), wait, finalize; returns 0 for completed/stopped, 1 otherwise."""
    rd.write_status(pid=os.getpid())
    with open(rd.console, "ab") as out:
        child = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=str(rd.path)
        )

    def forward(signum):
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    term = Terminator(forward)
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries wait() itself
            continue
    # torchrun's summary of a failed worker is at the end of the console file
    output = rd.tail(80, rd.console)
    doc = finalize(rd, exit_code=code, launcher_output=output, terminated=term.terminated, launcher=launcher)
    return 0 if doc["status"] in OUTCOMES else 1


def wait_pid_gone(pid: int, timeout: float) -> bool:
    """Wait until process ``pid`` has exited (or is a zombie); True when it did within ``timeout``."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def main_usage(name: str) -> int:
    print(f"usage: python -m mlite.launch.{name} RUN_DIR", file=sys.stderr)
    return 2
