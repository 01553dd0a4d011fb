"""What to read: expand files, globs and directories into log sources, open them (plain or gzip, by magic
bytes), and sniff their format from the first bytes.

A *run directory* of the kit (``train.log`` whose first line is ``# mlite-lab run log``, and/or
``metrics.jsonl``) is one source: metrics come from ``metrics.jsonl`` when present (else ``train.log``),
text events from ``train.log``. A TensorBoard event file, or a directory holding event files (a logdir), is one
source too. Any other directory stands for the log files in it (``*.log``, ``*.out``, ``*.err``, ``*.txt``,
``*.jsonl``, each optionally ``.gz``), and the run directories and TensorBoard logdirs directly under it.
"""

from __future__ import annotations

import glob
import gzip
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ... import rundir as schema
from ...errors import MliteError
from ..formats.tensorboard import event_files, files_of, is_event_file
from ..formats.verl_jsonl import looks_like_jsonl
from ..records import ERROR_KINDS, Event
from .blockio import blocks, read_some

MLITE_HEADER = schema.LOG_HEADER
"""First line of the kit's own ``train.log``."""

LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".jsonl")
"""File endings a directory is searched for (each also with ``.gz``)."""

SNIFF_BYTES = 1 << 20
"""Bytes read to decide a file's format (the metric lines themselves decide when the sniff is not enough)."""


@dataclass(kw_only=True, slots=True)
class LogSource:
    """One run to read: a log file, or a run directory of the kit."""

    path: Path
    """What the user named (file or run directory)."""
    name: str
    """Run name: the file stem or the run directory's name (made unique among the sources read together)."""
    metrics_path: Path | None
    """File the metric records are read from (None: a run directory without metrics yet)."""
    events_path: Path | None
    """File the text events are read from (the same file for a plain log)."""
    fmt: str
    """Sniffed format: ``verl`` (console, also Megatron until a line says otherwise), ``verl_jsonl``,
    ``megatron``, ``mlite`` or ``tensorboard``; the reader may refine a console sniff."""

    def size(self) -> int:
        """Bytes on disk of the files this source reads."""
        if self.fmt == "tensorboard":
            return sum(p.stat().st_size for p in files_of(self.path))
        paths = {p for p in (self.metrics_path, self.events_path) if p is not None}
        return sum(p.stat().st_size for p in paths)


