"""``GpuGrid``: the picture of a mesh's GPUs, drawn as inline SVG (crisp at any zoom, no image round trip).

One cell per rank, one row per node (``gpus_per_node`` cells, wrapped at 16), filled with the colour of the cell's
pipeline rank; the groups of the kinds switched on (tp, cp, dp, ep, etp, edp) are outlined, each kind with its own
colour, dash and inset, each group drawn as the runs of neighbouring cells it covers. The focus rank (click a
cell, or type it) has a thick frame, its own groups are drawn bold and listed under the picture, as
``mlite mesh --rank R`` prints them. Hovering a cell shows its node, stage and dense / expert coordinates.

Every number comes from :meth:`mlite.mesh.MeshPlan.ranks` (mlite's rank order); this module only draws.

Clicks inside an ``HTML`` widget reach the kernel through :class:`ClickBridge` (a hidden ``Text`` widget that an
inline ``onclick`` writes to), also used by the mesh tables of :mod:`widgets.planner` and :mod:`widgets.memory_view`.

CSS classes for tests: ``mlite-gpu-grid`` (the view), ``mlite-gpu-grid-svg`` (the picture; each cell is a
``g.mlite-gpu-cell`` with ``data-rank`` and ``data-pp``), ``mlite-gpu-groups`` (the focus rank's groups),
``mlite-gpu-focus`` (rank box), ``mlite-gpu-kind-<kind>`` (outline toggles).
"""

from __future__ import annotations

import itertools

import ipywidgets as W
import traitlets

from mlite.mesh.axes import DENSE_DIMS
from mlite.mesh.layout import stage_text
from mlite.mesh.ranks import GROUP_KINDS, PRINTED_KINDS

from ._common import ErrorBanner, esc

__all__ = ["ClickBridge", "GpuGrid", "grid_svg", "groups_html", "legend_html", "short_list", "stage_text"]

LIST_KINDS = PRINTED_KINDS
"""Kinds listed for the focus rank (``mlite mesh --rank`` order: tp, cp, dp, pp, dp_cp, ep, etp, edp)."""
KINDS = tuple(k for k in LIST_KINDS if len(GROUP_KINDS[k][1]) == 1 and k != "pp")
"""Group kinds that can be outlined: one per world factor but pp (the fill colour): tp, cp, dp, ep, etp, edp."""
DEFAULT_KINDS = ("tp", "cp", "dp", "ep")
OUTLINE = {  # kind: (colour, dash, inset index)
    "tp": ("#1f4e9c", "", 0),
    "cp": ("#d35400", "5 2", 1),
    "dp": ("#7d3c98", "2 2", 2),
    "ep": ("#1e8449", "7 3", 3),
    "etp": ("#0e7c86", "3 3", 4),
    "edp": ("#b03a2e", "1 3", 5),
}
STAGE_COLORS = (
    "#cfe3f6",
    "#fde0c2",
    "#d4efd0",
    "#f7d1d3",
    "#e3d7f0",
    "#f2e6c4",
    "#d3eef0",
    "#f4d9ec",
    "#e6ecc6",
    "#dedede",
    "#c9e6dc",
    "#efdcc9",
)
"""Fill of pipeline rank i is ``STAGE_COLORS[i % 12]``."""
MAX_DRAWN = 256
"""Ranks drawn at most (the first ones; the layout repeats per pipeline stage)."""
MAX_COLS = 16

_CELL_W, _CELL_H, _GAP, _INSET, _LABEL_W, _NODE_PAD = 70, 56, 4, 2.5, 64, 6


