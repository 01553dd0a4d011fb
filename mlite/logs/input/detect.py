"""What to read: expand files, globs and directories into log sources and sniff their format from the first
bytes, through the format registry (:mod:`..formats.registry`): a path a format claims is its source, any other
file is sniffed.

A *run directory* of the kit (``train.log`` whose first line is ``# mlite-lab run log``, and/or
``metrics.jsonl``) is one source: metrics come from ``metrics.jsonl`` when present (else ``train.log``),
text events from ``train.log``. A TensorBoard event file, or a directory holding event files (a logdir), is one
source too. Any other directory stands for the log files in it (``*.log``, ``*.out``, ``*.err``, ``*.txt``,
``*.jsonl``, each optionally ``.gz``), and the run directories and TensorBoard logdirs directly under it.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from ... import rundir as schema
from ...errors import MliteError
from ..formats import registry
from ..records import ERROR_KINDS, Event
from .nonlog import not_a_log
from .source import LOG_SUFFIXES, LogSource, head_text, is_text_log, stem_name

__all__ = ["LogSource", "final_format", "is_run_dir", "no_metrics_event", "resolve_inputs", "sniff_format"]


def sniff_format(path: Path) -> str:
    """The format of the text file ``path``: the first registered format whose sniff accepts its head, in sniff
    order (the kit's header, a JSONL object, Megatron's lines or words, ``Step: N |`` records; verl console
    last, the default)."""
    head = registry.Head(path, head_text(path))
    for fmt in registry.sniffers():
        if fmt.sniff is not None and fmt.sniff(head):
            return fmt.name
    raise MliteError(f"'{path}': no registered log format reads it (registered: {', '.join(registry.names())})")


def is_run_dir(path: Path) -> bool:
    """A kit run directory: it holds ``train.log`` or ``metrics.jsonl``."""
    return schema.is_run_dir(path)


def _source(path: Path) -> LogSource:
    fmt = registry.claimed(path)
    if fmt is not None and fmt.open_source is not None:
        return fmt.open_source(path)
    name = fmt.name if fmt is not None else sniff_format(path)
    parent = path.parent
    if path.name in schema.METRIC_SOURCES and is_run_dir(parent):
        run = parent.name
    else:
        run = stem_name(path)
    return LogSource(path=path, name=run, fmt=name, metrics_path=path, events_path=path)


def resolve_inputs(items, *, allow_empty: bool = False, skipped: list[Path] | None = None) -> list[LogSource]:
    """Files, globs and directories -> the log sources to read, in the given order (globs sorted).

    Among a glob's matches or several inputs, files that are not logs (:func:`.nonlog.not_a_log`: a README, a
    script) are left out and appended to ``skipped``; the one file named alone is refused instead. Raises
    :class:`MliteError` for a path that does not exist, a glob or directory with no log in it, or an unreadable file.
    """
    if isinstance(items, (str, os.PathLike)):
        items = [items]
    items = list(items)
    left_out: list[Path] = []
    paths: list[Path] = []
    for item in items:
        s = os.path.expanduser(str(item))
        if glob.has_magic(s):
            hits = sorted(glob.glob(s, recursive=True))
            hits = [h for h in hits if Path(h).is_file() or registry.claimed(Path(h))]
            left_out += [Path(h) for h in hits if not_a_log(Path(h)) is not None]
            hits = [h for h in hits if not_a_log(Path(h)) is None]
            if not hits and not allow_empty:
                raise MliteError(f"no log file matches '{item}': check the pattern (e.g. 'logs/*.out')")
            paths.extend(Path(h) for h in hits)
            continue
        p = Path(s)
        if not p.exists():
            raise MliteError(f"log file '{item}' does not exist: give a log file, a run directory or a glob")
        why = not_a_log(p)
        if why is not None:
            if len(items) == 1:
                raise MliteError(
                    f"'{item}' is not a training log ({why}): give a log file ({', '.join(LOG_SUFFIXES)}, "
                    "optionally .gz), a run directory or a glob"
                )
            left_out.append(p)
            continue
        if p.is_dir() and not registry.claimed(p):
            inner = sorted(c for c in p.iterdir() if is_text_log(c) or registry.claimed(c))
            if not inner and not allow_empty:
                raise MliteError(
                    f"directory '{item}' holds no log file ({', '.join(LOG_SUFFIXES)}, optionally .gz, "
                    f"or TensorBoard events.out.tfevents.*) and no run directory"
                )
            paths.extend(inner)
        else:
            paths.append(p)
    sources: list[LogSource] = []
    seen: set[Path] = set()
    for p in paths:
        key = p.resolve()
        if key in seen:
            continue
        seen.add(key)
        if p.is_file() and not os.access(p, os.R_OK):
            raise MliteError(f"cannot read log file '{p}': permission denied")
        sources.append(_source(p))
    if left_out and not sources and not allow_empty:
        raise MliteError(f"no log among the inputs: {', '.join(str(p) for p in left_out[:4])} are not training logs")
    if skipped is not None:
        skipped.extend(left_out)
    _unique_names(sources)
    return sources


def _unique_names(sources: list[LogSource]) -> None:
    counts: dict[str, int] = {}
    for s in sources:
        counts[s.name] = counts.get(s.name, 0) + 1
    for s in sources:
        if counts[s.name] > 1:
            s.name = f"{s.path.parent.name}/{s.name}" if s.path.parent.name else s.name
    taken: dict[str, int] = {}
    for s in sources:
        n = taken.get(s.name, 0)
        taken[s.name] = n + 1
        if n:
            s.name = f"{s.name}#{n + 1}"


def final_format(source: LogSource, first_kind: str | None) -> str:
    """The format of a scanned source: the sniff, or for a console sniff (``refine``) its first record's format,
    else the first format whose trainer markers the head shows (the sniffed one first), else ``unknown``."""
    fmt = registry.get(source.fmt)
    if fmt is not None and not fmt.refine:
        return fmt.name
    if first_kind is not None:
        return first_kind
    head = head_text(source.metrics_path or source.path)
    order = ([fmt] if fmt is not None else []) + [f for f in registry.entries() if f is not fmt]
    for f in order:
        if f.markers is not None and f.markers(head):
            return f.name
    return registry.UNKNOWN


def no_metrics_event(source: LogSource, fmt: str, evs: list[Event], notes: list[str]) -> Event:
    """The ``no_metrics`` event, saying what the log suggests instead (a crash, a wandb-only run...)."""
    entry = registry.get(fmt)
    if entry is not None:
        msg = entry.no_metrics_message(source)
    else:
        msg = f"no metric line of a known format ({', '.join(f.label for f in registry.entries())})"
    failures = sorted({e.kind for e in evs if e.kind in ERROR_KINDS})
    if failures:
        msg += f"; see the {', '.join(failures)} event(s)"
    if notes:
        msg += "; " + notes[0]
    return Event(kind="no_metrics", line=None, step=None, message=msg)
