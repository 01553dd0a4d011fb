"""``MeshPlanner``: choose ``tp, pp, vpp, cp, ep, etp`` for a model on N GPUs, checked the way Megatron-Core checks.

Controls offer sensible values only (divisors of the GPU count that the model can use: TP up to the attention
heads, PP up to the layers, EP up to the routed experts, ETP/EP only for MoE models); the value in use is always
listed, so a mesh that turns invalid (another model, another GPU count) stays visible with its reasons. Every
finding of :func:`mlite.mesh.resolve` is shown inline: its rule, its message and one button per fix the rule
offers (a fix is a dict of fields -> values; the planner renders it and applies it, nothing more). Below: the
picture of the GPUs (:class:`widgets.gpu_grid.GpuGrid`), the pipeline stages, the
``mlite mesh`` command line of the mesh, and :class:`MeshTable`, every valid mesh (:func:`mlite.mesh.enumerate_meshes`)
ranked by the planner's score, sortable by any column; clicking a row applies that mesh.

Linking: ``MeshPlanner(explorer)`` follows a :class:`widgets.model_explorer.ModelExplorer` (its ``spec`` and
``ref``); ``planner.plan`` (a :class:`mlite.mesh.MeshPlan`, valid or not) is what other views observe
(:class:`widgets.memory_view.MemoryView`); ``planner.apply(tp=2, ep=8)`` sets controls from code.

CSS classes for tests: ``mlite-planner`` (the view), ``mlite-planner-<field>`` (controls: ngpu, gpus_per_node,
seq_len, tp, pp, vpp, cp, ep, etp, pp_layout), ``mlite-mesh-summary`` (with ``mlite-mesh-valid`` or
``mlite-mesh-invalid`` inside), ``mlite-mesh-findings``, ``mlite-mesh-error`` / ``-warning`` / ``-info`` (one per
finding), ``mlite-mesh-nearest`` (buttons), ``mlite-mesh-stages``, ``mlite-mesh-command``, ``mlite-mesh-table``
(:class:`MeshTable`: header cells ``th[data-pick="sort:<key>"]``, rows ``tr.mlite-mesh-row[data-key]``, the
current mesh ``tr.mlite-row-current``), ``mlite-error`` (unexpected errors only).
"""

from __future__ import annotations

from pathlib import Path

import ipywidgets as W
import traitlets

from mlite.mesh import (
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_SEQ_LEN,
    ParallelConfig,
    enumerate_meshes,
    resolve,
)
from mlite.mesh.axes import DENSE_DIMS, EXPERT_DIMS, product_label
from mlite.mesh.choices import (
    FIELDS,
    config_values,
    field_options,
    mesh_command,
    mesh_key,
    planner_rows,
)
from mlite.mesh.rules import fix_label

from ._common import ErrorBanner, esc
from .gpu_grid import GpuGrid, stage_text
from .mesh_table import MESH_COLUMNS, RANK_COLUMN, Column, MeshTable

__all__ = [
    "FIELDS",
    "Column",
    "MeshPlanner",
    "MeshTable",
    "field_options",
    "mesh_command",
    "mesh_key",
    "planner_rows",
]

GPUS_PER_NODE = (1, 2, 4, 8, 16, 32, 64, 72)
_LEVELS = {"error": (0, "&#10007;", "#b00020"), "warning": (1, "&#9888;", "#9a6700"), "info": (2, "&#8505;", "#555")}


PLANNER_COLUMNS = [
    RANK_COLUMN,
    *MESH_COLUMNS,
    Column(
        "score",
        "score",
        fmt=lambda r: f"{r['score']:.2f}",
        tip="lower is better: 100·[TP spans nodes] + 30·[EP·ETP spans nodes] + 50·bubble + 4·log2 CP + "
        "2·log2 TP + log2 ETP + 0.5·[uneven stages]",
    ),
    Column("stages", "stages", numeric=False, title=lambda r: r["layout"], tip="even split or an uneven layout"),
    Column("warnings", "warnings", title=lambda r: r["warning_text"], tip="warnings (hover a cell to read them)"),
]