class ClickBridge:
    """Clicks on ``data-pick`` elements of an ``HTML`` widget -> ``callback(pick)`` in the kernel.

    ipywidgets' ``HTML`` has no click events. The HTML carries ``data-pick="..."`` on clickable elements and
    ``onclick="{bridge.onclick}"`` on a container; the handler writes the pick plus a time stamp (so the same pick
    twice is still a change) into a hidden ``Text`` (class ``mlite-pick``) that sits next to the HTML inside
    :meth:`box` (class ``mlite-pick-scope``). Works wherever widget HTML is rendered (JupyterLab, Notebook 7,
    VS Code); in headless runs nothing clicks, and :meth:`pick` does the same from Python.
    """

    onclick = (
        "var t=event.target.closest('[data-pick]');if(!t)return;"
        "var i=this.closest('.mlite-pick-scope').querySelector('.mlite-pick input');if(!i)return;"
        "i.value=t.getAttribute('data-pick')+'@'+Date.now();"
        "i.dispatchEvent(new Event('change',{bubbles:true}));"
    )
    """Inline handler for the container element (single quotes only: it sits in a double-quoted attribute)."""

    def __init__(self, callback, banner: ErrorBanner | None = None):
        self._callback = banner.guard(callback) if banner else callback
        self._count = itertools.count()
        self.text = W.Text(value="", layout=W.Layout(display="none"))
        self.text.add_class("mlite-pick")
        self.text.observe(self._changed, names="value")

    def box(self, *children, **kwargs) -> W.VBox:
        """The scope: ``children`` (the HTML widgets with ``data-pick`` elements) and the hidden Text."""
        b = W.VBox([*children, self.text], **kwargs)
        b.add_class("mlite-pick-scope")
        return b

    def pick(self, what: str) -> None:
        """Act as if an element with ``data-pick=what`` was clicked."""
        self.text.value = f"{what}@py{next(self._count)}"

    def _changed(self, change) -> None:
        value = change["new"]
        if value:
            self._callback(value.rsplit("@", 1)[0])