def open_binary(path: Path):
    """A binary file object over the decompressed bytes (gzip by magic bytes), and the raw file under it
    (whose ``tell()`` gives compressed bytes read, for progress)."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except FileNotFoundError:
        raise MliteError(f"log file '{path}' does not exist: give a log file, a run directory or a glob") from None
    except IsADirectoryError:
        raise MliteError(f"'{path}' is a directory: give a log file, or a run directory with train.log") from None
    except OSError as e:
        raise MliteError(f"cannot read log file '{path}': {e.strerror or e}") from None
    head = raw.read(2)
    raw.seek(0)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    return raw, raw


def head_text(path: Path, nbytes: int = SNIFF_BYTES) -> str:
    """The first ``nbytes`` decompressed bytes of ``path`` as text (invalid UTF-8 replaced)."""
    f, raw = open_binary(path)
    try:
        data, _ = read_some(f, nbytes)
    finally:
        f.close()
        raw.close()
    return data.decode("utf-8", "replace")


def sniff_format(path: Path) -> str:
    """``mlite`` (header), ``verl_jsonl`` (first line a JSON object with a step), ``megatron`` (an
    iteration line or Megatron's words before any verl line), ``pipe`` (a ``Step: N |`` record and no verl or
    Megatron line) or ``verl`` (console: the default)."""
    text = head_text(path)
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.startswith(MLITE_HEADER):
        return "mlite"
    if first.lstrip().startswith("{") and looks_like_jsonl(first):
        return "verl_jsonl"
    from ..formats.megatron import parse_iteration

    verl_at = _first_verl(text)
    for i, ln in enumerate(text.splitlines()):
        if "iteration" in ln and parse_iteration(ln):
            return "megatron" if verl_at is None or verl_at > i else "verl"
    if verl_at is None and ("megatron" in text.lower() or "pretrain_gpt" in text):
        return "megatron"
    from ..formats.pipe import has_record

    if verl_at is None and has_record(text):
        return "pipe"
    return "verl"


def _first_verl(text: str) -> int | None:
    from ..formats.verl_console import has_marker

    for i, ln in enumerate(text.splitlines()):
        if "step:" in ln and has_marker(ln):
            return i
    return None


def has_trainer_markers(text: str, fmt: str) -> bool:
    """True when ``text`` (the head of a log without metric lines) shows the trainer of ``fmt``."""
    if fmt == "megatron":
        return "megatron" in text.lower() or "pretrain_gpt" in text
    return any(m in text for m in ("(TaskRunner", "(main_task", "(WorkerDict", "verl.", "verl/", "Training Progress"))


def is_run_dir(path: Path) -> bool:
    """A kit run directory: it holds ``train.log`` or ``metrics.jsonl``."""
    return schema.is_run_dir(path)


def is_tensorboard_dir(path: Path) -> bool:
    """A TensorBoard logdir: a directory with event files directly in it and no other log file (a folder that
    also holds Slurm logs stands for its files, each event file a source of its own)."""
    if not path.is_dir() or not event_files(path):
        return False
    return not any(_is_text_log(c) for c in path.iterdir())


def _is_log_file(p: Path) -> bool:
    return is_event_file(p) or _is_text_log(p)


def _is_text_log(p: Path) -> bool:
    name = p.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return p.is_file() and name.endswith(LOG_SUFFIXES)


def _source(path: Path) -> LogSource:
    if is_event_file(path) or is_tensorboard_dir(path):
        name = path.name if path.is_dir() else (path.parent.name or path.name)
        return LogSource(path=path, name=name, fmt="tensorboard", metrics_path=path, events_path=None)
    if path.is_dir():
        metrics = path / schema.METRICS_FILE
        log = path / schema.LOG_FILE
        return LogSource(
            path=path,
            name=path.name,
            fmt="mlite",
            metrics_path=metrics if metrics.is_file() else (log if log.is_file() else None),
            events_path=log if log.is_file() else None,
        )
    fmt = sniff_format(path)
    parent = path.parent
    if path.name in schema.METRIC_SOURCES and is_run_dir(parent):
        name = parent.name
    else:
        name = path.name
        for suffix in (".gz",) + LOG_SUFFIXES:
            if name.lower().endswith(suffix):
                name = name[: -len(suffix)]
    return LogSource(path=path, name=name or path.name, fmt=fmt, metrics_path=path, events_path=path)


def resolve_inputs(items, *, allow_empty: bool = False) -> list[LogSource]:
    """Files, globs and directories -> the log sources to read, in the given order (globs sorted).

    Raises :class:`MliteError` for a path that does not exist, a glob or directory with no log in it, or
    an unreadable file.
    """
    if isinstance(items, (str, os.PathLike)):
        items = [items]
    paths: list[Path] = []
    for item in items:
        s = os.path.expanduser(str(item))
        if glob.has_magic(s):
            hits = sorted(glob.glob(s, recursive=True))
            hits = [h for h in hits if Path(h).is_file() or is_run_dir(Path(h)) or is_tensorboard_dir(Path(h))]
            if not hits and not allow_empty:
                raise MliteError(f"no log file matches '{item}': check the pattern (e.g. 'logs/*.out')")
            paths.extend(Path(h) for h in hits)
            continue
        p = Path(s)
        if not p.exists():
            raise MliteError(f"log file '{item}' does not exist: give a log file, a run directory or a glob")
        if p.is_dir() and not is_run_dir(p) and not is_tensorboard_dir(p):
            inner = sorted(c for c in p.iterdir() if _is_log_file(c) or is_run_dir(c) or is_tensorboard_dir(c))
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


def final_format(source: LogSource, first_kind: str | None, run_dir: bool) -> str:
    """The format of a scanned source: its first metric line's kind, else the sniff and trainer markers."""
    if source.fmt == "tensorboard":
        return "tensorboard"
    if run_dir or source.fmt == "mlite":
        return "mlite"
    if source.fmt == "verl_jsonl":
        return "verl_jsonl"
    if first_kind is not None:
        return first_kind
    path = source.metrics_path or source.path
    head = head_text(path)
    if has_trainer_markers(head, "verl") and source.fmt != "megatron":
        return "verl"
    if has_trainer_markers(head, "megatron"):
        return "megatron"
    return "unknown"


def no_metrics_event(source: LogSource, fmt: str, evs: list[Event], notes: list[str]) -> Event:
    """The ``no_metrics`` event, saying what the log suggests instead (a crash, a wandb-only run...)."""
    if fmt == "verl_jsonl":
        msg = 'no JSON object with a "step" in the file'
    elif fmt == "tensorboard":
        msg = "no scalar in the TensorBoard event file(s) (only images, histograms or text, or nothing written yet)"
    elif fmt == "megatron":
        msg = "no Megatron 'iteration N/M |' line: the job ended before its first log interval"
    elif fmt in ("verl", "mlite"):
        msg = "no 'step:N - key:value' metric line: the run ended before its first step"
        progress = last_progress(source.events_path or source.metrics_path)
        if progress:
            msg = (
                f"no 'step:N - key:value' metric line although training progressed to {progress}: "
                f"trainer.logger probably lacks 'console' (a wandb-only run?)"
            )
    else:
        msg = "no metric line of a known format (verl console or JSONL, Megatron-LM, mlite-lab run log)"
    failures = sorted({e.kind for e in evs if e.kind in ERROR_KINDS})
    if failures:
        msg += f"; see the {', '.join(failures)} event(s)"
    if notes:
        msg += "; " + notes[0]
    return Event(kind="no_metrics", line=None, step=None, message=msg)


_PROGRESS_RE = re.compile(rb"Training Progress:[^\n\r|]*\|[^\n\r|]*\|\s*(\d+)/(\d+)")


def last_progress(path: Path | None) -> str | None:
    """``N/M`` of the last ``Training Progress`` tqdm bar (only used for logs without metric lines)."""
    if path is None:
        return None
    last = None
    f, raw = open_binary(path)
    try:
        for block in blocks(f, raw, None, None):
            i = block.rfind(b"Training Progress")
            while i != -1:
                m = _PROGRESS_RE.match(block, i)
                if m:
                    last = m
                    break
                i = block.rfind(b"Training Progress", 0, i)
    finally:
        f.close()
        raw.close()
    if last is None:
        return None
    return f"{int(last.group(1))}/{int(last.group(2))}"
