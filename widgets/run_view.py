"""``RunView``: start a single-node debug run from a notebook, watch it, stop it.

A form (model, steps, processes, the mesh (tp, cp, ep, etp), device, launcher; optimizer, PAO, moment dtype, ``offload_fraction``, param /
optimizer runtime offload, seed, lr, run folder; defaults: tiny-moe on CPU, 2 processes), Start / Stop buttons, a
status line, a progress bar, live loss and grad-norm curves, the measured memory next to the estimator's figure for
the same configuration, and the tail of ``train.log``.

Training never runs in the kernel: Start calls :func:`mlite.launch.start` (separate processes) and a poller thread
reads the run's files (:class:`widgets.run_monitor.RunMonitor`) every half second, redrawing the PNG curves at most
once a second. Stop writes the run's stop request and returns at once; the workers finish their step and the
status turns ``stopped``. Bad input (an invalid form) shows one line in the inline error banner; a failed run
shows its reason in red in the status line.

The mesh line under the memory table (``mlite-run-mesh``) names the mesh with its DP and EDP -- the form's before a
run, the shown run's (its config, and how many ranks its ``memory.json`` measured) once one is attached; the table
is this mesh's per-rank bytes (measured: the largest rank of ``memory.json``) next to ``mlite memory --optimizer
<the run's optimizer>`` for the same model, mesh and options.

CSS classes for tests: ``mlite-run-view`` (the view), ``mlite-run-<field>`` (model, steps, nproc, tp, cp, ep, etp,
device, launcher, trainer (toggle: ``lite`` | ``verl SFT``),
optimizer, pao, moment-dtype, offload-fraction, param-offload, optimizer-offload, seed, lr, out),
``mlite-run-start``, ``mlite-run-stop``, ``mlite-run-status`` (text ``<status> · step N/M · ...``; attribute-free
``.mlite-run-state`` span holding the status word and ``.mlite-run-step`` holding N), ``mlite-run-progress``,
``mlite-run-plot`` (PNG image), ``mlite-run-memory`` (table), ``mlite-run-dir``, ``mlite-run-log``, ``mlite-error``.
"""

from __future__ import annotations

import threading
import time

import ipywidgets as W

from mlite.errors import MliteError
from mlite.launch import DEBUG_MODELS, RunConfig, start
from mlite.launch.config import DEVICES, LAUNCHERS, MOMENT_DTYPES, OPTIMIZERS
from mlite.launch.memory_check import estimate_for, memory_rows
from mlite.mesh.axes import RUN_AXES
from mlite.options.table import TRAINING, rows_by_field
from mlite.rundir import COMPLETED, FAILED, FINAL, RUNNING, STOPPED

from ._common import ErrorBanner, esc, html_table
from .run_monitor import RunMonitor, curves_png, fmt_bytes, mesh_text, peak_note

POLL_S = 0.5
"""Seconds between two looks at the run's files."""
DRAW_S = 1.0
"""Least seconds between two redraws of the curves."""
_COLORS = {RUNNING: "#1f6feb", COMPLETED: "#1a7f37", STOPPED: "#9a6700", FAILED: "#b00020"}
"""Status word colours (``stopping`` and ``idle`` are the view's own words, grey)."""
_BAR_STYLES = {COMPLETED: "success", FAILED: "danger", STOPPED: "warning"}


_LABELS = {f: r.label for f, r in rows_by_field(TRAINING).items()}
"""The options table's widget labels (the run's optimizer and offload controls are the same options)."""

TRAINER_OPTIONS = (("lite", "lite"), ("verl SFT", "verl-sft"))
"""The trainer switch: label -> ``RunConfig.trainer`` (:data:`mlite.options.table.TRAINERS`)."""


def _pairs(items: list) -> list[list]:
    """``items`` two by two (the form's rows of mesh controls)."""
    return [items[i : i + 2] for i in range(0, len(items), 2)]


