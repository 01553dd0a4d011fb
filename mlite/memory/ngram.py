"""Bytes of n-gram memory tables (DeepSeek-V4.1's Engram) per rank: rows sharded over the DP x CP owners, frozen
or trainable, never offloaded.

Sources (ISEEKYAN/Megatron-LM, tree ``experimental/lite``):

* ``docs/deepseek_v41.md`` @ 04baccf4, "Resident Engram row owners": each DP/CP group rank stores only its
  contiguous row interval (also with EP and CP = 1); uneven tables use the boundaries ``total_rows * rank //
  owners``, no padding rows, so the most loaded owner holds ``ceil(rows / owners)`` rows of each table.
  ``trainable_engram=False`` keeps only FP8 weights and E8M0 scales; ``True`` adds a persistent local FP32 master
  whose FP32 gradient has the same local shape (``main_grad``); Engram storage stays on the model device in both
  modes ("never offloaded"): no offload option moves it. Its table of the maximum persistent storage per rank for
  the official two tables (384,006,168 and 384,016,682 rows x 256) is what ``tests/test_ngram_memory.py``
  reproduces: 1 owner 188.83 / 732.44 / 732.44 GiB, 8 owners 23.60 / 91.56 / 91.56, 16 owners 11.80, 32 owners 5.90.
* ``model/deepseek_v41/lite/engram.py`` @ 0ce9c218 (``EngramTable``): the weight is ``float8_e4m3fn`` [rows, D],
  the scale ``float8_e8m0fnu`` [rows, D / 32] (one byte per block of 32 values of a row).
* ``docs/engram_distribution.md`` @ 6f00e559 and ``primitive/optimizers/sinkhorn.py`` @ 1a7fc215 (``Sinkhorn``:
  its checkpoint state is ``{'momentum'}``, FP32, nothing offloaded): the optimizer keeps FP32 momentum M only for
  the local optimizer-owned rows (the owners partition the table, each row once), so a trainable table adds 4 bytes
  per element of optimizer state; frozen tables allocate no optimizer, master or momentum. Not in the doc's table
  (it excludes optimizer state); reported apart as ``momentum``. The step's staged candidate W, new M and N (FP32,
  the local rows) and the FP8 republication are transients of the optimizer step, not counted here.

Per rank, ``n`` owners, a table of ``R`` rows x ``D``: ``r = ceil(R / n)`` rows;
``fp8 = r x D``, ``scales = r x D / 32``; trainable adds ``master = 4 r D``, ``main_grad = 4 r D``,
``momentum = 4 r D``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..models.spec import ParamGroup

FP8_BYTES = 1
"""Bytes per table value (``float8_e4m3fn``)."""
SCALE_BLOCK = 32
"""Values of a row per E8M0 scale (``float8_e8m0fnu``, one byte)."""
SCALE_BYTES = 1
"""Bytes per scale."""
FP32 = 4
"""Bytes per element of the trainable master, its main gradient and Sinkhorn's momentum."""

ITEMS_FROZEN = ("fp8", "scales")
"""The byte items of a frozen table."""
ITEMS_TRAINABLE = (*ITEMS_FROZEN, "master", "main_grad", "momentum")
"""The byte items of a trainable table."""


def local_rows(rows: int, owners: int) -> int:
    """Rows of the most loaded owner: boundaries ``rows * rank // owners`` give at most ``ceil(rows / owners)``."""
    return -(-rows // owners)


def table_bytes(table: ParamGroup, owners: int, *, trainable: bool) -> dict[str, float]:
    """Bytes of one n-gram table on its most loaded owner, by item (:data:`ITEMS_TRAINABLE`)."""
    r = local_rows(table.rows, owners)
    w = table.width
    out = {"fp8": float(r * w * FP8_BYTES), "scales": float(r * math.ceil(w / SCALE_BLOCK) * SCALE_BYTES)}
    if trainable:
        elems = float(r * w)
        out.update(master=FP32 * elems, main_grad=FP32 * elems, momentum=FP32 * elems)
    return out


def ngram_bytes(tables: Iterable[ParamGroup], owners: int, *, trainable: bool) -> dict[str, float]:
    """Bytes of ``tables`` (all held by one rank) on their most loaded owner, summed by item."""
    out: dict[str, float] = {}
    for t in tables:
        for k, v in table_bytes(t, owners, trainable=trainable).items():
            out[k] = out.get(k, 0.0) + v
    return out


def stage_tables(spec, layers: Iterable[int]) -> list[ParamGroup]:
    """The n-gram tables of the main layers in ``layers`` (one pipeline rank's)."""
    held = set(layers)
    return [g for i, g in spec.ngram_tables if i in held]
