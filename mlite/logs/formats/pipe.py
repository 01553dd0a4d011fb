"""``Step: N | Name: value | ...`` records: the console line of custom trainers built on Megatron-style logging
(Picotron-like ``train.py`` scripts, course projects on Slurm clusters), usually behind a ``logging`` prefix::

    2025-05-21 11:32:34 - INFO - Step: 1 | Loss: 12.03 | TFLOPs: 148.68

Fields become lower_snake metric names as for Megatron (``Loss`` -> ``loss``, ``TFLOPs`` -> ``tflops``). A file is
read in this format only when its head shows such a line and no verl or Megatron record (:func:`detect.sniff_format`),
so the ``Step:`` search costs nothing elsewhere.
"""

from __future__ import annotations

import re

from . import verl_console
from .megatron import parse_headed
from .registry import ConsoleReader, Head, LogFormat

NAME = "pipe"
"""The format's name."""

MARKER = "Step:"
"""Every record contains this; the reader searches for it (in files sniffed as this format only)."""

_HEAD_RE = re.compile(r"(?<![\w/.])Step:\s*(\d+)\s*\|")


def parse_line(text: str) -> tuple[int, list[str], list[float], bool] | None:
    """A record -> ``(step, metric names, values, malformed)``; None when ``text`` holds none."""
    return parse_headed(_HEAD_RE, text)


def has_record(text: str) -> bool:
    """True when a line of ``text`` is such a record."""
    return MARKER in text and bool(_HEAD_RE.search(text))


def sniff(head: Head) -> bool:
    """A record and no verl line (Megatron's sniff comes first)."""
    return verl_console.first_line(head) is None and has_record(head.text)


ROLES = {
    "loss": ("loss", "train_loss", "lm_loss"),
    "val_loss": ("val_loss",),
    "grad_norm": ("grad_norm", "gradnorm"),
    "lr": ("lr", "learning_rate"),
    "throughput": ("tflops", "tokens_per_second", "tokens_s"),
}
"""The names custom trainers print (``Loss``, ``Grad Norm``, ``TFLOPs`` as lower_snake)."""

CONSOLE = ConsoleReader(grammar=NAME, shows=lambda text: True, always=False)
"""The console scan, ``Step:`` heads: searched in files sniffed as this format only."""

FORMAT = LogFormat(
    name=NAME,
    label="'Step: N |' records",
    reader=CONSOLE,
    sniff=sniff,
    rank=30,
    roles=ROLES,
    refine=True,
    no_metrics="no 'Step: N | name: value' record",
)
"""Custom trainers' ``Step: N | ...`` console lines."""
