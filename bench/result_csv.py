"""The measurement CSV of a GPU bench (``measurement, value, unit, gpu, torch_version, command``): every row carries
the device command from the raw JSON joined to the report step, so ``tests/test_bench_results.py`` can re-run it."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

COLUMNS = ("measurement", "value", "unit", "gpu", "torch_version", "command")
"""The CSV contract of the GPU rows (issue 13)."""


def write_measurements(
    raw: dict, rows: Iterable[dict], path: Path, report_cmd: str, columns: tuple[str, ...] = COLUMNS
) -> None:
    """Write ``rows`` (``measurement``, ``value``, ``unit``; or a bench's own ``columns`` ending in ``gpu``,
    ``torch_version``, ``command``) to ``path`` atomically, with the raw JSON's GPU, torch version and
    ``command && report_cmd``."""
    command = f"{raw['command']} && {report_cmd}"
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({**r, "gpu": raw.get("gpu"), "torch_version": raw.get("torch_version"), "command": command})
    tmp.replace(path)
