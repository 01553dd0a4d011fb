"""``MeshTable``: meshes in an HTML table that sorts on header clicks and applies a mesh on a row click.

Used by :class:`widgets.planner.MeshPlanner` (every valid mesh) and :class:`widgets.memory_view.MemoryView` (the
same with the memory estimate, OOM cells highlighted). Clicks inside the HTML reach the kernel through
:class:`widgets.gpu_grid.ClickBridge`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ipywidgets as W

from mlite.mesh.axes import AXIS_NAMES, DERIVED

from ._common import ErrorBanner, esc
from .gpu_grid import ClickBridge


@dataclass(frozen=True)
class Column:
    """One column of a :class:`MeshTable`."""

    key: str
    """Row key; rows sort by ``row[key]``."""
    label: str
    """Header text."""
    fmt: Callable[[dict], str] | None = None
    """Cell text (default ``str(row[key])``)."""
    tip: str = ""
    """Header tooltip."""
    numeric: bool = True
    """Right-aligned."""
    css: Callable[[dict], str] | None = None
    """Extra CSS class of a cell (e.g. ``mlite-oom``)."""
    title: Callable[[dict], str] | None = None
    """Cell tooltip."""

    def text(self, row: dict) -> str:
        return self.fmt(row) if self.fmt else str(row[self.key])


MESH_COLUMNS = [Column(k, k) for k in AXIS_NAMES + DERIVED]
"""The mesh columns every table starts with (after ``#``)."""
RANK_COLUMN = Column("rank", "#", tip="position in the ranking (best first)")


class MeshTable(W.VBox):
    """Meshes in an HTML table: click a header to sort (again to reverse), a row to apply it.

    The same sorting is in the ``sort by`` dropdown and the ``descending`` toggle (they follow the header clicks).
    Rows are dicts with ``key`` (:func:`mesh_key`), ``cfg`` (the ``ParallelConfig`` to apply) and the columns' keys.
    """

    def __init__(
        self,
        columns: list[Column],
        *,
        on_pick: Callable[[dict], None],
        css: str,
        limit: int = 25,
        errors: ErrorBanner | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.add_class(css)
        self.add_class("mlite-mesh-table-view")
        own = errors is None
        self.errors = errors or ErrorBanner()
        """Inline error line; the owning view's when it passes ``errors``."""
        self.columns = columns
        self._rows: list[dict] = []
        self._current: str | None = None
        self._on_pick = on_pick
        self._busy = False
        self._sort = W.Dropdown(
            options=[(c.label, c.key) for c in columns],
            value=columns[0].key,
            description="sort by",
            layout=W.Layout(width="200px"),
        )
        self._sort.add_class("mlite-table-sort")
        self._desc = W.ToggleButton(value=False, description="descending", layout=W.Layout(width="120px"))
        self._desc.add_class("mlite-table-desc")
        self._limit = W.Dropdown(
            options=[("25 rows", 25), ("100 rows", 100), ("all rows", 0)], value=limit, layout=W.Layout(width="110px")
        )
        self._info = W.HTML()
        self._info.add_class("mlite-table-info")
        self._html = W.HTML()
        self._html.add_class("mlite-table-html")
        self.bridge = ClickBridge(self._pick, self.errors)
        for w in (self._sort, self._desc, self._limit):
            w.observe(self.errors.guard(lambda _c: self._render()), names="value")
        self.children = (
            W.HBox([self._sort, self._desc, self._limit, self._info]),
            *([self.errors] if own else []),
            self.bridge.box(self._html),
        )

    @property
    def rows(self) -> list[dict]:
        """All rows, in the ranking's order."""
        return self._rows

    @property
    def sort_key(self) -> tuple[str, bool]:
        return self._sort.value, self._desc.value

    def sort_by(self, key: str, descending: bool = False) -> None:
        self._busy = True
        try:
            self._sort.value, self._desc.value = key, descending
        finally:
            self._busy = False
        self._render()

    def set_rows(self, rows: list[dict], current: str | None = None) -> None:
        self._rows, self._current = rows, current
        self._render()

    def set_current(self, key: str | None) -> None:
        if key != self._current:
            self._current = key
            self._render()

    def sorted_rows(self) -> list[dict]:
        """The rows in the order shown (all of them, before the row limit)."""
        key, desc = self.sort_key
        return sorted(self._rows, key=lambda r: r[key], reverse=desc) if key != "rank" or desc else list(self._rows)

    def row(self, key: str) -> dict | None:
        return next((r for r in self._rows if r["key"] == key), None)

    def _pick(self, what: str) -> None:
        kind, _, value = what.partition(":")
        if kind == "sort":
            key, desc = self.sort_key
            self.sort_by(value, (not desc) if value == key else False)
        elif kind == "row":
            row = self.row(value)
            if row is not None:
                self._on_pick(row)

    def _render(self) -> None:
        if self._busy:
            return
        rows = self.sorted_rows()
        limit = self._limit.value or len(rows)
        shown = rows[:limit]
        key, desc = self.sort_key
        arrow = " &#9660;" if desc else " &#9650;"
        head = "".join(
            f'<th data-pick="sort:{c.key}" title="{esc(c.tip or "sort by " + c.label)}" style="cursor:pointer;'
            f"text-align:{'right' if c.numeric else 'left'};padding:2px 8px;border-bottom:1px solid #999;"
            f'white-space:nowrap;user-select:none">{esc(c.label)}{arrow if c.key == key else ""}</th>'
            for c in self.columns
        )
        body = []
        for r in shown:
            cur = r["key"] == self._current
            cls = "mlite-mesh-row" + (" mlite-row-current" if cur else "")
            style = "cursor:pointer" + (";background:#fff3bf;font-weight:600" if cur else "")
            cells = []
            for c in self.columns:
                extra = c.css(r) if c.css else ""
                bg = ";background:#f8d7da;color:#842029;font-weight:600" if "mlite-oom" in extra else ""
                title = f' title="{esc(c.title(r))}"' if c.title else ""
                cells.append(
                    f'<td class="{extra}"{title} style="text-align:{"right" if c.numeric else "left"};'
                    f'padding:1px 8px{bg}">{esc(c.text(r))}</td>'
                )
            body.append(
                f'<tr class="{cls}" data-key="{r["key"]}" data-pick="row:{r["key"]}" style="{style}" '
                f'title="click to apply this mesh">{"".join(cells)}</tr>'
            )
        self._html.value = (
            f'<div style="max-height:460px;overflow:auto;line-height:1.45"><table class="mlite-table" '
            f'onclick="{ClickBridge.onclick}" style="border-collapse:collapse;font-size:92%">'
            f'<thead style="position:sticky;top:0;background:#fff">{head}</thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )
        where = ""
        if self._current is not None:
            pos = next((i for i, r in enumerate(rows, 1) if r["key"] == self._current), None)
            where = (
                " · current mesh: not among them"
                if pos is None
                else f" · current mesh: row {pos}" + ("" if pos <= limit else " (below the rows shown)")
            )
        self._info.value = (
            f"<span style='color:#555'>&nbsp;{len(rows)} meshes, showing {len(shown)}{where}. "
            "Click a header to sort, a row to apply it.</span>"
        )