# ---------------------------------------------------------------------------------------------- the planner
class MeshPlanner(W.VBox):
    """Choose a mesh for a model on N GPUs; see why it is invalid, the GPUs it uses, and every valid mesh."""

    spec = traitlets.Any(None, allow_none=True)
    """The :class:`mlite.models.ModelSpec` planned for (follows the model explorer when given one)."""
    model_ref = traitlets.Unicode("")
    """The model as the command line names it (a name in ``data/models/`` or a path)."""
    plan = traitlets.Any(None, allow_none=True)
    """The current :class:`mlite.mesh.MeshPlan` (valid or not); None without a model."""

    def __init__(
        self,
        model=None,
        *,
        ngpu: int = 16,
        gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
        seq_len: int = DEFAULT_SEQ_LEN,
        pp_layout: str = "",
        **kwargs,
    ):
        """``kwargs``: the starting size of each axis by name (``tp=2``, default 1; :data:`FIELDS`), the rest to
        the VBox."""
        sizes = {f: kwargs.pop(f, 1) for f in FIELDS}
        super().__init__(**kwargs)
        self.add_class("mlite-planner")
        self.errors = ErrorBanner()
        """Inline error line (bad input) and traceback area (bugs)."""
        self._busy = True
        self._table_key: tuple | None = None
        self._extra: list[W.Widget] = []
        self._findings_key: list | None = None
        """The findings the lines below show (re-rendered only when they change)."""
        self._inherited: dict = {}
        self._train_mtp: bool | None = None
        c = self.controls = {
            "ngpu": W.BoundedIntText(
                value=ngpu,
                min=1,
                max=1 << 20,
                description="GPUs",
                continuous_update=False,
                layout=W.Layout(width="170px"),
            ),
            "gpus_per_node": W.Dropdown(
                options=sorted({*GPUS_PER_NODE, gpus_per_node}),
                value=gpus_per_node,
                description="GPUs/node",
                layout=W.Layout(width="170px"),
            ),
            "seq_len": W.BoundedIntText(
                value=seq_len,
                min=1,
                max=1 << 24,
                description="seq_len",
                continuous_update=False,
                layout=W.Layout(width="190px"),
            ),
        }
        """Every control by field name: ngpu, gpus_per_node, seq_len, tp, pp, vpp, cp, ep, etp, pp_layout."""
        for f, v in sizes.items():
            c[f] = W.Dropdown(
                options=[v], value=v, description=f, layout=W.Layout(width="118px"), style={"description_width": "32px"}
            )
        c["pp_layout"] = W.Text(
            value=pp_layout or "",
            description="pp_layout",
            continuous_update=False,
            placeholder="even split; or uneven stages, e.g. E,t*13|t*14|t*14|t*7,L",
            layout=W.Layout(width="560px"),
        )
        for name, w in c.items():
            w.add_class(f"mlite-planner-{name}")
        self._summary = W.HTML()
        self._summary.add_class("mlite-mesh-summary")
        self._findings = W.VBox()
        self._findings.add_class("mlite-mesh-findings")
        self._command = W.HTML()
        self._command.add_class("mlite-mesh-command")
        self._stages = W.HTML()
        self._stages.add_class("mlite-mesh-stages")
        self.grid = GpuGrid(errors=self.errors)
        """The picture of the GPUs."""
        self.table = MeshTable(
            PLANNER_COLUMNS, on_pick=lambda row: self.apply(row["cfg"]), css="mlite-mesh-table", errors=self.errors
        )
        """Every valid mesh, ranked."""
        self._table_title = W.HTML()
        self._body = W.VBox(
            [
                self._summary,
                self._findings,
                self._command,
                W.HTML(
                    "<b>GPUs</b> <span style='color:#666'>(colour = pipeline rank; outlines = groups; hover a cell "
                    "for its coordinates, click it to list its groups)</span>"
                ),
                self.grid,
                self._stages,
                self._table_title,
                self.table,
            ]
        )
        self.children = (
            W.HBox([c["ngpu"], c["gpus_per_node"], c["seq_len"]]),
            W.HBox([c[f] for f in FIELDS]),
            c["pp_layout"],
            self.errors,
            self._body,
        )

        if isinstance(model, traitlets.HasTraits) and model.has_trait("spec"):
            traitlets.dlink((model, "spec"), (self, "spec"))
            if model.has_trait("ref"):
                traitlets.dlink((model, "ref"), (self, "model_ref"))
        elif isinstance(model, (str, Path)):
            from mlite.models import from_hf_config

            self.spec = from_hf_config(model)
            self.model_ref = str(model)
        elif model is not None:
            self.spec = model
        self._busy = False
        for w in c.values():
            w.observe(self.errors.guard(self._on_control), names="value")
        self.observe(self.errors.guard(self._on_spec), names="spec")
        self.observe(self.errors.guard(lambda _c: self._render_command()), names="model_ref")
        self.errors.run(self.refresh)

    # ------------------------------------------------------------------ state
    def parallel(self) -> ParallelConfig:
        """The ParallelConfig of the controls."""
        c = self.controls
        return ParallelConfig(**{f: c[f].value for f in FIELDS}, pp_layout=c["pp_layout"].value.strip() or None)

    @property
    def ngpu(self) -> int:
        return self.controls["ngpu"].value

    @property
    def seq_len(self) -> int:
        return self.controls["seq_len"].value

    @property
    def gpus_per_node(self) -> int:
        return self.controls["gpus_per_node"].value

    def command(self, plan=None) -> str:
        """The ``mlite mesh`` command line of the current mesh (or of ``plan``)."""
        plan = plan or self.plan
        return mesh_command(self.model_ref or (self.spec.name if self.spec else "MODEL"), plan) if plan else ""

    def apply(self, values: ParallelConfig | dict | None = None, **kw) -> None:
        """Set controls (``tp=2``, ``ngpu=32``, ``pp_layout=...`` or a ParallelConfig), then re-plan once."""
        if isinstance(values, ParallelConfig):
            values = config_values(values)
        values = {**(values or {}), **kw}
        unknown = set(values) - set(self.controls)
        if unknown:
            raise KeyError(f"unknown planner fields: {sorted(unknown)}")
        self._busy = True
        try:
            for k, v in values.items():
                w = self.controls[k]
                if k == "pp_layout":
                    v = v or ""
                elif isinstance(w, W.Dropdown) and v not in w.options:
                    w.options = sorted({*w.options, v})
                w.value = v
        finally:
            self._busy = False
        self.refresh()

    def assume(
        self, inherited: dict | None = None, *, train_mtp: bool | None = None, values: dict | None = None
    ) -> None:
        """Say which sizes nobody chose (field -> :class:`mlite.mesh.Inherited`, e.g. a launcher's unset ETP) and
        whether MTP layers are trained; then set ``values`` (planner fields) and re-plan. A field's note is dropped
        once its control changes."""
        values = dict(values or {})
        self._train_mtp = train_mtp
        self._inherited = {}
        self.apply(values)
        self._inherited = {
            f: (self.controls[f].value, inh) for f, inh in (inherited or {}).items() if f in self.controls
        }
        self.refresh()

    @property
    def train_mtp(self) -> bool | None:
        """Whether the planned run trains the model's MTP layers (:meth:`assume`'s; None: the planner's default, yes
        when the model has some)."""
        return self._train_mtp

    def inherited(self) -> dict:
        """The inherited sizes still in effect (their controls unchanged since :meth:`assume`)."""
        return {f: inh for f, (v, inh) in self._inherited.items() if self.controls[f].value == v}

    def _on_spec(self, change) -> None:
        """A new model: a size it cannot use at all (not among :func:`field_options`: EP and ETP of a model without
        routed experts, which offers only 1; a TP above its bound) falls back to the largest size it offers below it;
        then re-plan.
        A size chosen for this model (:meth:`apply`) is kept, and reported when invalid."""
        spec = change["new"]
        if spec is not None and change["old"] is not None:
            self._busy = True
            try:
                for f in FIELDS:
                    w, offered = self.controls[f], field_options(spec, self.ngpu, f)
                    if w.value not in offered:
                        v = max([v for v in offered if v <= w.value] or [min(offered)])
                        w.options, w.value = tuple(offered), v
            finally:
                self._busy = False
        self.refresh()

    def _on_control(self, _change) -> None:
        if not self._busy:
            self.refresh()

    # ------------------------------------------------------------------ planning
    def _set_options(self, spec, ngpu: int) -> None:
        self._busy = True
        try:
            for f in FIELDS:
                w = self.controls[f]
                opts = tuple(sorted({*field_options(spec, ngpu, f), w.value}))
                if tuple(w.options) != opts:
                    v = w.value
                    w.options = opts
                    w.value = v
        finally:
            self._busy = False

    def refresh(self) -> None:
        """Resolve the controls' mesh and redraw everything."""
        spec = self.spec
        if spec is None:
            self._body.layout.display = "none"
            self.plan = None
            return
        ngpu, seq_len, gpn = self.ngpu, self.seq_len, self.gpus_per_node
        self._set_options(spec, ngpu)
        plan = resolve(
            spec,
            ngpu,
            self.parallel(),
            seq_len=seq_len,
            gpus_per_node=gpn,
            inherited=self.inherited(),
            train_mtp=self._train_mtp,
        )
        self._render(spec, plan)
        key = (id(spec), spec.name, ngpu, seq_len, gpn)
        if key != self._table_key:
            meshes = enumerate_meshes(spec, ngpu, seq_len=seq_len, gpus_per_node=gpn)
            self._table_title.value = (
                f"<b>All valid meshes</b> of {esc(spec.name)} on {ngpu} GPUs "
                "(best first; the score is in the header's tooltip)"
            )
            self.table.set_rows(planner_rows(meshes), mesh_key(plan.parallel))
            self._table_key = key
        else:
            self.table.set_current(mesh_key(plan.parallel))
        self._body.layout.display = None
        self.plan = plan

    # ------------------------------------------------------------------ rendering
    def _render(self, spec, plan) -> None:
        p = plan.parallel
        n_err = len(plan.errors)
        verdict = (
            '<span class="mlite-mesh-valid" style="color:#1e7e34;font-weight:700">&#10003; valid</span>'
            if plan.valid
            else f'<span class="mlite-mesh-invalid" style="color:#b00020;font-weight:700">&#10007; invalid: '
            f"{n_err} error{'s' if n_err > 1 else ''}</span>"
        )
        sizes = p.sizes() | {"dp": plan.dp or "—", "edp": plan.edp or "—"}
        dp, edp = sizes["dp"], sizes["edp"]
        dense, expert = (
            f"{product_label(dims, '·')} = {'·'.join(str(sizes[d]) for d in dims)}"
            for dims in (DENSE_DIMS, EXPERT_DIMS)
        )
        vocab = f"vocab {spec.vocab_size:,}" + (
            f" → padded {plan.padded_vocab:,}" if plan.padded_vocab != spec.vocab_size else ""
        )
        self._render_findings(plan)
        self._render_command(plan)
        if plan.stages:
            rows = "".join(
                f"<tr><td style='padding:0 10px 0 0'>pp {r}</td><td>{esc(stage_text(plan, r))}</td></tr>"
                for r in range(p.pp)
            )
            self._stages.value = (
                f"<div style='line-height:1.4'><b>Pipeline stages</b> ({esc(plan.layout_source)}, "
                f"PP·VPP = {p.pp}·{p.vpp}): <code>{esc(plan.layout)}</code>"
                f"<table style='font-size:92%'>{rows}</table></div>"
            )
        else:
            self._stages.value = "<div><b>Pipeline stages</b>: <i>the layers cannot be split as asked</i></div>"
        self.grid.plan = plan
        self._summary.value = (  # last: when it shows this mesh, the rest is drawn
            f"<div style='margin:4px 0;line-height:1.5'>{verdict} &nbsp; <b>{esc(spec.name)}</b> on {plan.ngpu} GPUs "
            f"({-(-plan.ngpu // plan.gpus_per_node)} node(s) of {plan.gpus_per_node}) &nbsp;·&nbsp; "
            f"<b>DP {dp}</b> · <b>EDP {edp}</b><br>"
            f"<span style='font-family:monospace'>dense ranks {dense}"
            f"{' = ' + str(plan.ngpu) if plan.dp else ''} &nbsp;|&nbsp; expert ranks {expert}"
            f"{' = ' + str(plan.ngpu) if plan.edp else ''}</span>"
            f"<br><span style='color:#555'>{esc(vocab)}</span></div>"
        )

    def _render_command(self, plan=None) -> None:
        cmd = self.command(plan)
        self._command.value = (
            f"<div style='margin:2px 0 6px 0;line-height:1.4'>same check on the command line: "
            f"<code>{esc(cmd)}</code></div>"
            if cmd
            else ""
        )

    def _render_findings(self, plan) -> None:
        key = [(f.level, f.rule, f.message, repr(f.fixes)) for f in plan.findings]
        if key == self._findings_key:  # the same lines: keep the widgets (new ones cost a comm round trip each)
            return
        self._findings_key = key
        for w in self._extra:
            w.close()
        self._extra = []
        rows = []
        for f in sorted(plan.findings, key=lambda f: _LEVELS[f.level][0]):
            _, icon, color = _LEVELS[f.level]
            line = W.HTML(
                f'<div style="line-height:1.4;margin:2px 0"><span style="color:{color}">{icon} '
                f"<b>{esc(f.level)} [{esc(f.rule)}]</b></span> {esc(f.message)}</div>",
                layout=W.Layout(flex="0 1 auto"),
            )
            line.add_class(f"mlite-mesh-{f.level}")
            buttons = (
                [
                    self._button(fix_label(fx), fx, tip=", ".join(f"{k} = {v}" for k, v in fx.items()))
                    for fx in f.fixes
                    if set(fx) <= set(self.controls)
                ]
                if f.level == "error"
                else []
            )
            row = W.HBox([line, *buttons], layout=W.Layout(align_items="center"))
            self._extra += [row, line, *buttons]
            rows.append(row)
        self._findings.children = rows

    def _button(self, label: str, values: dict, tip: str = "") -> W.Button:
        b = W.Button(description=label, tooltip=tip or f"apply {label}", layout=W.Layout(width="auto", height="26px"))
        b.add_class("mlite-mesh-nearest")
        b.on_click(self.errors.guard(lambda _b: self.apply(values)))
        return b
