"""verl's file logger (``trainer.logger=[console,file]``, ``verl/utils/tracking.py``): one JSON object per step,
``{"step": N, "data": {"key": value, ...}}``. Older versions wrote bare ``NaN`` / ``Infinity`` (not JSON, but
Python's ``json`` reads them); newer ones write ``null`` for NaN. The kit's own ``metrics.jsonl`` uses the
same shape. Flat objects (``{"step": N, "train/loss": ...}``) are accepted too; nested dicts are flattened
with ``/``; strings and lists are ignored.
"""

from __future__ import annotations

import json

from . import verl_console
from .registry import Head, LineReader, LogFormat

NAME = "verl_jsonl"
"""The format's name."""

_NAN = float("nan")


def _flatten(obj: dict, prefix: str, keys: list[str], vals: list[float]) -> None:
    for k, v in obj.items():
        name = f"{prefix}{k}"
        if v is None:
            keys.append(name)
            vals.append(_NAN)
        elif isinstance(v, (int, float)):  # bool is an int
            keys.append(name)
            vals.append(float(v))
        elif isinstance(v, dict):
            _flatten(v, name + "/", keys, vals)


def parse_line(text: str) -> tuple[int, list[str], list[float]] | None:
    """One JSONL line -> ``(step, keys, values)``; None when it is not a JSON object with an integer step."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    step = obj.get("step")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or step != step or int(step) != step:
        return None
    keys: list[str] = []
    vals: list[float] = []
    data = obj.get("data")
    if isinstance(data, dict):
        _flatten(data, "", keys, vals)
    else:
        _flatten({k: v for k, v in obj.items() if k != "step"}, "", keys, vals)
    return int(step), keys, vals


def looks_like_jsonl(first_line: str) -> bool:
    """True when the first non-blank line of a file is a JSON object with a ``step``."""
    return parse_line(first_line) is not None


def sniff(head: Head) -> bool:
    """The first non-blank line is a JSON object with a step."""
    return head.first.lstrip().startswith("{") and looks_like_jsonl(head.first)


LINES = LineReader(parse=parse_line, strict=True)
"""One JSON object a line; a non-blank line that is not one is skipped."""

FORMAT = LogFormat(
    name=NAME,
    label="verl JSONL",
    reader=LINES,
    sniff=sniff,
    rank=10,
    roles=verl_console.ROLES,
    no_metrics='no JSON object with a "step" in the file',
)
"""verl's file logger (and any JSONL of ``{"step": N, ...}`` objects)."""
