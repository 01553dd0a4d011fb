"""The standard panel: loss / grad norm / KL (+ entropy and reward when a run has them), one subplot per
role, runs overlaid, EMA smoothing, log-y, and events marked on the curves.

matplotlib is imported inside the functions (never at import time) and drawn on the Agg canvas of a
``matplotlib.figure.Figure``: no pyplot, no GUI backend, safe in a kernel, a thread or CI.
"""

from __future__ import annotations

import math

from ...errors import MliteError
from ..analysis.roles import EXTRA_ROLES, ROLE_LABELS, ROLES
from .legend import figure_legend

EVENT_FONT = 6
"""Font size of the event labels (points)."""

DEFAULT_PANEL = ("loss", "grad_norm", "kl")
"""Always drawn (when any run has the role)."""
OPTIONAL_PANEL = ("entropy", "reward")
"""Drawn when a run has them."""
_LINE_EVENTS = {
    "oom": "OOM",
    "nccl_timeout": "NCCL",
    "cancelled": "cancel",
    "time_limit": "time limit",
    "preempted": "preempt",
    "exit_code": "exit",
    "traceback": "traceback",
    "restart": "restart",
}


def ema(series, smooth: float):
    """Debiased exponential moving average (TensorBoard's smoothing): weight ``smooth`` in [0, 1) on the past;
    NaN and inf are skipped (the curve carries on through them)."""
    import numpy as np

    if not 0 <= smooth < 1:
        raise MliteError(f"smoothing {smooth}: use a value in [0, 1) (0 = raw, 0.9 = strong)")
    if smooth == 0 or len(series) == 0:
        return series
    clean = series.replace([np.inf, -np.inf], np.nan)
    return clean.ewm(alpha=1 - smooth, adjust=True, ignore_na=True).mean()


def default_panels(runs) -> list[str]:
    """Roles of the standard panel that at least one run has (loss, grad norm, KL, then entropy, reward)."""
    out = [r for r in DEFAULT_PANEL if any(run.role(r) for run in runs)]
    out += [r for r in OPTIONAL_PANEL if any(run.role(r) for run in runs)]
    return out or ([m for m in runs[0].metrics[:3]] if runs and runs[0].metrics else [])


def _resolve(run, item: str) -> str | None:
    if item in ROLES or item in EXTRA_ROLES:
        return run.role(item)
    return item if item in run.metrics else None


def _auto_log(values) -> bool:
    import numpy as np

    v = values[np.isfinite(values)]
    return bool(v.size) and bool((v > 0).all()) and v.max() / v.min() > 50


