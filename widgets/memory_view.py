"""``MemoryView``: per-GPU and host memory of the planner's mesh, and of every valid mesh, as options change.

Controls: GPU type (or GiB), optimizer (``dist_opt`` / ``fsdp2``), ``use_distributed_optimizer``, the
precision-aware optimizer (PAO) with its dtype pickers (``main_grads_dtype``, moments, ``store_param_remainders``;
disabled and fp32 while PAO is off, as Megatron-Core requires), ``offload_fraction`` (a live slider), runtime
context offload, ``recompute``, ``seq_len`` (the planner's own box, shown here too), micro-batch size and count,
sequence parallelism, attention kernel, the hardware profile of the time model (``hardware``: a shipped profile,
following the GPU type where it names one). Output: the GPU total of the most loaded rank against the usable memory,
a stacked bar per pipeline stage (params / grads / optimizer / activations / other) with the capacity line and
the host memory next to it, and beside them the predicted step of the mesh on the hardware
(:func:`mlite.time.predict`: a bar per part of the step, :mod:`widgets.time_chart`, with the step, tokens/s/GPU, MFU
and the assumptions), "why" (each number with its formula and the values that went in, from
``MemoryEstimate.to_dict()["formulas"]``), the best-ranked mesh that fits and the one with the least memory, and every valid mesh with its estimate
(:func:`mlite.time.table.mesh_table`), OOM cells in red; clicking a row applies that mesh in the planner.

"Best-ranked mesh that fits": the first row of :func:`mlite.time.table.mesh_table` on the hardware (meshes that fit
come first, the fastest predicted tokens/s/GPU first, then the planner's score:
:func:`mlite.mesh.enumerate.rank_key`); it is not the one with the least memory, which is shown next to it ("Least GPU memory", each with its apply button).

The whole-mesh table is recomputed after the controls stop moving for a moment (a quarter second, debounced on the
kernel's event loop) so dragging the slider stays live; the picked mesh's own figures follow every move.

CSS classes for tests: ``mlite-memory`` (the view), ``mlite-memory-<control>`` (controls, named after the
``TrainingOptions`` fields: gpu, gpu_memory_gib, optimizer, use_distributed_optimizer,
use_precision_aware_optimizer, main_grads_dtype, moment_dtype, store_param_remainders, offload_fraction, ...),
``mlite-memory-gpu-total`` (card; ``.mlite-figure-value`` "78.93 GiB", ``.mlite-figure-exact`` the bytes),
``mlite-memory-fits``, ``mlite-memory-host``, ``mlite-memory-bpp``, ``mlite-memory-chart`` (SVG; bars
``g.mlite-memory-bar[data-pp][data-total]``), ``mlite-memory-why``, ``mlite-memory-details``,
``mlite-memory-time`` (the time chart: bars ``g.mlite-time-bar[data-part][data-seconds]``, the line
``.mlite-time-summary``), ``mlite-memory-cheapest``, ``mlite-memory-table`` (a :class:`widgets.planner.MeshTable`; OOM cells
``td.mlite-oom``), ``mlite-memory-invalid`` (the planner's mesh is invalid), ``mlite-error``.
"""

from __future__ import annotations

from dataclasses import replace

import ipywidgets as W
import traitlets

from mlite.errors import MliteError
from mlite.memory import (
    GPU_MEMORY_GIB,
    TrainingOptions,
    estimate,
    state_bytes,
)
from mlite.mesh.axes import MESH_NAMES
from mlite.options.cli import memory_flags
from mlite.options.optimizers import BACKENDS, inapplicable
from mlite.options.table import TRAINING, rows_by_field
from mlite.time import hardware_names, predict
from mlite.time.hardware import hardware_for_gpu
from mlite.time.table import mesh_table

from ._common import ErrorBanner, esc, fmt_count
from .memory_chart import _card, _small_table, gib, memory_svg
from .memory_table import MEMORY_COLUMNS, _Debounce, memory_rows
from .mesh_table import MeshTable
from .planner import mesh_key
from .time_chart import time_svg

_ROWS = rows_by_field(TRAINING)
"""The options table's rows: labels and choices of the controls."""


def _row_layout() -> W.Layout:
    return W.Layout(align_items="center", flex_flow="row wrap", grid_gap="4px 8px")


