"""Which files are not training logs: ``mlite logs check data/logs/*`` matches a README and a script next to the
logs; those are left out (and counted) instead of being read as Megatron logs whose prose gives events.

A file ending in :data:`NOT_LOG_SUFFIXES` (documents, code, configs, data, images) is not a log unless its head holds
a record some registered format reads; every other file is a log (log files, and names Slurm or PBS give).
"""

from __future__ import annotations

from pathlib import Path

from ..formats import registry
from .source import head_text

NOT_LOG_SUFFIXES = (
    *(".md", ".rst", ".html", ".pdf", ".ipynb"),
    *(".py", ".sh", ".sbatch", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".json"),
    *(".csv", ".parquet", ".pt", ".safetensors", ".png", ".jpg", ".jpeg", ".svg", ".gif"),
)
"""File endings that say *document, code, config, data or image*: skipped among several inputs, refused as the only
input, unless the head holds a record (a JSONL of metrics named ``.json`` is still read)."""

_HEAD_BYTES = 1 << 16
"""Bytes of a file read to look for a record."""

_HEAD_LINES = 200
"""Lines of that head a line-record format (JSONL) tries."""


def shows_a_record(path: Path) -> bool:
    """True when the head of ``path`` holds a record of a registered format (a metric line, the kit's header, a
    JSONL metrics object): what a format's *words* alone suggest does not count."""
    head = registry.Head(path, head_text(path, _HEAD_BYTES))
    for fmt in registry.entries():
        reader = fmt.reader
        if isinstance(reader, registry.ConsoleReader):
            if reader.shows(head.text) if reader.always else fmt.sniff is not None and fmt.sniff(head):
                return True
        elif isinstance(reader, registry.LineReader):
            if any(reader.parse(ln) for ln in head.lines[:_HEAD_LINES]):
                return True
        elif not isinstance(reader, registry.FileReader) and fmt.sniff is not None and fmt.sniff(head):
            return True  # a reader chosen per source (the kit's run log): its sniff is its header
    return False


def not_a_log(path: Path) -> str | None:
    """Why the file ``path`` is not a training log (a few words): it ends in :data:`NOT_LOG_SUFFIXES` and its head
    holds no record. None for any other path: a file of another name is read (a crashed job's log without metric
    lines gets its ``no_metrics`` event)."""
    suffix = path.suffix.lower()
    if suffix not in NOT_LOG_SUFFIXES or not path.is_file() or registry.claimed(path) is not None:
        return None
    if shows_a_record(path):
        return None
    return f"a {suffix} file with no metric record"
