"""The run-directory schema: file names, the log header, lifecycle lines, statuses and JSON keys of a debug run.

One folder per run (``mlite run``, :func:`mlite.launch.start`). The writer (:mod:`mlite.launch.rundir`), the reader
(:mod:`mlite.logs.input.detect`) and the run view (``widgets/run_view.py``) all take the format from here, so it is
defined once. Standard library only: importing it costs nothing.

=====================  ===================================================================================
``command.txt``        the launcher command that runs the workers, then ``# mlite run ...`` (the same run)
``config.json``        the ``RunConfig`` (``RunConfig.from_dict`` reads it back)
``train.log``          :data:`LOG_HEADER`, then ``[mlite] ...`` lifecycle lines (:func:`status_line` and others),
                       one verl console line per step (``step:N - key:value - ...``) and worker tracebacks
``metrics.jsonl``      verl's file-logger records :data:`METRICS_KEYS` ``{"step": N, "data": {...}}``
``status.json``        :data:`STATUS_KEYS`, replaced atomically by the launcher process (start and end)
``memory.json``        per-rank measured memory after the first step
``result.json``        :data:`RESULT_KEYS`, written by rank 0 when the training loop ends
``error_rankR.json``   :data:`ERROR_KEYS`, written by a worker that raised
``STOP``               a stop request (the workers finish the step they are in, then exit cleanly)
``console.log``        stdout / stderr of the launcher and the workers
=====================  ===================================================================================
"""

from __future__ import annotations

from pathlib import Path

# ---------------------------------------------------------------------- files
COMMAND_FILE = "command.txt"
CONFIG_FILE = "config.json"
LOG_FILE = "train.log"
METRICS_FILE = "metrics.jsonl"
STATUS_FILE = "status.json"
MEMORY_FILE = "memory.json"
RESULT_FILE = "result.json"
STOP_FILE = "STOP"
CONSOLE_FILE = "console.log"
ERROR_GLOB = "error_rank*.json"
"""The per-rank error records (:func:`error_file_name`)."""

RUN_FILES = (
    COMMAND_FILE,
    CONFIG_FILE,
    LOG_FILE,
    METRICS_FILE,
    STATUS_FILE,
    MEMORY_FILE,
    RESULT_FILE,
    STOP_FILE,
    CONSOLE_FILE,
)
"""Files the kit writes into a run directory (the ``error_rank*.json`` records besides)."""

METRIC_SOURCES = (METRICS_FILE, LOG_FILE)
"""Files that make a folder a run directory, in the order a reader takes metrics from them."""


def error_file_name(rank: int) -> str:
    """``error_rankR.json``."""
    return f"error_rank{rank}.json"


# ---------------------------------------------------------------------- train.log
LOG_HEADER = "# mlite-lab run log"
"""First line of ``train.log`` (what a reader sniffs)."""

LIFECYCLE_PREFIX = "[mlite] "
"""Start of every lifecycle line of ``train.log`` (status, command, world, stop, worker errors)."""

STATUS_PREFIX = LIFECYCLE_PREFIX + "status: "
"""Start of a status line: ``[mlite] status: failed (reason)``."""

# ---------------------------------------------------------------------- statuses
RUNNING = "running"
COMPLETED = "completed"
STOPPED = "stopped"
FAILED = "failed"
NOT_STARTED = "not_started"
"""The status of a dry run's handle (nothing was written)."""

STATUSES = (RUNNING, COMPLETED, STOPPED, FAILED)
"""Values of ``status`` in ``status.json`` and in the status lines of ``train.log``."""

FINAL = (COMPLETED, STOPPED, FAILED)
"""Statuses of a finished run."""

OUTCOMES = (COMPLETED, STOPPED)
"""Values of ``outcome`` in ``result.json`` (the training loop ended without an error)."""


def status_line(status: str, reason: str | None = None) -> str:
    """``[mlite] status: <status>`` with `` (<reason>)`` when there is one."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    return STATUS_PREFIX + status + (f" ({reason})" if reason else "")


def parse_status_line(line: str) -> tuple[str, str] | None:
    """``(status, reason)`` of a :func:`status_line` (reason ``""`` when none); None for any other line."""
    if not line.startswith(STATUS_PREFIX):
        return None
    status, _, why = line[len(STATUS_PREFIX) :].strip().partition(" ")
    why = why.strip()
    if why.startswith("(") and why.endswith(")"):
        why = why[1:-1]
    return status, why


# ---------------------------------------------------------------------- JSON keys
STATUS_KEYS = ("status", "reason", "pid", "launcher", "started_at", "ended_at", "exit_code", "steps")
"""Keys of ``status.json``."""

RESULT_KEYS = ("outcome", "steps")
"""Keys of ``result.json``."""

ERROR_KEYS = ("rank", "error", "traceback", "time")
"""Keys of ``error_rankR.json``."""

METRICS_KEYS = ("step", "data")
"""Keys of one ``metrics.jsonl`` record."""

SUMMARY_KEYS = ("status", "steps", "final_loss", "log", "metrics_jsonl", "peak_memory_bytes", "reason", "run_dir")
"""Keys of the ``mlite run --json`` document (``RunHandle.summary()``)."""


def is_run_dir(path) -> bool:
    """A run directory of the kit: a folder holding ``train.log`` or ``metrics.jsonl``."""
    p = Path(path)
    return p.is_dir() and any((p / n).is_file() for n in METRIC_SOURCES)
