"""``ExportView``: write the verl launcher and the Slurm + Ray job for a model, mesh and training options into a
folder, and show the files in tabs. Everything comes from :func:`mlite.export.write`; this module lays it out.

Other views fill it: ``view.set_plan(model=..., parallel=ParallelConfig(...), options=TrainingOptions(...),
nodes=..., gpus_per_node=...)``, or ``traitlets.dlink((explorer, "ref"), (view, "model"))``. The mesh fields and
the main memory options are editable here too; options not shown keep the values of the ``options`` trait.

CSS classes for tests: ``mlite-export-view`` (the view), ``mlite-export-model``, ``mlite-export-target``,
``mlite-export-nodes``, ``mlite-export-gpus``, ``mlite-export-out``, ``mlite-export-write`` (button),
``mlite-export-summary``, ``mlite-export-tabs`` (one tab per file, its text in ``.mlite-export-file``),
``mlite-error`` (one-line error, e.g. an invalid mesh).
"""

from __future__ import annotations

from dataclasses import replace

import ipywidgets as W
import traitlets

from mlite.errors import MliteError
from mlite.export import TARGETS, ExportPlan, InvalidMesh, write
from mlite.launch.config import export_root
from mlite.memory import TrainingOptions
from mlite.mesh import ParallelConfig
from mlite.mesh.axes import AXES, sizes_text
from mlite.models import available_models
from mlite.options.table import EXPORT, TRAINING, rows_by_field

from ._common import ErrorBanner, esc

DEFAULT_OUT = None
"""Files go to ``<out>/<experiment name>/``; None: :func:`mlite.launch.config.export_root` (``runs/export`` beside
the notebook, or under ``$MLITE_RUNS``; git-ignored), where notebook 02 finds the newest plan."""

_ROWS = rows_by_field(TRAINING)
"""The options table's rows: choices, defaults and labels of the option controls."""
_PLAN = rows_by_field(EXPORT)


TAB_STYLE = (
    "<style>.mlite-export-tabs > .lm-TabBar .lm-TabBar-tab, .mlite-export-tabs > .p-TabBar .p-TabBar-tab "
    "{flex: 0 0 auto !important; max-width: none !important; min-width: 0 !important}</style>"
)
"""CSS of the export view's tabs: each tab as wide as its title (a file name), none cut."""


