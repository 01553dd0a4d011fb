"""The difference-from-baseline panel: for each metric (or role) and each run, ``run - baseline`` over the steps
both printed, with the zero line marked, so that a 1e-7 drift between two runs that overlay perfectly in the
standard panel becomes visible (``mlite logs plot --baseline RUN``, ``plot_runs(..., baseline=run)``).

Roles resolve per run (``loss`` is ``train/loss`` in one run and ``lm_loss`` in the other). A step that only one
run printed is left out; NaN or inf on either side leaves a gap. matplotlib is imported by the caller's figure.
"""

from __future__ import annotations

import math

from ...errors import MliteError
from ..analysis.roles import EXTRA_ROLES, ROLE_LABELS, ROLES
from .legend import figure_legend


def _resolve(run, item: str) -> str | None:
    if item in ROLES or item in EXTRA_ROLES:
        return run.role(item)
    return item if item in run.metrics else None


def difference(run, baseline, item: str):
    """``run - baseline`` for metric or role ``item`` as a float Series over the common steps (None when one of
    the two runs lacks it)."""
    a, b = _resolve(run, item), _resolve(baseline, item)
    if a is None or b is None:
        return None
    sa, sb = run.series(a), baseline.series(b)
    sa = sa[~sa.index.duplicated(keep="last")]
    sb = sb[~sb.index.duplicated(keep="last")]
    joined = sa.to_frame("a").join(sb.to_frame("b"), how="inner")
    return (joined["a"] - joined["b"]).rename(f"{a} - {b}")


def draw_differences(fig, runs, baseline, panels, *, ncols: int = 2, smooth_fn=None):
    """Draw one subplot per item of ``panels``: each run of ``runs`` (the baseline itself skipped) minus
    ``baseline``. ``smooth_fn``: applied to each difference series (the EMA of the standard panel)."""
    others = [r for r in runs if r is not baseline]
    if not others:
        raise MliteError(f"--baseline {baseline.name}: give at least one other run to compare with it")
    missing = [p for p in panels if _resolve(baseline, p) is None]
    if missing:
        raise MliteError(
            f"baseline run '{baseline.name}' has no metric or role {', '.join(map(repr, missing))}; "
            f"it has {', '.join(baseline.metrics[:6])}"
        )
    ncols = max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for k, item in enumerate(panels):
        ax = axes[k // ncols][k % ncols]
        drawn = 0
        for i, run in enumerate(others):
            d = difference(run, baseline, item)
            if d is None or d.empty:
                continue
            y = smooth_fn(d) if smooth_fn is not None else d
            ax.plot(
                d.index.to_numpy(),
                y.to_numpy(dtype=float),
                color=f"C{(i + 1) % 10}",
                linewidth=1.2,
                label=f"{run.name} - {baseline.name}",
            )
            drawn += 1
        ax.axhline(0.0, color="black", linewidth=0.8, alpha=0.6)
        ax.set_title(f"{ROLE_LABELS.get(item, item)}: difference from {baseline.name}", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        if not drawn:
            ax.text(0.5, 0.5, "no common steps", transform=ax.transAxes, ha="center", fontsize=8)
    for k in range(len(panels), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    figure_legend(fig, [ax for row in axes for ax in row if ax.get_visible()])
    return fig