class MemoryView(W.VBox):
    """Memory of the planner's mesh and of every valid mesh; follows the planner, applies meshes back to it."""

    estimate = traitlets.Any(None, allow_none=True)
    """The :class:`mlite.memory.MemoryEstimate` shown (None while the planner's mesh is invalid)."""

    step_time = traitlets.Any(None, allow_none=True)
    """The :class:`mlite.time.StepTime` of the planner's mesh on :meth:`hardware` (None while the mesh is invalid)."""

    def __init__(self, planner, *, gpu: str | float = "H100", hardware: str | None = None, **options):
        super().__init__()
        self.add_class("mlite-memory")
        self.planner = planner
        self.errors = ErrorBanner()
        self._busy = True
        self._table_key: tuple | None = None
        self._pending_key: tuple | None = None
        o = self._base = TrainingOptions(**options)
        """The options given: those without a control (recompute_modules, param_dtype, ...) are kept from here."""
        gpu_name = gpu if isinstance(gpu, str) and gpu in GPU_MEMORY_GIB else "custom"
        gib_value = GPU_MEMORY_GIB[gpu_name] if gpu_name != "custom" else float(gpu)
        lay = lambda w: W.Layout(width=w)
        narrow = {"description_width": "initial"}
        c = self.controls = {
            "gpu": W.Dropdown(
                options=[(f"{k} ({v:g} GiB)", k) for k, v in GPU_MEMORY_GIB.items()] + [("custom", "custom")],
                value=gpu_name,
                description="GPU",
                layout=lay("220px"),
            ),
            "gpu_memory_gib": W.BoundedFloatText(
                value=gib_value,
                min=1,
                max=4096,
                step=1,
                description=_ROWS["gpu_memory_gib"].label,
                continuous_update=False,
                layout=lay("150px"),
            ),
            "hardware": W.Dropdown(  # the time model's shipped profiles (mlite.time.hardware_names)
                options=hardware_names(),
                value=hardware or hardware_for_gpu(gpu_name),
                description="speed on",
                tooltip="hardware profile of the predicted step and of the table's speed ranking (mlite time)",
                layout=lay("150px"),
                style=narrow,
            ),
            "optimizer": W.ToggleButtons(
                options=list(_ROWS["optimizer"].choices),
                value=o.optimizer,
                tooltips=[BACKENDS[b].help for b in _ROWS["optimizer"].choices],
                style={"button_width": "80px"},
            ),
            "optimizer_algorithm": W.Dropdown(  # the registered algorithms (mlite.options.optimizers.ALGORITHMS)
                options=[(a, a) for a in _ROWS["optimizer_algorithm"].choices],
                value=o.optimizer_algorithm,
                description=_ROWS["optimizer_algorithm"].label,
                tooltip=_ROWS["optimizer_algorithm"].help,
                layout=lay("170px"),
                style=narrow,
            ),
            "use_distributed_optimizer": W.Checkbox(
                value=o.use_distributed_optimizer,
                description=_ROWS["use_distributed_optimizer"].label,
                indent=False,
                layout=lay("180px"),
            ),
            "use_precision_aware_optimizer": W.Checkbox(
                value=o.use_precision_aware_optimizer,
                description=_ROWS["use_precision_aware_optimizer"].label,
                indent=False,
                layout=lay("250px"),
            ),
            "main_grads_dtype": W.Dropdown(
                options=list(_ROWS["main_grads_dtype"].choices),
                value=o.main_grads_dtype,
                description=_ROWS["main_grads_dtype"].label,
                layout=lay("140px"),
                style=narrow,
            ),
            "moment_dtype": W.Dropdown(
                options=list(_ROWS["exp_avg_dtype"].choices),
                value=o.exp_avg_dtype,
                description=_ROWS["exp_avg_dtype"].label,
                layout=lay("160px"),
                style=narrow,
            ),
            "store_param_remainders": W.Checkbox(
                value=o.store_param_remainders,
                description=_ROWS["store_param_remainders"].label,
                indent=False,
                layout=lay("160px"),
            ),
            "offload_fraction": W.FloatSlider(
                value=o.offload_fraction,
                min=0.0,
                max=1.0,
                step=0.05,
                description=_ROWS["offload_fraction"].label,
                readout_format=".2f",
                continuous_update=True,
                layout=lay("420px"),
                style=narrow,
            ),
            "param_offload": W.Checkbox(
                value=o.param_offload, description=_ROWS["param_offload"].label, indent=False, layout=lay("130px")
            ),
            "optimizer_offload": W.Checkbox(
                value=o.optimizer_offload,
                description=_ROWS["optimizer_offload"].label,
                indent=False,
                layout=lay("150px"),
            ),
            "chunked_optimizer_state_offload": W.Checkbox(
                value=o.chunked_optimizer_state_offload,
                description=_ROWS["chunked_optimizer_state_offload"].label,
                indent=False,
                layout=lay("190px"),
            ),
            "optimizer_state_offload_chunk_size_mb": W.BoundedIntText(
                value=o.optimizer_state_offload_chunk_size_mb,
                min=0,
                max=1 << 20,
                description=_ROWS["optimizer_state_offload_chunk_size_mb"].label,
                layout=lay("190px"),
                style=narrow,
            ),
            "optimizer_state_offload_fraction": W.FloatSlider(
                value=o.optimizer_state_offload_fraction,
                min=0.0,
                max=1.0,
                step=0.05,
                description=_ROWS["optimizer_state_offload_fraction"].label,
                readout_format=".2f",
                continuous_update=True,
                layout=lay("300px"),
                style=narrow,
            ),
            "offload_master_for_forward": W.Checkbox(
                value=o.offload_master_for_forward,
                description=_ROWS["offload_master_for_forward"].label,
                indent=False,
                layout=lay("230px"),
            ),
            "precision": W.Dropdown(  # Megatron Lite's precision profiles (mlite.options.precision.PRECISIONS)
                options=list(_ROWS["precision"].choices),
                value=o.precision,
                description=_ROWS["precision"].label,
                tooltip=_ROWS["precision"].help,
                layout=lay("300px"),
                style=narrow,
            ),
            "engram_trainable": W.Checkbox(
                value=o.engram_trainable,
                description=_ROWS["engram_trainable"].label,
                tooltip=_ROWS["engram_trainable"].help,
                indent=False,
                layout=lay("190px"),
            ),
            # the mode knobs that change bytes: Muon's Newton-Schulz precision, mfsdp's bucket and gradient staging
            "muon_fp32_matmul_prec": W.Dropdown(
                options=list(_ROWS["muon_fp32_matmul_prec"].choices),
                value=o.muon_fp32_matmul_prec,
                description=_ROWS["muon_fp32_matmul_prec"].label,
                tooltip=_ROWS["muon_fp32_matmul_prec"].help,
                layout=lay("210px"),
                style=narrow,
            ),
            "muon_num_ns_steps": W.BoundedIntText(
                value=o.muon_num_ns_steps,
                min=1,
                max=100,
                description=_ROWS["muon_num_ns_steps"].label,
                tooltip=_ROWS["muon_num_ns_steps"].help,
                layout=lay("170px"),
                style=narrow,
            ),
            "mfsdp_bucket_size": W.BoundedIntText(
                value=o.mfsdp_bucket_size,
                min=1,
                max=1 << 40,
                description=_ROWS["mfsdp_bucket_size"].label,
                tooltip=_ROWS["mfsdp_bucket_size"].help,
                layout=lay("220px"),
                style=narrow,
            ),
            "mfsdp_grad_staging": W.Dropdown(
                options=list(_ROWS["mfsdp_grad_staging"].choices),
                value=o.mfsdp_grad_staging,
                description=_ROWS["mfsdp_grad_staging"].label,
                tooltip=_ROWS["mfsdp_grad_staging"].help,
                layout=lay("230px"),
                style=narrow,
            ),
            "recompute": W.Dropdown(
                options=list(_ROWS["recompute"].choices),
                value=o.recompute,
                description=_ROWS["recompute"].label,
                layout=lay("190px"),
                style=narrow,
            ),
            "micro_batch_size": W.BoundedIntText(
                value=o.micro_batch_size,
                min=1,
                max=4096,
                description=_ROWS["micro_batch_size"].label,
                continuous_update=False,
                layout=lay("150px"),
                style=narrow,
            ),
            "num_microbatches": W.BoundedIntText(
                value=o.num_microbatches,
                min=1,
                max=1 << 16,
                description=_ROWS["num_microbatches"].label,
                continuous_update=False,
                layout=lay("160px"),
                style=narrow,
            ),
            "sequence_parallel": W.Checkbox(
                value=o.sequence_parallel,
                description=_ROWS["sequence_parallel"].label,
                indent=False,
                layout=lay("150px"),
            ),
            "attention": W.Dropdown(
                options=list(_ROWS["attention"].choices),
                value=o.attention,
                description=_ROWS["attention"].label,
                layout=lay("170px"),
                style=narrow,
            ),
        }
        """Every control by name (TrainingOptions names; ``moment_dtype`` sets exp_avg and exp_avg_sq)."""
        for name, w in c.items():
            w.add_class(f"mlite-memory-{name}")
        seq = planner.controls["seq_len"]  # the planner's box: one seq_len for the mesh rules and the activations
        self._invalid = W.HTML()
        self._invalid.add_class("mlite-memory-invalid")
        self._cards = W.HTML()
        self._chart = W.HTML(layout=W.Layout(flex="0 0 auto"))  # its SVG's own width: never squeezed by the stages
        self._chart.add_class("mlite-memory-chart")
        self._time = W.HTML(layout=W.Layout(flex="0 0 auto", margin="0 0 0 16px"))
        self._time.add_class("mlite-memory-time")
        self._stages = W.HTML()
        self._stages.add_class("mlite-memory-stages")
        self._why = W.HTML()
        self._why.add_class("mlite-memory-why")
        self._details = W.HTML()
        self._details.add_class("mlite-memory-details")
        self._results = W.VBox(
            [
                self._cards,
                W.HBox([self._chart, self._time, self._stages], layout=W.Layout(flex_flow="row wrap")),
                self._why,
                self._details,
            ]
        )
        self._cheapest_html = W.HTML()
        self._cheapest_best = W.Button(description="apply best-ranked", layout=W.Layout(width="auto"))
        self._cheapest_best.add_class("mlite-memory-apply-cheapest")
        self._cheapest_least = W.Button(description="apply least memory", layout=W.Layout(width="auto"))
        self._cheapest_least.add_class("mlite-memory-apply-least")
        self._cheapest = W.VBox([self._cheapest_html, W.HBox([self._cheapest_best, self._cheapest_least])])
        self._cheapest.add_class("mlite-memory-cheapest")
        self._picks: dict[str, dict | None] = {"best": None, "least": None}
        self._cheapest_best.on_click(self.errors.guard(lambda _b: self._apply_pick("best")))
        self._cheapest_least.on_click(self.errors.guard(lambda _b: self._apply_pick("least")))
        self.table = MeshTable(
            MEMORY_COLUMNS,
            on_pick=lambda row: self.planner.apply(row["cfg"]),
            css="mlite-memory-table",
            errors=self.errors,
        )
        """Every valid mesh with its estimate (fits first)."""
        self._table_title = W.HTML()
        self._table_title.add_class("mlite-memory-table-title")
        self.children = (
            W.HBox(
                [
                    c["gpu"],
                    c["gpu_memory_gib"],
                    c["hardware"],
                    c["optimizer"],
                    c["optimizer_algorithm"],
                    c["use_distributed_optimizer"],
                ],
                layout=_row_layout(),
            ),
            W.HBox(
                [
                    c["use_precision_aware_optimizer"],
                    c["main_grads_dtype"],
                    c["moment_dtype"],
                    c["store_param_remainders"],
                ],
                layout=_row_layout(),
            ),
            W.HBox([c["offload_fraction"], c["param_offload"], c["optimizer_offload"]], layout=_row_layout()),
            W.HBox(
                [
                    c["recompute"],
                    seq,
                    c["micro_batch_size"],
                    c["num_microbatches"],
                    c["sequence_parallel"],
                    c["attention"],
                ],
                layout=_row_layout(),
            ),
            # after the rows other views index (the seq row is children[3])
            W.HBox(
                [
                    c["chunked_optimizer_state_offload"],
                    c["optimizer_state_offload_chunk_size_mb"],
                    c["optimizer_state_offload_fraction"],
                    c["offload_master_for_forward"],
                ],
                layout=_row_layout(),
            ),
            W.HBox(
                [
                    c["precision"],
                    c["engram_trainable"],
                    c["muon_fp32_matmul_prec"],
                    c["muon_num_ns_steps"],
                    c["mfsdp_bucket_size"],
                    c["mfsdp_grad_staging"],
                ],
                layout=_row_layout(),
            ),
            self.errors,
            self._invalid,
            self._results,
            self._cheapest,
            self._table_title,
            self.table,
        )
        self._debounce = _Debounce(self.errors.guard(self._compute_table))
        self._busy = False
        for name, w in c.items():
            w.observe(self.errors.guard(lambda ch, name=name: self._on_control(name, ch)), names="value")
        planner.observe(self.errors.guard(lambda _c: self.refresh()), names="plan")
        self.errors.run(self.refresh)
        self._debounce.enabled = True

    # ------------------------------------------------------------------ state
    def options(self) -> TrainingOptions:
        """The TrainingOptions of the controls (seq_len and gpus_per_node from the planner; options without a
        control as given to the constructor)."""
        c = self.controls
        moment = c["moment_dtype"].value
        return replace(
            self._base,
            optimizer=c["optimizer"].value,
            optimizer_algorithm=c["optimizer_algorithm"].value,
            use_distributed_optimizer=c["use_distributed_optimizer"].value,
            use_precision_aware_optimizer=c["use_precision_aware_optimizer"].value,
            main_grads_dtype=c["main_grads_dtype"].value,
            exp_avg_dtype=moment,
            exp_avg_sq_dtype=moment,
            store_param_remainders=c["store_param_remainders"].value,
            offload_fraction=round(float(c["offload_fraction"].value), 4),
            param_offload=c["param_offload"].value,
            optimizer_offload=c["optimizer_offload"].value,
            chunked_optimizer_state_offload=c["chunked_optimizer_state_offload"].value,
            optimizer_state_offload_chunk_size_mb=int(c["optimizer_state_offload_chunk_size_mb"].value),
            optimizer_state_offload_fraction=round(float(c["optimizer_state_offload_fraction"].value), 4),
            offload_master_for_forward=c["offload_master_for_forward"].value,
            precision=c["precision"].value,
            engram_trainable=c["engram_trainable"].value,
            muon_fp32_matmul_prec=c["muon_fp32_matmul_prec"].value,
            muon_num_ns_steps=int(c["muon_num_ns_steps"].value),
            mfsdp_bucket_size=int(c["mfsdp_bucket_size"].value),
            mfsdp_grad_staging=c["mfsdp_grad_staging"].value,
            seq_len=self.planner.seq_len,
            micro_batch_size=c["micro_batch_size"].value,
            num_microbatches=c["num_microbatches"].value,
            recompute=c["recompute"].value,
            sequence_parallel=c["sequence_parallel"].value,
            attention=c["attention"].value,
            gpu_memory_gib=float(c["gpu_memory_gib"].value),
            gpus_per_node=self.planner.gpus_per_node,
        )

    def hardware(self) -> str:
        """The time model's profile name the view predicts on."""
        return self.controls["hardware"].value

    def set(self, **values) -> None:
        """Set controls by name (``offload_fraction=0.5``, ``gpu="H200"``), then estimate once."""
        self._busy = True
        try:
            for k, v in values.items():
                self.controls[k].value = v
                if k == "gpu" and v != "custom":
                    self.controls["gpu_memory_gib"].value = GPU_MEMORY_GIB[v]
                    if "hardware" not in values:
                        self.controls["hardware"].value = hardware_for_gpu(v, default=self.hardware())
        finally:
            self._busy = False
        self.refresh()

    def command(self) -> str:
        """The ``mlite memory`` command line of what is shown (the planner's mesh flags, then the option flags
        derived from the options table)."""
        plan = self.planner.plan
        if plan is None:
            return ""
        return " ".join(
            [self.planner.command(plan).replace("mlite mesh", "mlite memory", 1), *memory_flags(self.options())]
        )

    # ------------------------------------------------------------------ events
    def _on_control(self, name: str, change) -> None:
        if self._busy:
            return
        c = self.controls
        self._busy = True
        try:
            if name == "gpu" and change["new"] != "custom":
                c["gpu_memory_gib"].value = GPU_MEMORY_GIB[change["new"]]
                c["hardware"].value = hardware_for_gpu(change["new"], default=c["hardware"].value)
            elif name == "gpu_memory_gib" and GPU_MEMORY_GIB.get(c["gpu"].value) != change["new"]:
                c["gpu"].value = next((k for k, v in GPU_MEMORY_GIB.items() if v == change["new"]), "custom")
        finally:
            self._busy = False
        self.refresh()

    def _sync_enabled(self) -> None:
        """Disable the controls of the options that do not apply (:func:`mlite.options.optimizers.inapplicable`) and
        set them to the value they take then."""
        c = self.controls
        off = inapplicable(c["optimizer"].value, c["use_precision_aware_optimizer"].value)
        self._busy = True
        try:
            for name in ("moment_dtype", "main_grads_dtype", "store_param_remainders", "use_distributed_optimizer"):
                field = "exp_avg_dtype" if name == "moment_dtype" else name
                c[name].disabled = field in off
                if field in off:
                    c[name].value = off[field]
            # chunked state offload: only where the backend has it (its registry entry); its knobs only when it is on
            has = BACKENDS.entry(c["optimizer"].value).chunked_state_offload
            c["chunked_optimizer_state_offload"].disabled = not has
            if not has:
                c["chunked_optimizer_state_offload"].value = False
            on = c["chunked_optimizer_state_offload"].value
            for name in ("optimizer_state_offload_chunk_size_mb", "optimizer_state_offload_fraction",
                         "offload_master_for_forward"):  # fmt: skip
                c[name].disabled = not on
            # a mode's knobs only under that mode (Muon: the algorithm; mfsdp: the backend)
            for name in ("muon_fp32_matmul_prec", "muon_num_ns_steps"):
                c[name].disabled = c["optimizer_algorithm"].value != "muon"
            for name in ("mfsdp_bucket_size", "mfsdp_grad_staging"):
                c[name].disabled = c["optimizer"].value != "mfsdp"
            # the Engram switch only for a model with n-gram tables (DeepSeek-V4.1: ModelSpec.ngram_tables)
            spec = self.planner.spec
            c["engram_trainable"].disabled = not (spec is not None and spec.ngram_tables)
            if c["engram_trainable"].disabled:
                c["engram_trainable"].value = False
        finally:
            self._busy = False

    def _apply_pick(self, which: str) -> None:
        row = self._picks.get(which)
        if row is not None:
            self.planner.apply(row["cfg"])

    # ------------------------------------------------------------------ estimating
    def refresh(self) -> None:
        """Estimate the planner's mesh now; recompute the whole-mesh table (debounced) when its inputs changed."""
        self._sync_enabled()
        spec, plan = self.planner.spec, self.planner.plan
        if spec is None or plan is None:
            self._results.layout.display = "none"
            self.estimate = self.step_time = None
            return
        try:
            o = self.options()
        except MliteError:
            self._results.layout.display = "none"
            self.estimate = self.step_time = None
            raise
        self._schedule_table(spec, plan, o)
        if not plan.valid:
            self._results.layout.display = "none"
            self._invalid.value = (
                f"<div style='color:#9a6700'>&#9888; The planner's mesh is invalid "
                f"({esc(plan.errors[0].message)}): fix it above, or apply a mesh from the table "
                "below.</div>"
            )
            self.estimate = self.step_time = None
            return
        est = estimate(spec, plan, o)
        t = predict(spec, plan, o, self.hardware())
        self._invalid.value = ""
        self._render(est)
        self._time.value = time_svg(t)
        self._results.layout.display = None
        self.step_time = t
        self.estimate = est

    def _schedule_table(self, spec, plan, o) -> None:
        key = (id(spec), spec.name, plan.ngpu, repr(o.to_dict()), self.hardware())
        current = mesh_key(plan.parallel)
        if key == self._table_key or key == self._pending_key:
            self.table.set_current(current)
            return
        self._pending_key = key
        self._table_title.value = "<b>All valid meshes with their estimate</b> <i>(updating…)</i>"
        self._debounce()

    def _compute_table(self) -> None:
        spec, plan = self.planner.spec, self.planner.plan
        if spec is None or plan is None:
            return
        o = self.options()
        key = (id(spec), spec.name, plan.ngpu, repr(o.to_dict()), self.hardware())
        rows = memory_rows(mesh_table(spec, plan.ngpu, o, hardware=self.hardware()))
        self._table_key, self._pending_key = key, None
        self.table.set_rows(rows, mesh_key(plan.parallel))
        n_fit = sum(r["fits"] for r in rows)
        self._table_title.value = (
            f"<b>All valid meshes with their estimate</b>: {n_fit} of {len(rows)} fit on "
            f"{plan.ngpu} × {o.gpu_memory_gib:g} GiB (those that fit first, the fastest predicted on "
            f"{esc(self.hardware())} first, then by the planner's score; OOM in red)"
        )
        self._render_cheapest(rows, plan.ngpu, o)

    # ------------------------------------------------------------------ rendering
    def _render_cheapest(self, rows: list[dict], ngpu: int, o: TrainingOptions) -> None:
        fit = [r for r in rows if r["fits"]]
        best = fit[0] if fit else None
        least = min(rows, key=lambda r: r["total"]) if rows else None
        self._picks = {"best": best, "least": least}
        mesh = lambda r: " ".join(f"{k}={r[k]}" for k in MESH_NAMES)
        if best:
            head = (
                f"<b>Best-ranked mesh that fits</b> on {ngpu} × {o.gpu_memory_gib:g} GiB: "
                f"<code>{esc(mesh(best))}</code> — {gib(best['total'])} per GPU, "
                f"{best['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU predicted on {esc(self.hardware())}, score "
                f"{best['score']:.2f}. <span style='color:#666'>(ranked by the predicted tokens/s/GPU, then the "
                "planner's score: TP and EP inside a node, smallest pipeline bubble, least CP, then smaller TP/ETP; "
                "not the least memory, below)</span>"
            )
        else:
            head = (
                f"<b>No mesh fits</b> on {ngpu} × {o.gpu_memory_gib:g} GiB with these options: try "
                "offload_fraction, PAO with bf16 grads and moments, recompute, a larger GPU, or more GPUs."
            )
        if least:
            head += (
                f"<br>Least GPU memory: <code>{esc(mesh(least))}</code> — {gib(least['total'])} per GPU"
                + ("" if least["fits"] else " (does not fit)")
                + "."
            )
        self._cheapest_html.value = f"<div style='margin:8px 0 4px 0;line-height:1.45'>{head}</div>"
        self._cheapest_best.disabled = best is None
        self._cheapest_least.disabled = least is None

    def _render(self, est) -> None:
        d = est.to_dict()
        o = est.options
        w = est.worst
        total = d["per_gpu"]["total"]
        over = total - d["usable"]
        fits = d["fits"]
        stage = f" (pp {w.pp_rank}, the most loaded)" if est.plan.parallel.pp > 1 else ""
        cards = [
            _card(
                "GPU memory per GPU" + stage,
                gib(total),
                f"{total:,} B",
                "mlite-memory-gpu-total",
                tip="peak of a steady-state step + framework overhead",
            ),
            _card(
                "verdict",
                "fits" if fits else "OOM",
                (f"{gib(-over)} to spare" if fits else f"over by {gib(over)}") + f" of {gib(d['usable'], 1)} usable",
                "mlite-memory-fits",
                "#1e7e34" if fits else "#b00020",
                tip=f"usable = {o.gpu_memory_gib:g} GiB x (1 - headroom {o.headroom})",
            ),
            _card(
                "host RAM per GPU process",
                gib(d["host"]["per_gpu"]),
                f"per node: {gib(d['host']['per_node'])}",
                "mlite-memory-host",
                tip="offloaded optimizer state and runtime-offloaded params/state",
            ),
            _card(
                "bytes per parameter",
                f"{d['bytes_per_param']:.2f}",
                f"over {fmt_count(d['local_params'])} local",
                "mlite-memory-bpp",
                tip="(params + grads + optimizer on the GPU) / local parameters",
            ),
            _card(
                "between steps (rollout / idle)",
                gib(d["phases"]["idle"]["gpu"]),
                f"host then: {gib(d['phases']['idle']['host'])}",
                "mlite-memory-idle",
                tip="GPU bytes outside the training step with runtime context offload",
            ),
        ]
        if d["params_detail"]:  # FP8 compute weights: the parameter bytes by part (mlite.memory.fp8)
            pd = d["params_detail"]
            cards.append(
                _card(
                    f"parameters ({d['precision']})",
                    gib(d["per_gpu"]["params"]),
                    f"FP8 {gib(pd['fp8_data'])} + scales {gib(pd['fp8_scales'])} + columnwise "
                    f"{gib(pd['fp8_columnwise'])} + bf16 {gib(pd['bf16_params'])}",
                    "mlite-memory-fp8",
                    tip="FP8 GEMM weights: data, block scales and the columnwise copy; the rest in BF16",
                )
            )
        self._chart.value = memory_svg(est)
        if len(d["stages"]) > 1:
            rows = "".join(
                f"<tr><td>pp {s['pp_rank']}</td><td style='text-align:right'>{fmt_count(s['local_params'])}"
                f"</td><td style='text-align:right'>{gib(s['static'])}</td><td style='text-align:right'>"
                f"{gib(s['activations'])}</td><td style='text-align:right'>{gib(s['total'])}</td></tr>"
                for s in d["stages"]
            )
            self._stages.value = (
                "<div style='margin-left:12px;line-height:1.4'><b>per pipeline rank</b>"
                "<table style='font-size:92%'>"
                "<tr><th>stage</th><th>local params</th><th>static</th><th>activations</th>"
                f"<th>total</th></tr>{rows}</table></div>"
            )
        else:
            self._stages.value = ""
        sb = state_bytes(o)
        lines = [
            (
                f["name"],
                f["formula"],
                f["values"],
                gib(f["bytes"]) if f["name"] not in ("local_params", "shard") else f"{f['bytes']:,} params",
                f["bytes"],
            )
            for f in d["formulas"]
        ]
        lines.insert(
            len(lines) - 1,
            (
                "bytes_per_param",
                "(params + grads + optimizer) / local_params",
                f"{d['static']:,} / {d['local_params']:,}",
                f"{d['bytes_per_param']:.3f} B",
                None,
            ),
        )
        body = "".join(
            f"<tr><td><b>{esc(n)}</b></td><td><code>{esc(fm)}</code></td><td><code>{esc(v)}</code></td>"
            f"<td style='text-align:right;white-space:nowrap' title='{'' if b is None else f'{b:,} bytes'}'>"
            f"= {esc(r)}</td></tr>"
            for n, fm, v, r, b in lines
        )
        used = (
            f"optimizer={o.optimizer} · use_distributed_optimizer={o.use_distributed_optimizer} · "
            f"use_precision_aware_optimizer={o.pao} · main_grads_dtype={o.main_grads_dtype} · "
            f"exp_avg_dtype={o.exp_avg_dtype} · exp_avg_sq_dtype={o.exp_avg_sq_dtype} · "
            f"store_param_remainders={o.store_param_remainders} · offload_fraction={o.offload_fraction:g} · "
            f"seq_len={o.seq_len} · micro_batch_size={o.micro_batch_size} · num_microbatches={o.num_microbatches}"
            f" · recompute={o.recompute} · gpu_memory_gib={o.gpu_memory_gib:g}"
        )
        per = (
            f"bytes per parameter of each state here: param {sb.param}, grad {sb.grad}, master {sb.master}, "
            f"exp_avg {sb.exp_avg}, exp_avg_sq {sb.exp_avg_sq}"
            + (f", host {sb.host_per_offloaded} per offloaded shard parameter" if o.offload_fraction else "")
            + ("; params and grads sharded too (fsdp2)" if sb.params_sharded else "")
        )
        self._why.value = (
            "<details open style='line-height:1.4'><summary><b>Why</b>: each number, its formula and your values "
            f"(most loaded rank: pp {w.pp_rank})</summary>"
            f"<div style='color:#555;margin:2px 0'>{esc(used)}<br>{esc(per)}<br>same estimate on the command line: "
            f"<code>{esc(self.command())}</code></div>"
            f"<table style='font-size:92%'><tr><th style='text-align:left'>item</th><th style='text-align:left'>"
            f"formula</th><th style='text-align:left'>with your values</th><th></th></tr>{body}</table></details>"
        )
        self._details.value = (
            "<details style='line-height:1.4'><summary><b>Breakdown</b> of the most loaded rank</summary>"
            "<div style='display:flex'>"
            + _small_table("activations", d["activations_detail"])
            + _small_table("transients", d["transients"])
            + _small_table("other", d["other_detail"])
            + _small_table("host", d["host_detail"])
            + "</div></details>"
        )
        # last: a test (or a person) that sees these figures sees the chart and the tables of the same estimate
        self._cards.value = f"<div style='display:flex;flex-wrap:wrap;line-height:1.35'>{''.join(cards)}</div>"
