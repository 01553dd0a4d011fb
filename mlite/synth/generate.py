"""Writing synthetic logs: :func:`generate` (one log from a :class:`spec.GenSpec`, its :class:`spec.Truth`
returned) and :func:`write_bench_log` (a large noisy verl log for the parse benchmark)."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

from .megatron import megatron_log
from .spec import FORMATS, GenSpec, Truth
from .verl import verl_console, verl_jsonl

_WRITERS = {"verl": verl_console, "verl_jsonl": verl_jsonl, "megatron": megatron_log}


def generate(spec: GenSpec, path) -> Truth:
    """Write the log ``spec`` describes to ``path`` and return its :class:`Truth`."""
    make = _WRITERS.get(spec.format)
    if make is None:
        raise ValueError(f"unknown format {spec.format!r}: the generator writes {', '.join(FORMATS)}")
    lines, truth = make(spec, random.Random(spec.seed))
    nl = "\r\n" if spec.crlf else "\n"
    data = (nl.join(lines) + nl).encode("utf-8")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if spec.gzip:
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    truth.path = path
    return truth


def write_bench_log(path, size_mb: float, *, seed: int = 0, noise: float = 4.0) -> dict:
    """Write at least ``size_mb`` MB of noisy multi-node verl GRPO console output (3-decimal, repr and numpy
    values mixed by segment) in chunks; returns ``{"bytes", "metric_lines", "metric_bytes"}``."""
    path = Path(path)
    target = int(size_mb * 1e6)
    written = metric_lines = metric_bytes = 0
    seg = 0
    with open(path, "wb") as f:
        while written < target:
            spec = GenSpec(
                steps=200,
                first_step=1 + 200 * seg,
                seed=seed + seg,
                noise=noise,
                precision=("repr", "np", "3f")[seg % 3],
                glued_tqdm=seg % 5 == 4,
            )
            lines, truth = verl_console(spec, random.Random(spec.seed))
            data = ("\n".join(lines) + "\n").encode("utf-8")
            f.write(data)
            written += len(data)
            metric_lines += len(truth.records)
            metric_bytes += sum(len(ln) for ln in lines if "step:" in ln and " - " in ln)
            seg += 1
    return {"bytes": written, "metric_lines": metric_lines, "metric_bytes": metric_bytes}
