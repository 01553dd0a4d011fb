"""Streaming CSV export: ``run,step,metric,value``, one row per printed value, in file order.

Rows are written while the log is read (nothing is kept, pandas is not imported), so memory stays flat
for any log size. ``value`` is ``repr(float)``: the shortest text that reads back to the same float64, so
``float(value)`` round-trips bitwise (``nan``, ``inf`` and ``-inf`` included).
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from ...errors import MliteError
from ..input.detect import resolve_inputs
from ..input.progress import progress_for
from .reader import scan

HEADER = "run,step,metric,value\n"
"""The CSV header (public contract of ``mlite logs export``)."""

_FLUSH_CHARS = 1 << 20


def _quote(field: str) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([field])
    return buf.getvalue()


class _CsvSink:
    """Receives ``(step, keys, values, line)`` and writes CSV rows in ~1 MB chunks."""

    needs_lines = False
    """The reader may skip counting lines for this sink."""

    def __init__(self, out, run: str):
        self.out = out
        self.run = (_quote(run) if any(c in run for c in ',"\n\r') else run) + ","
        self.buf: list[str] = []
        self.size = 0
        self.rows = 0

    def __call__(self, step: int, keys: list[str], vals: list[float], line: int) -> None:
        joined = "".join(keys)
        if "," in joined or '"' in joined or "\n" in joined or "\r" in joined:
            keys = [_quote(k) for k in keys]
        pre = f"{self.run}{step},"
        chunk = pre + ("\n" + pre).join(map(",".join, zip(keys, map(repr, vals)))) + "\n"
        self.buf.append(chunk)
        self.size += len(chunk)
        self.rows += len(vals)
        if self.size >= _FLUSH_CHARS:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.out.write("".join(self.buf))
            self.buf = []
            self.size = 0


def export_csv(items, out, *, progress: bool | None = None) -> dict:
    """Write the values of the logs ``items`` (files, globs, run directories) as CSV to ``out``: a path,
    ``"-"`` for stdout, or a text file object. Returns ``{"runs", "rows"}``."""
    sources = resolve_inputs(items)
    close = False
    if out == "-" or out is None:
        fh = sys.stdout
    elif isinstance(out, (str, Path)):
        path = Path(out)
        if path.is_dir():
            raise MliteError(f"--csv '{out}' is a directory: give a file name such as metrics.csv")
        if not path.parent.exists():
            raise MliteError(f"--csv '{out}': directory '{path.parent}' does not exist")
        try:
            fh = open(path, "w", encoding="utf-8", newline="", buffering=1 << 20)  # noqa: SIM115 - closed below
        except OSError as e:
            raise MliteError(f"cannot write --csv '{out}': {e.strerror or e}") from None
        close = True
    else:
        fh = out
    rows = 0
    try:
        fh.write(HEADER)
        total = sum(s.size() for s in sources)
        with progress_for(total, len(sources), progress, desc="exporting") as bar:
            for src in sources:
                sink = _CsvSink(fh, src.name)
                scan(src, keep=False, events=False, sink=sink, progress=bar)
                sink.flush()
                rows += sink.rows
        fh.flush()
    finally:
        if close:
            fh.close()
    return {"runs": len(sources), "rows": rows}