def draw(fig, runs, panels=None, *, smooth: float = 0.0, logy="auto", events: bool = True, ncols: int = 2):
    """Draw the panel into matplotlib Figure ``fig``. ``panels``: roles (``loss``, ``grad_norm``, ``kl``,
    ``entropy``, ``reward``, ``lr``, ``throughput``) or metric names; ``logy``: True, False or ``"auto"``
    (log when a panel's values are positive and span more than 50x)."""
    import numpy as np

    runs = list(runs)
    if not runs:
        raise MliteError("nothing to plot: no run was read (check the file names or the glob)")
    panels = list(panels) if panels else default_panels(runs)
    if not panels:
        raise MliteError("nothing to plot: the runs have no metric values (see `mlite logs check`)")
    unknown = [p for p in panels if not any(_resolve(r, p) for r in runs)]
    if unknown:
        raise MliteError(f"no run has metric or role {', '.join(repr(u) for u in unknown)}; roles: {', '.join(ROLES)}")
    ncols = max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    colors = [f"C{i % 10}" for i in range(len(runs))]
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for k, item in enumerate(panels):
        ax = axes[k // ncols][k % ncols]
        all_vals = []
        labelled: set[str] = set()
        names = {_resolve(r, item) for r in runs} - {None}
        line_events: dict[int, list[str]] = {}
        for run, color in zip(runs, colors):
            metric = _resolve(run, item)
            if metric is None or not run.has_values:
                continue
            s = run.series(metric)
            x, y = s.index.to_numpy(), s.to_numpy(dtype=float)
            all_vals.append(y)
            label = run.name if len(names) == 1 else f"{run.name} ({metric})"
            if smooth > 0:
                ax.plot(x, y, color=color, alpha=0.25, linewidth=0.8)
                sm = ema(s, smooth).to_numpy(dtype=float, copy=True)
                sm[~np.isfinite(y)] = np.nan  # no smoothed line across NaN / inf stretches
                ax.plot(x, sm, color=color, linewidth=1.6, label=label)
            else:
                ax.plot(x, y, color=color, linewidth=1.2, label=label)
            if item == "loss":
                val = run.role("val_loss")
                if val is not None:
                    vs = run.series(val)
                    ax.plot(
                        vs.index,
                        vs.to_numpy(),
                        "o--",
                        color=color,
                        markersize=3,
                        linewidth=0.8,
                        label=f"{run.name} ({val})",
                    )
            if events:
                _mark_events(ax, run, metric, s, labelled, line_events)
        title = ROLE_LABELS.get(item, item)
        if item in ROLE_LABELS and len(names) == 1:
            title += f"  ({next(iter(names))})"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        vals = np.concatenate(all_vals) if all_vals else np.zeros(0)
        wants_log = logy is True or (logy == "auto" and item in ("loss", "grad_norm") and _auto_log(vals))
        if wants_log and vals.size and (vals[np.isfinite(vals)] > 0).all():
            ax.set_yscale("log")
        _place_event_labels(ax, line_events)
    for k in range(len(panels), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    figure_legend(fig, [ax for row in axes for ax in row if ax.get_visible()])
    return fig


def _place_event_labels(ax, line_events: dict) -> None:
    """The labels of the vertical event lines (step -> kinds, gathered over every run of the panel, each once),
    written across the top of the panel in rows: a label goes in the highest row where it overlaps no other."""
    if not line_events:
        return
    x0, x1 = ax.get_xlim()
    span = (x1 - x0) or 1.0
    fig = ax.get_figure()
    pos = ax.get_position()
    width_pt = max(pos.width * fig.get_figwidth() * 72, 1.0)
    row_h = EVENT_FONT * 1.6 / max(pos.height * fig.get_figheight() * 72, 1.0)
    rows: list[list[tuple[float, float]]] = []
    for step in sorted(line_events):
        text = ", ".join(line_events[step])
        f = (step - x0) / span
        w = (len(text) * 0.62 * EVENT_FONT + 6) * 1.3 / width_pt  # a margin: the layout narrows the panel a little
        right = f > 0.75
        lo, hi = (f - w, f) if right else (f, f + w)
        r = next((i for i, row in enumerate(rows) if all(hi < a or lo > b for a, b in row)), len(rows))
        if r == len(rows):
            rows.append([])
        rows[r].append((lo, hi))
        ax.annotate(
            text,
            (step, 0.985 - r * row_h),
            xycoords=ax.get_xaxis_transform(),
            fontsize=EVENT_FONT,
            va="top",
            ha="right" if right else "left",
            color="darkred",
            xytext=(-2 if right else 2, 0),
            textcoords="offset points",
            bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
        )


def _mark_events(ax, run, metric: str, s, labelled: set, line_events: dict) -> None:
    """Spikes as red triangles on the curve, NaN / inf as dotted lines, failures and restarts as vertical lines;
    their kinds go into ``line_events`` (step -> kinds, shared by the panel's runs) for :func:`_place_event_labels`."""
    at_step: dict[int, list[str]] = {}
    for ev in run.events:
        if ev.step is None:
            continue
        if ev.metric == metric and ev.kind == "spike" and ev.step in s.index:
            ax.plot(
                [ev.step],
                [s.loc[ev.step]],
                "v",
                color="red",
                markersize=7,
                markeredgecolor="black",
                label="spike" if "spike" not in labelled else None,
            )
            labelled.add("spike")
        elif ev.metric == metric and ev.kind in ("nan", "inf"):
            ax.axvline(
                ev.step,
                color="red",
                linestyle=":",
                linewidth=1.2,
                label=ev.kind.upper() if ev.kind not in labelled else None,
            )
            labelled.add(ev.kind)
        elif ev.kind in _LINE_EVENTS:
            kinds = at_step.setdefault(ev.step, [])
            if _LINE_EVENTS[ev.kind] not in kinds:
                kinds.append(_LINE_EVENTS[ev.kind])
    for step, kinds in at_step.items():
        restart = kinds == ["restart"]
        ax.axvline(
            step, color="gray" if restart else "darkred", linestyle="--" if restart else "-.", linewidth=0.9, alpha=0.8
        )
        shared = line_events.setdefault(step, [])
        shared += [k for k in kinds if k not in shared]


def plot_runs(
    runs,
    panels=None,
    *,
    smooth: float = 0.0,
    logy="auto",
    events: bool = True,
    ncols: int = 2,
    width: float = 10.0,
    row_height: float = 3.0,
    dpi: int = 100,
    baseline=None,
):
    """A new matplotlib Figure with the panel (see :func:`draw`). ``baseline``: one of ``runs`` (or its name);
    then each panel shows every other run's difference from it (:mod:`diffplot`) instead of the curves."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    runs = list(runs)
    base = _baseline(runs, baseline) if baseline is not None else None
    if base is not None and not panels:
        panels = [p for p in default_panels(runs) if base.role(p) or p in base.metrics]
    n = len(list(panels) if panels else default_panels(runs)) if runs else 1
    nrows = math.ceil(max(1, n) / max(1, min(ncols, max(1, n))))
    fig = Figure(figsize=(width, row_height * nrows), dpi=dpi)
    FigureCanvasAgg(fig)
    if base is not None:
        from .diffplot import draw_differences

        if not 0 <= smooth < 1:
            raise MliteError(f"smoothing {smooth}: use a value in [0, 1) (0 = raw, 0.9 = strong)")
        return draw_differences(
            fig, runs, base, list(panels), ncols=ncols, smooth_fn=(lambda s: ema(s, smooth)) if smooth else None
        )
    return draw(fig, runs, panels, smooth=smooth, logy=logy, events=events, ncols=ncols)


def _baseline(runs, baseline):
    """The run ``baseline`` names among ``runs`` (a RunLog, a run name or the path it was read from)."""
    if not isinstance(baseline, str):
        if any(r is baseline for r in runs):
            return baseline
        raise MliteError("the baseline run must be one of the runs plotted")
    for r in runs:
        if baseline in (r.name, r.path) or r.path.rstrip("/") == baseline.rstrip("/"):
            return r
    raise MliteError(
        f"baseline '{baseline}' is none of the runs read ({', '.join(r.name for r in runs)}): give "
        f"its run name or the path it was read from"
    )


def figure_png(fig, **savefig_kwargs) -> bytes:
    """PNG bytes of a figure (the one PNG encoder of the kit: the CLI, the log session and the widgets use it)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig_kwargs)
    return buf.getvalue()


def save_plot(runs, path, panels=None, **kwargs) -> None:
    """Draw the panel and write it to ``path`` (the format from the suffix: .png, .pdf, .svg)."""
    fig = plot_runs(runs, panels, **kwargs)
    try:
        fig.savefig(path)
    except (OSError, ValueError) as e:
        raise MliteError(f"cannot write plot '{path}': {e}") from None
