"""Pieces of the memory view that are not the view itself: the debouncer of the whole-mesh table and its columns
(with OOM cells highlighted, and the predicted speed of those that fit) and rows built from
:func:`mlite.memory.mesh_table`."""

from __future__ import annotations

import asyncio

from mlite.memory import GIB

from .mesh_table import MESH_COLUMNS, RANK_COLUMN, Column
from .planner import planner_rows

DEBOUNCE_S = 0.25
"""Quiet time before the whole-mesh table is recomputed."""


class _Debounce:
    """Call ``fn`` once the calls stop for ``wait`` seconds (on the kernel's asyncio loop); at once without one."""

    def __init__(self, fn, wait: float = DEBOUNCE_S):
        self.fn, self.wait = fn, wait
        self._handle: asyncio.TimerHandle | None = None
        self.enabled = False
        """False while the view is being built (the first table is computed synchronously)."""

    def __call__(self) -> None:
        try:
            loop = asyncio.get_running_loop() if self.enabled else None
        except RuntimeError:
            loop = None
        if loop is None:
            self.fn()
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = loop.call_later(self.wait, self.fn)


MEMORY_COLUMNS = [
    RANK_COLUMN,
    *MESH_COLUMNS,
    Column(
        "total",
        "GPU GiB",
        fmt=lambda r: f"{r['total'] / GIB:.1f}",
        css=lambda r: "" if r["fits"] else "mlite-oom",
        tip="GPU memory of the most loaded rank (peak + framework overhead)",
    ),
    Column("static", "static GiB", fmt=lambda r: f"{r['static'] / GIB:.1f}", tip="params + grads + optimizer state"),
    Column(
        "dynamic",
        "act+tmp GiB",
        fmt=lambda r: f"{r['dynamic'] / GIB:.1f}",
        tip="activations and the largest transient buffer",
    ),
    Column("host", "host GiB", fmt=lambda r: f"{r['host'] / GIB:.1f}", tip="host RAM per GPU process"),
    Column(
        "fits_text",
        "fits",
        numeric=False,
        css=lambda r: "" if r["fits"] else "mlite-oom",
        tip="total <= usable (device memory less the headroom)",
    ),
    Column("score", "score", fmt=lambda r: f"{r['score']:.2f}", tip="the planner's score (lower is better)"),
    Column(
        "tokens_per_s_per_gpu",
        "tok/s/GPU",
        fmt=lambda r: f"{r['tokens_per_s_per_gpu']:,.0f}" if r["step_s"] else "–",
        tip="predicted tokens/s per GPU on the chosen hardware (mlite time; meshes that fit only)",
    ),
    Column(
        "step_s",
        "step s",
        fmt=lambda r: f"{r['step_s']:.3f}" if r["step_s"] else "–",
        tip="predicted seconds per optimizer step (mlite time; meshes that fit only)",
    ),
]


def memory_rows(meshes) -> list[dict]:
    """:func:`widgets.planner.planner_rows` plus the estimate's columns."""
    rows = planner_rows(meshes)
    for row, m in zip(rows, meshes):
        e = m.extra
        row.update(
            total=e["total_bytes"],
            static=e["static_bytes"],
            dynamic=e["peak_bytes"] - e["static_bytes"],
            host=e["host_bytes"],
            fits=bool(m.fits),
            fits_text="✓" if m.fits else "OOM",
            tokens_per_s_per_gpu=e.get("tokens_per_s_per_gpu", 0.0),
            step_s=e.get("step_s", 0.0),
        )
    return rows
