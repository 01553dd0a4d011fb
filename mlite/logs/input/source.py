"""A source to read and its bytes: :class:`LogSource` (one run: a log file, a run directory or a TensorBoard
logdir), opening a file plain or gzip (by magic bytes), and the head of a file that formats are sniffed from."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

from ...errors import MliteError
from .blockio import read_some

LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".jsonl")
"""File endings a directory is searched for (each also with ``.gz``)."""

SNIFF_BYTES = 1 << 20
"""Bytes read to decide a file's format (the metric lines themselves decide when the sniff is not enough)."""


@dataclass(kw_only=True, slots=True)
class LogSource:
    """One run to read: a log file, a run directory of the kit, or a TensorBoard logdir."""

    path: Path
    """What the user named (file or directory)."""
    name: str
    """Run name: the file stem or the run directory's name (made unique among the sources read together)."""
    metrics_path: Path | None
    """File the metric records are read from (None: a run directory without metrics yet; a TensorBoard source:
    the event file or logdir)."""
    events_path: Path | None
    """File the text events are read from (the same file for a plain log)."""
    fmt: str
    """Sniffed format: the name of a registered format (:mod:`..formats.registry`); the reader may refine a
    console sniff (verl until a Megatron line says otherwise)."""
    files: tuple[Path, ...] = ()
    """The files read, when they are not ``metrics_path`` and ``events_path`` (a logdir's event files)."""

    def size(self) -> int:
        """Bytes on disk of the files this source reads."""
        paths = set(self.files) or {p for p in (self.metrics_path, self.events_path) if p is not None}
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


def is_text_log(p: Path) -> bool:
    """A file with one of :data:`LOG_SUFFIXES` (optionally ``.gz``)."""
    name = p.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return p.is_file() and name.endswith(LOG_SUFFIXES)


def stem_name(path: Path) -> str:
    """A log file's run name: its name without ``.gz`` and the log suffix."""
    name = path.name
    for suffix in (".gz",) + LOG_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name or path.name