class RunView(W.VBox):
    """The run view (see the module docstring)."""

    def __init__(self, config: RunConfig | None = None, **kwargs):
        c = self._base = config or RunConfig()
        """The config given: the fields without a control (grad dtype, cuts, batch details, ...) are kept from it."""
        self.errors = ErrorBanner()
        self.run = None
        """The :class:`mlite.launch.RunHandle` shown (None before Start)."""
        self.monitor: RunMonitor | None = None
        self._thread: threading.Thread | None = None
        self._halt = threading.Event()
        self._stale = False
        """New metric records arrived that the plot does not show yet (a draw waits DRAW_S after the last)."""

        def field(widget, name):
            widget.add_class(f"mlite-run-{name}")
            return widget

        lay = W.Layout(width="260px")
        self._model = field(
            W.Combobox(value=c.model, options=list(DEBUG_MODELS), description="model", ensure_option=False, layout=lay),
            "model",
        )
        self._steps = field(
            W.BoundedIntText(value=c.steps, min=1, max=1_000_000, description="steps", layout=lay), "steps"
        )
        self._nproc = field(
            W.BoundedIntText(value=c.nproc, min=1, max=64, description="processes", layout=lay), "nproc"
        )
        small = W.Layout(width="130px")
        self._axes = {  # one control per axis a debug run takes (mlite.mesh.axes.RUN_AXES)
            a.name: field(
                W.BoundedIntText(
                    value=getattr(c, a.name), min=1, max=64, description=a.name, tooltip=a.run_help, layout=small
                ),
                a.name,
            )
            for a in RUN_AXES
        }
        self._mesh = W.HTML()
        self._mesh.add_class("mlite-run-mesh")
        self._device = field(W.Dropdown(options=DEVICES, value=c.device, description="device", layout=lay), "device")
        self._launcher = field(
            W.Dropdown(options=LAUNCHERS, value=c.launcher, description="launcher", layout=lay), "launcher"
        )
        self._trainer = field(
            W.ToggleButtons(
                options=TRAINER_OPTIONS,
                value=c.trainer,
                description="trainer",
                tooltips=["the kit's own loop", "verl's SFT trainer, engine=lite"],
            ),
            "trainer",
        )
        self._optimizer = field(
            W.Dropdown(options=OPTIMIZERS, value=c.optimizer, description=_LABELS["optimizer"], layout=lay), "optimizer"
        )
        self._pao = field(
            W.Checkbox(value=c.pao, description=_LABELS["use_precision_aware_optimizer"], indent=False), "pao"
        )
        self._moments = field(
            W.Dropdown(options=MOMENT_DTYPES, value=c.moment_dtype, description=_LABELS["exp_avg_dtype"], layout=lay),
            "moment-dtype",
        )
        self._offload = field(
            W.FloatSlider(
                value=c.offload_fraction,
                min=0.0,
                max=1.0,
                step=0.05,
                description=_LABELS["offload_fraction"],
                readout_format=".2f",
                style={"description_width": "initial"},
                continuous_update=False,
            ),
            "offload-fraction",
        )
        self._param_offload = field(
            W.Checkbox(value=c.param_offload, description=_LABELS["param_offload"], indent=False), "param-offload"
        )
        self._opt_offload = field(
            W.Checkbox(value=c.optimizer_offload, description=_LABELS["optimizer_offload"], indent=False),
            "optimizer-offload",
        )
        self._seed = field(W.BoundedIntText(value=c.seed, min=0, max=2**31 - 1, description="seed", layout=lay), "seed")
        self._lr = field(W.FloatText(value=c.lr, description="lr", layout=lay), "lr")
        self._out = field(
            W.Text(
                value=c.out or "",
                placeholder="runs/<model>-<optimizer>-<time> (automatic)",
                description="run folder",
                layout=W.Layout(width="520px"),
            ),
            "out",
        )
        self._start = W.Button(description="Start", button_style="success", icon="play")
        self._start.add_class("mlite-run-start")
        self._stop = W.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self._stop.add_class("mlite-run-stop")
        self._status = W.HTML(value=self._status_html("idle", 0, c.steps))
        self._status.add_class("mlite-run-status")
        self._progress = W.IntProgress(value=0, min=0, max=c.steps, layout=W.Layout(width="520px"))
        self._progress.add_class("mlite-run-progress")
        self._plot = W.Image(format="png", value=curves_png(None, c.steps), layout=W.Layout(max_width="100%"))
        self._plot.add_class("mlite-run-plot")
        self._memory = W.HTML()
        self._memory.add_class("mlite-run-memory")
        self._dir = W.HTML()
        self._dir.add_class("mlite-run-dir")
        self._log = W.HTML()
        self._log.add_class("mlite-run-log")

        self._start.on_click(lambda _: self.errors.run(self.start))
        self._stop.on_click(lambda _: self.errors.run(self.stop))
        for w in self._form_widgets():
            w.observe(lambda _: self._form_changed(), "value")

        form = W.HBox(
            [
                W.VBox(
                    [
                        W.HTML("<b>Model and mesh</b>"),
                        self._model,
                        self._steps,
                        self._nproc,
                        *(W.HBox(pair) for pair in _pairs(list(self._axes.values()))),
                        self._device,
                        self._launcher,
                        self._trainer,
                    ]
                ),
                W.VBox(
                    [
                        W.HTML("<b>Optimizer</b>"),
                        self._optimizer,
                        self._pao,
                        self._moments,
                        self._offload,
                        self._param_offload,
                        self._opt_offload,
                    ]
                ),
                W.VBox([W.HTML("<b>Run</b>"), self._seed, self._lr]),
            ]
        )
        super().__init__(
            children=(
                form,
                self._out,
                W.HBox([self._start, self._stop]),
                self.errors,
                self._status,
                self._progress,
                self._plot,
                W.HTML("<b>Memory per process</b>"),
                self._mesh,
                self._memory,
                self._dir,
                self._log,
            ),
            **kwargs,
        )
        self.add_class("mlite-run-view")
        self.errors.run(self._show_estimate)

    # ------------------------------------------------------------------ form
    def _form_widgets(self):
        return (
            self._model,
            self._steps,
            self._nproc,
            *self._axes.values(),
            self._device,
            self._launcher,
            self._trainer,
            self._optimizer,
            self._pao,
            self._moments,
            self._offload,
            self._param_offload,
            self._opt_offload,
            self._seed,
            self._lr,
            self._out,
        )

    def config(self) -> RunConfig:
        """The form as a RunConfig over the config given (raises MliteError for bad values)."""
        return self._base.updated(
            model=self._model.value.strip(),
            steps=int(self._steps.value),
            nproc=int(self._nproc.value),
            **{n: int(w.value) for n, w in self._axes.items()},
            device=self._device.value,
            launcher=self._launcher.value,
            optimizer=self._optimizer.value,
            pao=bool(self._pao.value),
            moment_dtype=self._moments.value,
            offload_fraction=float(self._offload.value),
            param_offload=bool(self._param_offload.value),
            optimizer_offload=bool(self._opt_offload.value),
            seed=int(self._seed.value),
            lr=float(self._lr.value),
            out=self._out.value.strip() or None,
            trainer=self._trainer.value,
        )

    def _form_changed(self) -> None:
        if self.run is None or self.run.done:
            self.errors.run(self._show_estimate)

    def _show_estimate(self) -> None:
        cfg = self.config()
        cfg.check_mesh()  # the planner's reasons, as mlite run gives them
        est = estimate_for(cfg)
        self._mesh.value = self.mesh_html(est)
        self._memory.value = self._memory_html(memory_rows(cfg, None, est), None, cfg.optimizer)

    @staticmethod
    def mesh_html(est, measured: dict | None = None) -> str:
        """``mesh: tp T · cp C · ep E · etp 1 · dp D · edp F`` of an estimate's plan (:func:`mesh_text`)."""
        return esc(mesh_text(est, measured))

    # ------------------------------------------------------------------ actions
    def start(self, **overrides):
        """Start a run from the form (``overrides`` also set the form, e.g. ``start(steps=10)``); returns the
        RunHandle. Bad input raises MliteError (the button shows it inline)."""
        names = {
            "model": self._model,
            "steps": self._steps,
            "nproc": self._nproc,
            **self._axes,
            "device": self._device,
            "launcher": self._launcher,
            "optimizer": self._optimizer,
            "pao": self._pao,
            "moment_dtype": self._moments,
            "offload_fraction": self._offload,
            "param_offload": self._param_offload,
            "optimizer_offload": self._opt_offload,
            "seed": self._seed,
            "lr": self._lr,
            "out": self._out,
            "trainer": self._trainer,
        }
        unknown = sorted(set(overrides) - set(names))
        if unknown:
            raise MliteError(f"start: unknown field(s) {', '.join(unknown)}; the form has {', '.join(names)}")
        if self.run is not None and not self.run.done:
            raise MliteError("a run is still going: press Stop first (or wait for it)")
        for k, v in overrides.items():
            names[k].value = "" if v is None and k == "out" else v
        cfg = self.config()
        run = start(cfg)
        self.attach(run)
        return run

    def attach(self, run) -> None:
        """Show ``run`` (a RunHandle, e.g. started from code) and follow it until it ends."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.run = run
        self.monitor = RunMonitor(run)
        self._dir.value = (
            f"<small>run folder <code>{esc(run.run_dir)}</code><br>command <code>{esc(run.command)}</code></small>"
        )
        self._progress.max = max(1, run.total_steps or 1)
        self._halt = threading.Event()
        self.refresh(force_draw=True)
        self._thread = threading.Thread(target=self._poll_loop, args=(self._halt,), name="mlite-run-view", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the run's workers to stop after their current step (returns at once)."""
        if self.run is None:
            raise MliteError("no run to stop: press Start first")
        self.run.stop(wait=False)
        self._stop.disabled = True
        self._status.value = self._status_html(
            "stopping", self.monitor.poll()["step"] if self.monitor else 0, self.run.total_steps
        )

    def wait(self, timeout: float | None = None) -> str | None:
        """Block until the shown run ended and the view shows its final state; returns the status."""
        if self.run is None:
            return None
        status = self.run.wait(timeout=timeout)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.refresh(force_draw=True)
        return status

    # ------------------------------------------------------------------ polling
    def _poll_loop(self, halt: threading.Event) -> None:
        last_draw = 0.0
        while not halt.is_set():
            snap = self.errors.run(self._update, last_draw)
            if snap is None:
                return
            last_draw = snap
            if self.run is None or self.run.done:
                self.errors.run(self.refresh, True)
                return
            halt.wait(POLL_S)

    def _update(self, last_draw: float) -> float:
        mon, run = self.monitor, self.run
        if mon is None or run is None:
            return last_draw
        snap = mon.poll()
        self._show(snap)
        self._stale = self._stale or snap["changed"]  # records that arrived inside DRAW_S wait for the next draw
        now = time.monotonic()
        if (self._stale and now - last_draw >= DRAW_S) or snap["status"] in FINAL:
            self._redraw(mon, run)
            return now
        return last_draw

    def refresh(self, force_draw: bool = True) -> None:
        """Read the run's files once and redraw everything."""
        mon, run = self.monitor, self.run
        if mon is None or run is None:
            return
        snap = mon.poll()
        self._show(snap)
        if force_draw or snap["changed"]:
            self._redraw(mon, run)

    def _redraw(self, mon: RunMonitor, run) -> None:
        """Curves, memory table and log tail from the presenter."""
        self._stale = False
        self._plot.value = mon.png()
        self._memory.value = self._memory_html(mon.memory_rows(), run.memory(), mon.optimizer())
        mesh = mon.mesh_line()
        if mesh is not None:  # the shown run's mesh, not the form's
            self._mesh.value = esc(mesh)
        self._log.value = f"<pre style='font-size:11px;max-height:14em;overflow:auto'>{esc(run.log_tail(8))}</pre>"

    def _show(self, snap: dict) -> None:
        status, step, total = snap["status"], snap["step"], snap["total"]
        running = status == RUNNING
        self._start.disabled = running
        self._stop.disabled = not running or (self.run is not None and self.run.rundir.stop_requested())
        self._progress.max = max(1, total or 1)
        self._progress.value = min(step, self._progress.max)
        self._progress.bar_style = _BAR_STYLES.get(status, "")
        extra = []
        if snap.get("loss") is not None:
            extra.append(f"loss {snap['loss']:.4f}")
        if snap.get("grad_norm") is not None:
            extra.append(f"grad norm {snap['grad_norm']:.3f}")
        if running and self.run is not None and self.run.rundir.stop_requested():
            status = "stopping"
        self._status.value = self._status_html(status, step, total, extra, snap.get("reason"))

    @staticmethod
    def _status_html(status: str, step: int, total, extra=(), reason: str | None = None) -> str:
        color = _COLORS.get(status, "#555")
        parts = [
            f'<span class="mlite-run-state" style="color:{color};font-weight:600">{esc(status)}</span>',
            f'step <span class="mlite-run-step">{int(step)}</span>/{esc(total or "?")}',
        ] + [esc(e) for e in extra]
        html = " · ".join(parts)
        if reason:
            html += f'<br><span style="color:{color}">{esc(reason)}</span>'
        return html

    @staticmethod
    def _memory_html(rows: list[dict], measured: dict | None, optimizer: str | None = "fsdp2") -> str:
        body = [
            [
                r["item"],
                fmt_bytes(r["measured"]),
                fmt_bytes(r["estimated"]),
                "—" if r["ratio"] is None else f"{r['ratio']:.2f}x",
            ]
            for r in rows
        ]
        table = html_table(
            ["", "measured", f"estimated (mlite memory, {optimizer or 'fsdp2'})", "measured / estimated"],
            body,
            css="mlite-table mlite-run-memory-table",
            align_right=(1, 2, 3),
        )
        return table + f"<small>{esc(peak_note(measured))}</small>"
