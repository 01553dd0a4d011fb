"""The run directory: one folder per debug run, in the format :mod:`mlite.logs` reads (``format = "mlite"``).

=================  ==========================================================================================
``command.txt``    the launcher command that runs the workers, then ``# mlite run ...`` (the same run from the CLI)
``config.json``    the :class:`~mlite.launch.config.RunConfig` (``RunConfig.from_dict`` reads it back)
``train.log``      ``# mlite-lab run log``, then ``[mlite] ...`` lifecycle lines (``status: running``, ``command:``,
                   ``world:``, ``stop requested ...``, ``status: completed|stopped|failed (reason)``), one verl
                   console line per step (``step:N - train/loss:... - train/grad_norm:... - train/lr:... -
                   perf/max_memory_allocated_gb:... - perf/cpu_memory_used_gb:... - ...``, values as ``repr``) and
                   the traceback of a worker that raised
``metrics.jsonl``  verl's file-logger lines ``{"step": N, "data": {...}}`` (the same values)
``status.json``    ``{"status", "reason", "pid", "launcher", "started_at", "ended_at", "exit_code", "steps"}``,
                   replaced atomically by the launcher process (start and end)
``memory.json``    per-rank measured memory (parameter / gradient / optimizer bytes, peak) after the first step
``result.json``    written by rank 0 when the training loop ends: ``{"outcome": "completed"|"stopped", "steps"}``
``error_rankR.json`` written by a worker that raised: exception line, traceback, time
``STOP``           a stop request (the workers finish the step they are in, then exit cleanly)
``console.log``    stdout / stderr of the launcher and the workers (warnings, Ray's chatter)
=================  ==========================================================================================

Every write is one ``os.write`` on a file opened with ``O_APPEND`` (lines of several processes never interleave
mid-line) and goes to the kernel right away, so a crash loses nothing already logged.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..errors import MliteError

LOG_HEADER = "# mlite-lab run log"
"""First line of ``train.log`` (what :mod:`mlite.logs.detect` sniffs)."""

STATUSES = ("running", "completed", "stopped", "failed")
"""Values of ``RunHandle.status``."""

FINAL = ("completed", "stopped", "failed")
"""Statuses of a finished run."""

RUN_FILES = ("command.txt", "config.json", "train.log", "metrics.jsonl", "status.json", "memory.json", "result.json",
             "STOP", "console.log")
"""Files the kit writes into a run directory (``error_rank*.json`` besides)."""


def fmt_value(v) -> str:
    """A metric value as verl prints it: ``repr`` of the float (round-trips bit for bit), ints as ints."""
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    return repr(float(v))


def metric_line(step: int, data: dict) -> str:
    """``step:N - key:value - ...`` (verl's console logger)."""
    return " - ".join([f"step:{step}"] + [f"{k}:{fmt_value(v)}" for k, v in data.items()])


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class RunDir:
    """Paths and readers/writers of one run directory (see the module docstring)."""

    def __init__(self, path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ------------------------------------------------------------------ paths
    @property
    def log(self) -> Path:
        return self.path / "train.log"

    @property
    def metrics_jsonl(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def config_file(self) -> Path:
        return self.path / "config.json"

    @property
    def command_file(self) -> Path:
        return self.path / "command.txt"

    @property
    def status_file(self) -> Path:
        return self.path / "status.json"

    @property
    def memory_file(self) -> Path:
        return self.path / "memory.json"

    @property
    def result_file(self) -> Path:
        return self.path / "result.json"

    @property
    def stop_file(self) -> Path:
        return self.path / "STOP"

    @property
    def console(self) -> Path:
        return self.path / "console.log"

    def error_file(self, rank: int) -> Path:
        return self.path / f"error_rank{rank}.json"

    # ------------------------------------------------------------------ create
    def create(self, config_dict: dict, command: str, cli: str, *, overwrite: bool = False) -> None:
        """Make the folder and write ``config.json``, ``command.txt`` and the head of ``train.log``."""
        if self.path.exists() and not self.path.is_dir():
            raise MliteError(f"out: '{self.path}' is a file; give a folder for the run")
        taken = [n for n in RUN_FILES if (self.path / n).exists()]
        taken += [p.name for p in self.path.glob("error_rank*.json")]
        if taken and not overwrite:
            raise MliteError(f"out: '{self.path}' already holds a run ({taken[0]}); give a new folder "
                             "(or --overwrite to replace it)")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            for n in taken:
                (self.path / n).unlink()
        except OSError as e:
            raise MliteError(f"out: cannot write the run folder '{self.path}': {e.strerror or e}") from None
        _atomic_write(self.config_file, json.dumps(config_dict, indent=2) + "\n")
        _atomic_write(self.command_file, f"{command}\n# {cli}\n")
        self.append_log(f"{LOG_HEADER}\n[mlite] status: running\n[mlite] command: {command}\n")

    # ------------------------------------------------------------------ writers
    def append(self, path: Path, text: str) -> None:
        """Append ``text`` with one ``write`` (O_APPEND)."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        finally:
            os.close(fd)

    def append_log(self, text: str) -> None:
        self.append(self.log, text if text.endswith("\n") else text + "\n")

    def lifecycle(self, message: str) -> None:
        """``[mlite] message`` in ``train.log``."""
        self.append_log(f"[mlite] {message}")

    def log_step(self, step: int, data: dict) -> None:
        """One step's metrics: the console line in ``train.log`` and the record in ``metrics.jsonl``."""
        self.append(self.metrics_jsonl, json.dumps({"step": step, "data": data}) + "\n")
        self.append_log(metric_line(step, data))

    def write_status(self, **fields) -> dict:
        """Merge ``fields`` into ``status.json`` (atomic replace); returns the new document."""
        doc = self.read_status() or {}
        doc.update(fields)
        _atomic_write(self.status_file, json.dumps(doc, indent=2) + "\n")
        return doc

    def write_json(self, path: Path, doc) -> None:
        _atomic_write(path, json.dumps(doc, indent=2) + "\n")

    def write_error(self, rank: int, exc_line: str, tb: str) -> None:
        self.write_json(self.error_file(rank), {"rank": rank, "error": exc_line, "traceback": tb, "time": time.time()})

    def request_stop(self) -> None:
        """Ask the workers to stop after the step they are in."""
        self.stop_file.write_text(now_iso() + "\n")

    def stop_requested(self) -> bool:
        return self.stop_file.exists()

    # ------------------------------------------------------------------ readers
    def read_status(self) -> dict | None:
        return _read_json(self.status_file)

    def read_result(self) -> dict | None:
        return _read_json(self.result_file)

    def read_memory(self) -> dict | None:
        return _read_json(self.memory_file)

    def read_config_dict(self) -> dict | None:
        return _read_json(self.config_file)

    def read_config(self):
        from .config import RunConfig

        d = self.read_config_dict()
        if d is None:
            raise MliteError(f"run directory '{self.path}' has no readable config.json")
        return RunConfig.from_dict(d)

    def read_command(self) -> str | None:
        try:
            return self.command_file.read_text().splitlines()[0]
        except (OSError, IndexError):
            return None

    def read_errors(self) -> list[dict]:
        """Error records of the workers that raised, earliest first."""
        out = [d for p in sorted(self.path.glob("error_rank*.json")) if (d := _read_json(p)) is not None]
        return sorted(out, key=lambda d: d.get("time", 0))

    def read_metrics(self) -> list[tuple[int, dict]]:
        """``(step, data)`` records of ``metrics.jsonl``; a partly written last line is left out."""
        try:
            text = self.metrics_jsonl.read_text(errors="replace")
        except OSError:
            return []
        out = []
        for ln in text.splitlines():
            try:
                rec = json.loads(ln)
                out.append((int(rec["step"]), dict(rec["data"])))
            except (ValueError, KeyError, TypeError):
                continue
        return out

    def log_status_line(self) -> tuple[str, str] | None:
        """``(status, reason)`` of the last ``[mlite] status:`` line of ``train.log`` (runs without status.json)."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return None
        for ln in reversed(lines):
            if ln.startswith("[mlite] status: "):
                rest = ln[len("[mlite] status: "):].strip()
                status, _, why = rest.partition(" ")
                return status, why.strip().strip("()")
        return None

    def tail(self, n: int = 20, path: Path | None = None) -> str:
        """Last ``n`` lines of ``train.log`` (or ``path``)."""
        p = path or self.log
        try:
            with open(p, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 256 * 1024))
                data = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(data.splitlines()[-n:])


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