class ExportView(W.VBox):
    """Pick a target and a cluster, press *Write files*, read the launcher and the job in tabs."""

    model = traitlets.Unicode("")
    """Model config: a name in ``data/models/`` or a path."""
    options = traitlets.Instance(TrainingOptions, args=())
    """Training options (the memory flags); the fields shown here override it."""
    result = traitlets.Any(None, allow_none=True)
    """The last :class:`mlite.export.ExportResult` written (None before the first write or after an error)."""

    def __init__(self, model: str = "Qwen3-30B-A3B", *, out: str | None = DEFAULT_OUT, **kwargs):
        super().__init__(**kwargs)
        self.add_class("mlite-export-view")
        names = available_models()
        self._model = W.Combobox(
            value=model, options=names, description="Model", ensure_option=False, layout=W.Layout(width="340px")
        )
        self._model.add_class("mlite-export-model")
        self._target = W.Dropdown(
            options=list(TARGETS), value=_PLAN["target"].default, description="Target", layout=W.Layout(width="300px")
        )
        self._target.add_class("mlite-export-target")
        self._nodes = W.BoundedIntText(value=1, min=1, max=4096, description="Nodes", layout=W.Layout(width="150px"))
        self._nodes.add_class("mlite-export-nodes")
        self._gpus = W.BoundedIntText(
            value=_ROWS["gpus_per_node"].default, min=1, max=64, description="GPUs/node", layout=W.Layout(width="160px")
        )
        self._gpus.add_class("mlite-export-gpus")
        small = W.Layout(width="110px")
        self._mesh = {
            a.name: W.BoundedIntText(
                value=1, min=1, max=4096, description=a.label, layout=small, style={"description_width": "32px"}
            )
            for a in AXES
        }
        self._layout = W.Text(value="", placeholder="pp_layout (optional)", layout=W.Layout(width="260px"))
        o = TrainingOptions()
        self._optimizer = W.Dropdown(
            options=list(_ROWS["optimizer"].choices),
            value=o.optimizer,
            description=_ROWS["optimizer"].label,
            layout=W.Layout(width="200px"),
        )
        self._pao = W.Checkbox(
            value=o.use_precision_aware_optimizer,
            description=_ROWS["use_precision_aware_optimizer"].label,
            indent=False,
            layout=W.Layout(width="250px"),
        )
        self._fraction = W.BoundedFloatText(
            value=o.offload_fraction,
            min=0.0,
            max=1.0,
            step=0.1,
            description=_ROWS["offload_fraction"].label,
            style={"description_width": "110px"},
            layout=W.Layout(width="190px"),
        )
        self._recompute = W.Dropdown(
            options=list(_ROWS["recompute"].choices),
            value=o.recompute,
            description=_ROWS["recompute"].label,
            layout=W.Layout(width="200px"),
        )
        self._out = W.Text(
            value=str(out if out is not None else export_root()), description="Folder", layout=W.Layout(width="420px")
        )
        self._out.add_class("mlite-export-out")
        self._write = W.Button(description="Write files", button_style="primary", icon="save")
        self._write.add_class("mlite-export-write")
        self._train_mtp: bool | None = None
        """Whether the plan trains MTP (an imported launcher's choice, through the planner: :meth:`set_plan`)."""
        self.errors = ErrorBanner()
        """Inline error line (bad input, invalid mesh) and traceback area (bugs)."""
        self._summary = W.HTML()
        self._summary.add_class("mlite-export-summary")
        self._tabs = W.Tab()
        self._tabs.add_class("mlite-export-tabs")
        self._tab_style = W.HTML(TAB_STYLE)
        """Tabs as wide as their file names (JupyterLab's default cuts them at 144 px: "run_verl_mlite_grpo.s")."""
        self.children = (
            W.HBox([self._model, self._target, self._nodes, self._gpus]),
            W.HBox(list(self._mesh.values()) + [self._layout]),
            W.HBox([self._optimizer, self._pao, self._fraction, self._recompute]),
            W.HBox([self._out, self._write]),
            self.errors,
            self._summary,
            self._tab_style,
            self._tabs,
        )
        self._write.on_click(self.errors.guard(lambda _b: self.export()))
        self.model = model

    @traitlets.observe("model")
    def _model_changed(self, change) -> None:
        self._model.value = change["new"]

    @traitlets.observe("options")
    def _options_changed(self, change) -> None:
        o = change["new"]
        self._optimizer.value = o.optimizer
        self._pao.value = o.use_precision_aware_optimizer
        self._fraction.value = o.offload_fraction
        self._recompute.value = o.recompute

    # ------------------------------------------------------------------ actions
    def set_plan(
        self,
        *,
        model: str | None = None,
        parallel: ParallelConfig | None = None,
        options: TrainingOptions | None = None,
        nodes: int | None = None,
        gpus_per_node: int | None = None,
        target: str | None = None,
        train_mtp: bool | None = None,
    ) -> None:
        """Fill the view from another view's choice (any argument left None keeps what is shown, but ``train_mtp``:
        None is the planner's default, MTP trained when the model has some)."""
        self._train_mtp = train_mtp
        if model is not None:
            self.model = model
        if parallel is not None:
            for k, v in parallel.sizes().items():
                self._mesh[k].value = v
            self._layout.value = parallel.pp_layout or ""
        if options is not None:
            self.options = options
        if nodes is not None:
            self._nodes.value = nodes
        if gpus_per_node is not None:
            self._gpus.value = gpus_per_node
        if target is not None:
            self._target.value = target

    def follow(self, planner, memory=None) -> None:
        """Track a :class:`~widgets.planner.MeshPlanner` (model, mesh, GPUs per node, nodes for its GPU count) and
        a :class:`~widgets.memory_view.MemoryView` (training options) from now on."""

        def sync(_=None):
            plan = planner.plan
            gpn = planner.gpus_per_node
            self.set_plan(
                model=planner.model_ref or None,
                parallel=plan.parallel if plan is not None else None,
                options=memory.options() if memory is not None else None,
                gpus_per_node=gpn,
                nodes=max(1, -(-plan.ngpu // gpn)) if plan is not None else None,
                train_mtp=planner.train_mtp,  # an imported launcher's MTP training, exported as it was
            )

        planner.observe(sync, names=["plan", "model_ref"])
        if memory is not None:
            memory.observe(sync, names=["estimate"])
        sync()

    def plan(self) -> ExportPlan:
        """The :class:`ExportPlan` the controls describe."""
        model = (self._model.value or "").strip()
        if not model:
            raise MliteError("Model: pick a model from the list or type a path to a config.json")
        parallel = ParallelConfig(
            **{k: w.value for k, w in self._mesh.items()}, pp_layout=self._layout.value.strip() or None
        )
        options = replace(
            self.options,
            optimizer=self._optimizer.value,
            use_precision_aware_optimizer=self._pao.value,
            offload_fraction=float(self._fraction.value),
            recompute=self._recompute.value,
        )
        return ExportPlan(
            model=model,
            target=self._target.value,
            parallel=parallel,
            options=options,
            nodes=self._nodes.value,
            gpus_per_node=self._gpus.value,
            train_mtp=self._train_mtp,
        )

    def export(self):
        """Write the files for the current controls and show them; an invalid mesh shows its reasons inline."""
        self.result = None
        plan = self.plan()
        folder = f"{self._out.value.strip() or export_root()}/{plan.name}"
        try:
            res = write(plan, folder)
        except InvalidMesh:
            self._summary.value = ""
            self._tabs.children = ()
            raise
        m = res.mesh
        warn = "".join(f"<li>{esc(w)}</li>" for w in m["warnings"] + res.notes)
        self._summary.value = (
            f"<div><b>{esc(plan.target)}</b>: {plan.nodes} x {plan.gpus_per_node} GPUs, {sizes_text(m)} "
            f"&rarr; dp={m['dp']} edp={m['edp']}<br>"
            f"wrote {len(res.paths)} files to <code>{esc(folder)}</code>; submit with "
            f"<code>cd {esc(folder)} &amp;&amp; mkdir -p {esc(plan.log_dir)} &amp;&amp; sbatch {esc(res.job)}</code>"
            + (f"<ul style='margin:2px 0'>{warn}</ul>" if warn else "")
            + "</div>"
        )
        pages = []
        for text in res.files.values():
            page = W.HTML(
                value=f'<pre class="mlite-export-file" style="max-height:420px;overflow:auto;'
                f'font-size:85%">{esc(text)}</pre>'
            )
            pages.append(page)
        self._tabs.children = pages
        for i, name in enumerate(res.files):
            self._tabs.set_title(i, name)
        self.result = res
        return res
