"""The kit's own runs (:mod:`mlite.rundir`): a run directory (``train.log`` and/or ``metrics.jsonl``), or a
``train.log`` given as a file (its first line is :data:`mlite.rundir.LOG_HEADER`). Metrics come from
``metrics.jsonl`` when present (else ``train.log``, read as a verl console log), text events from ``train.log``.
"""

from __future__ import annotations

from pathlib import Path

from ... import rundir as schema
from ..input.source import LogSource
from . import verl_console, verl_jsonl
from .registry import Head, LogFormat, Reader

NAME = "mlite"
"""The format's name."""


def claims(path: Path) -> bool:
    """A run directory."""
    return path.is_dir() and schema.is_run_dir(path)


def open_source(path: Path) -> LogSource:
    """A run directory: metrics from ``metrics.jsonl`` (else ``train.log``), events from ``train.log``."""
    metrics = path / schema.METRICS_FILE
    log = path / schema.LOG_FILE
    return LogSource(
        path=path,
        name=path.name,
        fmt=NAME,
        metrics_path=metrics if metrics.is_file() else (log if log.is_file() else None),
        events_path=log if log.is_file() else None,
    )


def reader(source: LogSource) -> Reader:
    """``metrics.jsonl`` of a run directory as JSONL, a ``train.log`` as a verl console log."""
    m = source.metrics_path
    if source.path.is_dir() and m is not None and m.name.endswith((".jsonl", ".jsonl.gz")):
        return verl_jsonl.LINES
    return verl_console.CONSOLE


def sniff(head: Head) -> bool:
    """The kit's log header on the first line."""
    return head.first.startswith(schema.LOG_HEADER)


FORMAT = LogFormat(
    name=NAME,
    label="mlite-lab run log",
    reader=reader,
    sniff=sniff,
    rank=0,
    claims=claims,
    open_source=open_source,
    roles=verl_console.ROLES,
    no_metrics=verl_console.no_metrics,
)
"""The kit's run directory or ``train.log``."""