# ---------------------------------------------------------------------------------------------- drawing
def _runs(ranks: list[int], gpn: int, cols: int) -> list[tuple[int, int]]:
    """Maximal runs ``(first, last)`` of consecutive ranks that sit next to each other on one drawn line."""
    out: list[tuple[int, int]] = []
    line = lambda r: (r // gpn, (r % gpn) // cols)
    for r in sorted(ranks):
        if out and r == out[-1][1] + 1 and line(r) == line(out[-1][1]):
            out[-1] = (out[-1][0], r)
        else:
            out.append((r, r))
    return out


def short_list(ranks: list[int], limit: int = 12) -> str:
    """``[0, 8, 16]`` or ``[0, 8, …, 120] (16 ranks)`` for long groups."""
    if len(ranks) <= limit:
        return "[" + ", ".join(map(str, ranks)) + "]"
    head = ", ".join(map(str, ranks[: limit - 2]))
    return f"[{head}, …, {ranks[-1]}] ({len(ranks)} ranks)"


def grid_svg(plan, *, kinds=DEFAULT_KINDS, focus: int | None = 0, max_ranks: int = MAX_DRAWN) -> str:
    """The SVG picture of ``plan`` (a :class:`mlite.mesh.MeshPlan` whose world split is valid)."""
    layout = plan.ranks()
    world, gpn = plan.ngpu, plan.gpus_per_node
    cols = min(gpn, MAX_COLS)
    lines_per_node = -(-gpn // cols)
    shown = min(world, max_ranks)
    nodes = -(-shown // gpn)
    node_h = lines_per_node * (_CELL_H + _GAP) - _GAP + 2 * _NODE_PAD
    width = _LABEL_W + cols * (_CELL_W + _GAP) - _GAP + 2 * _NODE_PAD
    height = nodes * (node_h + _GAP)
    focus = focus if focus is not None and 0 <= focus < shown else None

    def xy(r: int) -> tuple[float, float]:
        node, local = divmod(r, gpn)
        line, col = divmod(local, cols)
        return (
            _LABEL_W + _NODE_PAD + col * (_CELL_W + _GAP),
            node * (node_h + _GAP) + _NODE_PAD + line * (_CELL_H + _GAP),
        )

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" style="font-family:sans-serif" onclick="{ClickBridge.onclick}">'
    ]
    for n in range(nodes):
        y = n * (node_h + _GAP)
        first, last = n * gpn, min((n + 1) * gpn, world) - 1
        out.append(
            f'<rect x="{_LABEL_W - 4}" y="{y}" width="{width - _LABEL_W + 4}" height="{node_h}" rx="6" '
            f'fill="#fafafa" stroke="#b8b8b8"/>'
            f'<text x="4" y="{y + node_h / 2 - 4}" font-size="12" font-weight="600">node {n}</text>'
            f'<text x="4" y="{y + node_h / 2 + 11}" font-size="10" fill="#666">ranks {first}–{last}</text>'
        )
    sizes = layout.sizes
    for r in range(shown):
        d, e = layout.coords(r, "dense"), layout.coords(r, "expert")
        x, y = xy(r)
        fill = STAGE_COLORS[d["pp"] % len(STAGE_COLORS)]
        tip = (
            f"rank {r} · node {r // gpn}, GPU {r % gpn}\n"
            f"pipeline rank {d['pp']}: {stage_text(plan, d['pp'])}\n"
            f"dense: {_coords(d, ' · ')}\n"
            f"expert: {_coords(e, ' · ')}"
        )
        coord = " ".join(f"{k[0]}{d[k]}" for k in DENSE_DIMS if k != "pp" and sizes["dense"][k] > 1)
        if sizes["expert"]["ep"] > 1:
            coord += f" e{e['ep']}"
        frame = ' stroke="#111" stroke-width="3"' if r == focus else ' stroke="#9a9a9a" stroke-width="1"'
        out.append(
            f'<g class="mlite-gpu-cell" data-rank="{r}" data-pp="{d["pp"]}" data-pick="rank:{r}" '
            f'style="cursor:pointer"><title>{esc(tip)}</title>'
            f'<rect x="{x}" y="{y}" width="{_CELL_W}" height="{_CELL_H}" rx="4" fill="{fill}"{frame}/>'
            f'<text x="{x + _CELL_W / 2}" y="{y + _CELL_H / 2 + 1}" font-size="13" font-weight="700" '
            f'text-anchor="middle">{r}</text>'
            f'<text x="{x + _CELL_W / 2}" y="{y + _CELL_H / 2 + 13}" font-size="8.5" fill="#444" '
            f'text-anchor="middle">{esc(coord.strip())}</text></g>'
        )
    faint: list[str] = []  # the focus rank's groups are drawn last, on top
    bold: list[str] = []
    for kind in kinds:
        color, dash, level = OUTLINE[kind]
        inset = _INSET * (level + 1)
        for group in layout.groups(kind):
            if len(group) < 2:
                continue
            mine = focus is not None and focus in group
            sw, op = (2.6, 1.0) if mine else (1.2, 0.55)
            for a, b in _runs([r for r in group if r < shown], gpn, cols):
                (xa, ya), (xb, _) = xy(a), xy(b)
                (bold if mine else faint).append(
                    f'<rect class="mlite-gpu-outline-{kind}" x="{xa + inset}" y="{ya + inset}" '
                    f'width="{xb - xa + _CELL_W - 2 * inset}" height="{_CELL_H - 2 * inset}" rx="3" '
                    f'fill="none" stroke="{color}" stroke-width="{sw}" stroke-opacity="{op}"'
                    + (f' stroke-dasharray="{dash}"' if dash else "")
                    + ' pointer-events="none"/>'
                )
    out += faint + bold
    out.append("</svg>")
    return "".join(out)


def _coords(c: dict, sep: str) -> str:
    """``tp 0 · cp 1 · dp 0 · pp 0``: a rank's coordinates (dense or expert, fastest first)."""
    return sep.join(f"{k} {v}" for k, v in c.items())


def legend_html(plan, kinds=DEFAULT_KINDS) -> str:
    """Stage colours (what each pipeline rank runs) and the outline styles."""
    items = []
    for p in range(plan.parallel.pp):
        items.append(
            f'<span style="display:inline-block;margin:0 12px 2px 0"><span style="display:inline-block;'
            f"width:12px;height:12px;background:{STAGE_COLORS[p % len(STAGE_COLORS)]};border:1px solid #999;"
            f'vertical-align:middle"></span> pp {p}: {esc(stage_text(plan, p))}</span>'
        )
    for kind in kinds:
        color, dash, _ = OUTLINE[kind]
        items.append(
            f'<span style="display:inline-block;margin:0 12px 2px 0"><svg width="26" height="12">'
            f'<rect x="1" y="1" width="24" height="10" rx="2" fill="none" stroke="{color}" stroke-width="2"'
            + (f' stroke-dasharray="{dash}"' if dash else "")
            + f"/></svg> {kind} group</span>"
        )
    return f'<div style="font-size:90%;line-height:1.6">{"".join(items)}</div>'


def groups_html(plan, rank: int) -> str:
    """``rank``'s groups, as ``mlite mesh --rank`` lists them."""
    layout = plan.ranks()
    d, e = layout.coords(rank, "dense"), layout.coords(rank, "expert")
    rows = "".join(
        f"<tr><td style='padding:0 10px 0 0'><b>{k}</b></td><td><code>"
        f"{esc(short_list(layout.group(k, rank)))}</code></td></tr>"
        for k in LIST_KINDS
    )
    return (
        f"<div style='line-height:1.4'><b>rank {rank}</b> · node {rank // plan.gpus_per_node} · dense "
        f"({_coords(d, ', ')}) · expert ({_coords(e, ', ')})"
        f"<table style='font-size:92%'>{rows}</table></div>"
    )


# ---------------------------------------------------------------------------------------------- view
class GpuGrid(W.VBox):
    """The GPUs of ``plan``: a cell per rank by node, coloured by stage, groups outlined; click a cell to focus."""

    plan = traitlets.Any(None, allow_none=True)
    """The :class:`mlite.mesh.MeshPlan` drawn."""
    focus = traitlets.Int(0)
    """The rank whose groups are drawn bold and listed."""

    def __init__(self, plan=None, *, errors: ErrorBanner | None = None, **kwargs):
        super().__init__(**kwargs)
        self.add_class("mlite-gpu-grid")
        own = errors is None
        self.errors = errors or ErrorBanner()
        """Inline error line; the owning view's when it passes ``errors``."""
        self._kinds = {}
        for k in KINDS:
            b = W.ToggleButton(
                value=k in DEFAULT_KINDS,
                description=k,
                tooltip=f"outline the {k} groups",
                layout=W.Layout(width="52px"),
            )
            b.add_class(f"mlite-gpu-kind-{k}")
            b.observe(self.errors.guard(lambda _c: self._render()), names="value")
            self._kinds[k] = b
        self._rank = W.BoundedIntText(
            value=0,
            min=0,
            max=0,
            description="rank",
            layout=W.Layout(width="150px"),
            tooltip="focus rank: its groups are drawn bold and listed below",
        )
        self._rank.add_class("mlite-gpu-focus")
        self._svg = W.HTML()
        self._svg.add_class("mlite-gpu-grid-svg")
        self._legend = W.HTML()
        self._groups = W.HTML()
        self._groups.add_class("mlite-gpu-groups")
        self._note = W.HTML()
        self.bridge = ClickBridge(self._on_pick, self.errors)
        self._picture = W.VBox([self.bridge.box(self._svg), self._legend, self._groups])
        controls = W.HBox(
            [W.HTML("<b>outline</b>&nbsp;", layout=W.Layout(margin="4px 0 0 0")), *self._kinds.values(), self._rank]
        )
        self.children = (controls, *([self.errors] if own else []), self._note, self._picture)
        traitlets.link((self, "focus"), (self._rank, "value"))
        self.observe(self.errors.guard(lambda _c: self._render()), names=["plan", "focus"])
        self.plan = plan

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds outlined now."""
        return tuple(k for k, b in self._kinds.items() if b.value)

    def set_kinds(self, kinds) -> None:
        for k, b in self._kinds.items():
            b.value = k in kinds

    def _on_pick(self, what: str) -> None:
        kind, _, value = what.partition(":")
        if kind == "rank":
            self.focus = int(value)

    def _render(self) -> None:
        plan = self.plan
        if plan is None or not plan.dp or not plan.edp:
            why = next((f.message for f in plan.errors if f.rule == "world"), "") if plan is not None else ""
            self._note.value = f"<i>No picture: {esc(why or 'no mesh yet')}.</i>"
            self._picture.layout.display = "none"
            return
        top = plan.ngpu - 1
        self._rank.max = top
        if self.focus > top:
            self.focus = 0  # re-renders through the observer
            return
        shown = min(plan.ngpu, MAX_DRAWN)
        self._note.value = (
            ""
            if shown == plan.ngpu
            else f"<i>Showing ranks 0–{shown - 1} of {plan.ngpu} (the first "
            f"{-(-shown // plan.gpus_per_node)} nodes); every pipeline stage repeats this pattern.</i>"
        )
        self._svg.value = grid_svg(plan, kinds=self.kinds, focus=self.focus)
        self._legend.value = legend_html(plan, self.kinds)
        self._groups.value = groups_html(plan, self.focus)
        self._picture.layout.display = None
