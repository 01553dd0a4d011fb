"""``RunHandle``: a debug run seen from the caller, through its run directory only (files are polled, nothing is
shared with the worker processes).

* ``status``: ``running``, ``completed``, ``stopped`` or ``failed`` (``not_started`` for a dry run); a launcher
  process that vanished without a final status makes the run ``failed`` (the handle then writes the final line).
* ``reason``: why it failed / stopped (one line), ``metrics()`` (DataFrame, step x metric, from ``metrics.jsonl``),
  ``steps_done``, ``progress``, ``log_tail(n)``, ``memory()`` (``memory.json``), ``summary()`` (the ``mlite run
  --json`` document).
* ``stop()`` writes the stop request; the workers finish the step they are in, flush, and exit cleanly (status
  ``stopped``). If they do not within ``timeout`` the launcher process is terminated (still ``stopped``).
* ``wait()`` blocks (polling) until the run has ended and its launcher process exited.
* ``command``: the worker command (also in ``command.txt``); a dry run (``start(cfg, dry_run=True)``) only has this.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from ..errors import MliteError
from ..rundir import FAILED, FINAL, NOT_STARTED, RUNNING, SUMMARY_KEYS
from ..units import GIB
from .rundir import RunDir, now_iso


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class RunHandle:
    """A started (or finished, or dry-run) debug run; see the module docstring."""

    def __init__(self, run_dir, *, config=None, command: str | None = None, proc=None, started: bool = True):
        self.rundir = RunDir(run_dir)
        """The run directory's readers and writers."""
        self.config = config
        """The :class:`~mlite.launch.config.RunConfig` (read from ``config.json`` when attached)."""
        self.command = command if command is not None else self.rundir.read_command()
        """The worker command (torchrun or the Ray driver)."""
        self.started = started
        """False for a dry run."""
        self._proc = proc
        self._last_status = NOT_STARTED if not started else RUNNING

    @classmethod
    def open(cls, run_dir) -> RunHandle:
        """Attach to an existing run directory (running or finished)."""
        rd = RunDir(run_dir)
        if not rd.log.exists() and not rd.metrics_jsonl.exists():
            raise MliteError(f"run directory '{run_dir}' has no train.log or metrics.jsonl: not a run of the kit")
        cfg = None
        if rd.config_file.exists():
            try:
                cfg = rd.read_config()
            except MliteError:
                cfg = None
        return cls(run_dir, config=cfg)

    # ------------------------------------------------------------------ state
    @property
    def run_dir(self) -> Path:
        return self.rundir.path

    @property
    def log(self) -> Path:
        """``train.log``."""
        return self.rundir.log

    @property
    def metrics_jsonl(self) -> Path:
        return self.rundir.metrics_jsonl

    def _launcher_pid(self, doc: dict | None) -> int | None:
        if self._proc is not None:
            return self._proc.pid
        return (doc or {}).get("pid")

    def _launcher_alive(self, doc: dict | None) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        pid = (doc or {}).get("pid")
        if pid is None:  # the launcher has not written its pid yet (just started)
            return True
        return _pid_alive(pid)

    def _status_doc(self) -> dict:
        if not self.started:
            return {"status": NOT_STARTED, "reason": None}
        doc = self.rundir.read_status()
        if doc is None:
            line = self.rundir.log_status_line()
            if line is None:
                return {
                    "status": RUNNING if self._proc is not None and self._proc.poll() is None else FAILED,
                    "reason": None
                    if self._proc is not None and self._proc.poll() is None
                    else "no status.json and no status line in train.log",
                }
            return {"status": line[0], "reason": line[1] or None}
        if doc.get("status") in FINAL:
            return doc
        if self._launcher_alive(doc):
            return doc
        doc = self.rundir.read_status() or doc  # it may have finalized while we looked
        if doc.get("status") in FINAL:
            return doc
        return self._finalize_dead(doc)

    def _finalize_dead(self, doc: dict) -> dict:
        """The launcher process is gone without a final status: end the run as failed, once."""
        marker = self.run_dir / ".finalized_by_handle"
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
        except FileExistsError:
            time.sleep(0.2)
            return self.rundir.read_status() or doc
        pid = self._launcher_pid(doc)
        if pid:
            try:
                os.killpg(pid, signal.SIGKILL)  # orphaned workers of the dead launcher
            except (ProcessLookupError, PermissionError):
                pass
        code = self._proc.returncode if self._proc is not None else None
        reason = "the launcher process died without a final status"
        if code is not None:
            reason += f" (exit code {code})"
        self.rundir.log_final_status(FAILED, reason)
        recs = self.rundir.read_metrics()
        return self.rundir.write_status(
            status=FAILED, reason=reason, ended_at=now_iso(), exit_code=code, steps=recs[-1][0] if recs else 0
        )

    @property
    def pid(self) -> int | None:
        """Process id of the launcher process (the workers are its descendants)."""
        return self._launcher_pid(self.rundir.read_status())

    @property
    def status(self) -> str:
        """``running``, ``completed``, ``stopped`` or ``failed`` (``not_started`` for a dry run)."""
        self._last_status = self._status_doc().get("status", RUNNING)
        return self._last_status

    @property
    def reason(self) -> str | None:
        """Why the run failed or stopped (one line); None while running or when it completed."""
        return self._status_doc().get("reason") or None

    @property
    def done(self) -> bool:
        return self.status in FINAL

    @property
    def total_steps(self) -> int | None:
        return self.config.steps if self.config is not None else None

    @property
    def steps_done(self) -> int:
        """Last step logged."""
        recs = self.rundir.read_metrics()
        return recs[-1][0] if recs else 0

    @property
    def progress(self) -> float:
        """``steps_done / steps`` in [0, 1] (0 without a config)."""
        total = self.total_steps
        return min(1.0, self.steps_done / total) if total else 0.0

    # ------------------------------------------------------------------ data
    def metrics(self):
        """Per-step metrics as a pandas DataFrame (index ``step``, one column per metric), from ``metrics.jsonl``."""
        import pandas as pd

        recs = self.rundir.read_metrics()
        df = pd.DataFrame([d for _, d in recs], index=pd.Index([s for s, _ in recs], name="step"))
        return df.sort_index()

    def log_tail(self, n: int = 20) -> str:
        """The last ``n`` lines of ``train.log``."""
        return self.rundir.tail(n)

    def memory(self) -> dict | None:
        """``memory.json``: measured bytes per rank (params, grads, optimizer, peak) or None before step 1."""
        return self.rundir.read_memory()

    @property
    def peak_memory_bytes(self) -> int | None:
        """Largest measured peak over the ranks (``memory.json``), else from ``perf/max_memory_allocated_gb``."""
        mem = self.memory()
        if mem:
            peaks = [r.get("peak") for r in mem.get("ranks", []) if r.get("peak") is not None]
            if mem.get("peak") is not None or peaks:
                return int(max([mem.get("peak") or 0] + peaks))
        vals = [
            d["perf/max_memory_allocated_gb"]
            for _, d in self.rundir.read_metrics()
            if "perf/max_memory_allocated_gb" in d
        ]
        return round(max(vals) * GIB) if vals else None

    @property
    def final_loss(self) -> float | None:
        recs = self.rundir.read_metrics()
        return float(recs[-1][1]["train/loss"]) if recs and "train/loss" in recs[-1][1] else None

    def summary(self) -> dict:
        """The ``mlite run --json`` document."""
        doc = self._status_doc()
        summary = {
            "status": doc.get("status"),
            "steps": self.steps_done,
            "final_loss": self.final_loss,
            "log": str(self.log),
            "metrics_jsonl": str(self.metrics_jsonl),
            "peak_memory_bytes": self.peak_memory_bytes,
            "reason": doc.get("reason") or None,
            "run_dir": str(self.run_dir),
        }
        return {k: summary[k] for k in SUMMARY_KEYS}

    # ------------------------------------------------------------------ control
    def wait(self, timeout: float | None = None, poll: float = 0.5) -> str:
        """Block until the run ended (and its launcher process exited); returns the final status.
        Raises ``TimeoutError`` after ``timeout`` seconds (the run keeps going)."""
        if not self.started:
            return NOT_STARTED
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.status not in FINAL:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"run {self.run_dir.name} still running after {timeout:.0f} s (step {self.steps_done})"
                )
            time.sleep(poll)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:  # the supervisor outlives its workers; status comes from the files
                pass
        return self._last_status

    def stop(self, wait: bool = True, timeout: float = 120.0) -> str:
        """Ask the workers to stop at the next step boundary; with ``wait``, block until the run ended (terminating
        the launcher after ``timeout`` seconds). Returns the status."""
        if not self.started:
            return NOT_STARTED
        if self.status in FINAL:
            return self._last_status
        self.rundir.request_stop()
        if not wait:
            return self.status
        try:
            return self.wait(timeout=timeout)
        except TimeoutError:
            return self.kill()

    def kill(self, grace: float = 20.0) -> str:
        """Terminate the launcher process (SIGTERM: it ends the workers and finalizes), SIGKILL the whole process
        group after ``grace`` seconds. Returns the final status."""
        from .supervisor import wait_pid_gone

        pid = self._launcher_pid(self.rundir.read_status())
        if pid and _pid_alive(pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            if not wait_pid_gone(pid, grace):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        return self.status

    def __repr__(self) -> str:
        total = self.total_steps
        return (
            f"RunHandle('{self.run_dir}', status={self.status!r}, step={self.steps_done}"
            f"{'/' + str(total) if total else ''})"
        )
