"""``CurveExplorer``: load training logs (files, globs, run directories; default ``data/logs/``), pick runs to
overlay and metrics or roles to plot, smooth with an EMA slider, switch log-y and event marks, read the event
table, and compare two runs (max abs / rel difference per metric, bitwise verdict). Every figure comes from
:class:`mlite.logs.plots.session.CurveSession`; this module only lays the controls out and links them.

CSS classes for tests: ``mlite-curves`` (the view), ``mlite-curves-paths`` (text box), ``mlite-curves-load``
(button), ``mlite-curves-summary`` (table of loaded runs), ``mlite-curves-runs`` / ``mlite-curves-metrics``
(multi-selects), ``mlite-curves-smooth`` (slider), ``mlite-curves-logy``, ``mlite-curves-events-toggle``,
``mlite-curves-plot`` (PNG image), ``mlite-curves-events`` (event table), ``mlite-curves-compare-a`` /
``-compare-b`` / ``-compare-by`` / ``-compare`` (button) / ``-compare-result``, ``mlite-error``.
"""

from __future__ import annotations

import ipywidgets as W

from mlite.logs.plots.session import DEFAULT_INPUT, CurveSession

from ._common import ErrorBanner, esc, html_table


class CurveExplorer(W.VBox):
    """The curve explorer view (see the module docstring)."""

    def __init__(self, paths: str = DEFAULT_INPUT, *, load: bool = True, **kwargs):
        self.session = CurveSession()
        """The logic object (runs, figures, tables)."""
        self.errors = ErrorBanner()
        self._paths = W.Text(
            value=paths, description="logs", placeholder="files, globs or folders", layout=W.Layout(width="60%")
        )
        self._paths.add_class("mlite-curves-paths")
        self._load = W.Button(description="Load", button_style="primary", icon="folder-open")
        self._load.add_class("mlite-curves-load")
        self._summary = W.HTML()
        self._summary.add_class("mlite-curves-summary")
        self._runs = W.SelectMultiple(description="runs", rows=6, layout=W.Layout(width="48%"))
        self._runs.add_class("mlite-curves-runs")
        self._metrics = W.SelectMultiple(description="metrics", rows=6, layout=W.Layout(width="48%"))
        self._metrics.add_class("mlite-curves-metrics")
        self._smooth = W.FloatSlider(
            value=0.0,
            min=0.0,
            max=0.99,
            step=0.01,
            description="smoothing",
            continuous_update=False,
            readout_format=".2f",
        )
        self._smooth.add_class("mlite-curves-smooth")
        self._logy = W.Dropdown(
            options=[("auto", "auto"), ("log", True), ("linear", False)],
            value="auto",
            description="y axis",
            layout=W.Layout(width="180px"),
        )
        self._logy.add_class("mlite-curves-logy")
        self._show_events = W.Checkbox(value=True, description="mark events", indent=False)
        self._show_events.add_class("mlite-curves-events-toggle")
        self._plot = W.Image(format="png", layout=W.Layout(max_width="100%"))
        self._plot.add_class("mlite-curves-plot")
        self._events = W.HTML()
        self._events.add_class("mlite-curves-events")
        self._cmp_a = W.Dropdown(description="A", layout=W.Layout(width="40%"))
        self._cmp_a.add_class("mlite-curves-compare-a")
        self._cmp_b = W.Dropdown(description="B", layout=W.Layout(width="40%"))
        self._cmp_b.add_class("mlite-curves-compare-b")
        self._cmp_by = W.ToggleButtons(options=[("by metric", "metric"), ("by role", "role")], value="metric")
        self._cmp_by.add_class("mlite-curves-compare-by")
        self._cmp_go = W.Button(description="Compare", icon="balance-scale")
        self._cmp_go.add_class("mlite-curves-compare")
        self._cmp_out = W.HTML()
        self._cmp_out.add_class("mlite-curves-compare-result")
        self._busy = False

        self._load.on_click(lambda _: self.load())
        self._runs.observe(self.errors.guard(self._on_runs), "value")
        for w in (self._metrics, self._smooth, self._logy, self._show_events):
            w.observe(lambda _: self.redraw(), "value")
        self._cmp_go.on_click(lambda _: self.compare())

        super().__init__(
            children=(
                W.HBox([self._paths, self._load]),
                self.errors,
                self._summary,
                W.HBox([self._runs, self._metrics]),
                W.HBox([self._smooth, self._logy, self._show_events]),
                self._plot,
                W.HTML("<b>Events</b>"),
                self._events,
                W.HTML("<b>Compare two runs</b>"),
                W.HBox([self._cmp_a, self._cmp_b]),
                W.HBox([self._cmp_by, self._cmp_go]),
                self._cmp_out,
            ),
            **kwargs,
        )
        self.add_class("mlite-curves")
        if load:
            self.load()

    # -- actions (also callable from code; errors go to the inline banner, never raised) ---------------------
    def load(self, paths: str | None = None) -> None:
        """Read the logs in the text box (or ``paths``) and reset the selections."""
        if paths is not None:
            self._paths.value = paths
        self.errors.run(self._load_logs)

    def _load_logs(self) -> None:
        self.session.load(self._paths.value)
        s = self.session
        self._summary.value = html_table(
            ["run", "format", "steps", "range", "metrics", "events", "skipped"],
            s.summary_rows(),
            align_right=(2, 4, 5, 6),
        )
        self._busy = True
        try:
            self._runs.options = s.names
            self._runs.value = tuple(s.default_selection())
            self._cmp_a.options = s.names
            self._cmp_b.options = s.names
            sel = s.default_selection()
            self._cmp_a.value = sel[0] if sel else None
            self._cmp_b.value = sel[1] if len(sel) > 1 else (sel[0] if sel else None)
            self._refresh_metrics()
        finally:
            self._busy = False
        self._cmp_out.value = ""
        self._redraw()

    def _on_runs(self, _change) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            self._refresh_metrics()
        finally:
            self._busy = False
        self._redraw()

    def _refresh_metrics(self) -> None:
        names = list(self._runs.value)
        opts = self.session.metric_options(names) if names else []
        keep = [v for v in self._metrics.value if v in {o[1] for o in opts}]
        self._metrics.options = opts
        self._metrics.value = tuple(keep or self.session.default_metrics(names))

    def redraw(self) -> None:
        """Draw the panel and the event table for the current selection."""
        self.errors.run(self._redraw)

    def _redraw(self) -> None:
        if self._busy:
            return
        names = list(self._runs.value)
        if not names:
            self._plot.value = b""
            self._events.value = "<i>select one or more runs</i>"
            return
        self._events.value = self._event_table(names)
        self._plot.value = self.session.figure_png(
            names,
            list(self._metrics.value),
            smooth=self._smooth.value,
            logy=self._logy.value,
            events=self._show_events.value,
        )

    def _event_table(self, names) -> str:
        rows = self.session.event_rows(names)
        if not rows:
            return "<i>no events: no NaN, spike, restart, OOM, timeout, cancellation or traceback found</i>"
        return html_table(["run", "line", "step", "kind", "metric", "message"], rows, align_right=(1, 2))

    def compare(self) -> None:
        """Compare runs A and B and show the table and the verdict."""
        self.errors.run(self._run_compare)

    def _run_compare(self) -> None:
        doc = self.session.compare(self._cmp_a.value, self._cmp_b.value, by=self._cmp_by.value)
        verdict = (
            "<b style='color:#1b7d1b'>bitwise equal</b>"
            if doc["bitwise_equal"]
            else "<b style='color:#b00020'>not bitwise equal</b>"
        )
        extra = f" &middot; ignored (timing/memory): {esc(', '.join(doc['ignored']))}" if doc["ignored"] else ""
        self._cmp_out.value = f"<div>{doc['common_steps']} common steps &middot; {verdict}{extra}</div>" + html_table(
            ["metric", "steps", "max abs diff", "max rel diff", "bitwise"],
            self.session.compare_rows(doc),
            align_right=(1, 2, 3),
        )

    # -- for tests and notebooks ----------------------------------------------------------------------------
    @property
    def smoothing(self) -> float:
        """The smoothing slider's value."""
        return self._smooth.value

    @smoothing.setter
    def smoothing(self, value: float) -> None:
        self._smooth.value = value

    @property
    def png(self) -> bytes:
        """The PNG currently shown."""
        return bytes(self._plot.value)

    def select(self, runs=None, metrics=None) -> None:
        """Choose runs to overlay and metrics / roles to plot from code."""
        if runs is not None:
            self._runs.value = tuple(runs)
        if metrics is not None:
            self._metrics.value = tuple(metrics)

    def set_compare(self, a: str, b: str, by: str = "metric") -> None:
        """Choose the two runs to compare from code."""
        self._cmp_a.value, self._cmp_b.value, self._cmp_by.value = a, b, by
