"""The run directory's writer and readers: one folder per debug run, in the format of :mod:`mlite.rundir` (file names,
log header, status lines, statuses, JSON keys are defined there; :mod:`mlite.logs` reads the same folders).

Every write is one ``os.write`` on a file opened with ``O_APPEND`` (lines of several processes never interleave
mid-line) and goes to the kernel right away, so a crash loses nothing already logged. ``status.json`` and the other
JSON documents are replaced atomically.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .. import rundir as schema
from ..errors import MliteError
from ..rundir import LOG_HEADER, RUN_FILES, STATUSES, parse_status_line, status_line


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
        return self.path / schema.LOG_FILE

    @property
    def metrics_jsonl(self) -> Path:
        return self.path / schema.METRICS_FILE

    @property
    def config_file(self) -> Path:
        return self.path / schema.CONFIG_FILE

    @property
    def command_file(self) -> Path:
        return self.path / schema.COMMAND_FILE

    @property
    def status_file(self) -> Path:
        return self.path / schema.STATUS_FILE

    @property
    def memory_file(self) -> Path:
        return self.path / schema.MEMORY_FILE

    @property
    def result_file(self) -> Path:
        return self.path / schema.RESULT_FILE

    @property
    def stop_file(self) -> Path:
        return self.path / schema.STOP_FILE

    @property
    def console(self) -> Path:
        return self.path / schema.CONSOLE_FILE

    def error_file(self, rank: int) -> Path:
        return self.path / schema.error_file_name(rank)

    # ------------------------------------------------------------------ create
    def check_new(self, *, overwrite: bool = False) -> list[str]:
        """Raise :class:`MliteError` when the run cannot go here (a file, an older run without ``overwrite``, a
        folder that cannot be made); writes nothing. Returns the run files an overwrite would replace."""
        if self.path.exists() and not self.path.is_dir():
            raise MliteError(f"out: '{self.path}' is a file; give a folder for the run")
        taken = [n for n in RUN_FILES if (self.path / n).exists()]
        taken += [p.name for p in self.path.glob(schema.ERROR_GLOB)]
        if taken and not overwrite:
            raise MliteError(
                f"out: '{self.path}' already holds a run ({taken[0]}); give a new folder (or --overwrite to replace it)"
            )
        parent = self.path
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise MliteError(f"out: cannot make '{self.path}': '{parent}' is a file; give a folder for the run")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise MliteError(f"out: cannot write under '{parent}' (permission denied); give a writable folder")
        return taken

    def create(self, config_dict: dict, command: str, cli: str, *, overwrite: bool = False) -> None:
        """Make the folder and write ``config.json``, ``command.txt`` and the head of ``train.log``."""
        taken = self.check_new(overwrite=overwrite)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            for n in taken:
                (self.path / n).unlink()
        except OSError as e:
            raise MliteError(f"out: cannot write the run folder '{self.path}': {e.strerror or e}") from None
        _atomic_write(self.config_file, json.dumps(config_dict, indent=2) + "\n")
        _atomic_write(self.command_file, f"{command}\n# {cli}\n")
        self.append_log(f"{LOG_HEADER}\n{status_line(schema.RUNNING)}\n{schema.LIFECYCLE_PREFIX}command: {command}\n")

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
        self.append_log(schema.LIFECYCLE_PREFIX + message)

    def log_final_status(self, status: str, reason: str | None = None) -> None:
        """The ``[mlite] status: <status> (<reason>)`` line that ends a run's ``train.log``."""
        self.append_log(status_line(status, reason))

    def log_step(self, step: int, data: dict) -> None:
        """One step's metrics: the console line in ``train.log`` and the record in ``metrics.jsonl``."""
        self.append(self.metrics_jsonl, json.dumps(dict(zip(schema.METRICS_KEYS, (step, data)))) + "\n")
        self.append_log(metric_line(step, data))

    def write_status(self, **fields) -> dict:
        """Merge ``fields`` (:data:`mlite.rundir.STATUS_KEYS`) into ``status.json`` (atomic replace); returns the
        new document."""
        unknown = sorted(set(fields) - set(schema.STATUS_KEYS))
        if unknown:
            raise ValueError(f"status.json: unknown key(s) {', '.join(unknown)}")
        if "status" in fields and fields["status"] not in STATUSES:
            raise ValueError(f"status.json: status {fields['status']!r} is not one of {', '.join(STATUSES)}")
        doc = self.read_status() or {}
        doc.update(fields)
        _atomic_write(self.status_file, json.dumps(doc, indent=2) + "\n")
        return doc

    def write_result(self, outcome: str, steps: int) -> None:
        """``result.json``: how the training loop ended (rank 0)."""
        if outcome not in schema.OUTCOMES:
            raise ValueError(f"result.json: outcome {outcome!r} is not one of {', '.join(schema.OUTCOMES)}")
        self.write_json(self.result_file, dict(zip(schema.RESULT_KEYS, (outcome, steps))))

    def write_json(self, path: Path, doc) -> None:
        _atomic_write(path, json.dumps(doc, indent=2) + "\n")

    def write_error(self, rank: int, exc_line: str, tb: str) -> None:
        self.write_json(self.error_file(rank), dict(zip(schema.ERROR_KEYS, (rank, exc_line, tb, time.time()))))

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
        out = [d for p in sorted(self.path.glob(schema.ERROR_GLOB)) if (d := _read_json(p)) is not None]
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
            parsed = parse_status_line(ln)
            if parsed is not None:
                return parsed
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
