"""The run view's presenter: polls one run's files and turns them into what ``RunView`` shows (status snapshot,
curves PNG, memory rows, byte and peak wording). It builds no widget; matplotlib draws through the Agg canvas only
(safe in the view's poller thread). It lives with the views so that :mod:`mlite.launch` stays free of UI code.

* :class:`RunMonitor` -- polls a :class:`~mlite.launch.handle.RunHandle` (cheap when nothing changed: it looks at
  the metrics file's size) and renders the curves to PNG.
* :func:`draw_curves` / :func:`curves_png` -- loss and grad norm against step.
* :func:`fmt_bytes`, :func:`peak_note` -- how the memory table words its figures.
* :func:`mesh_text` -- the mesh line over the memory table (the estimate's plan; the ranks ``memory.json`` measured).
"""

from __future__ import annotations

from mlite.launch import RunHandle
from mlite.launch.memory_check import estimate_for, memory_rows
from mlite.memory import GIB
from mlite.mesh.axes import DERIVED, RUN_AXES
from mlite.rundir import FAILED, STOPPED

from ._common import figure_png

MIB = GIB // 1024


def fmt_bytes(n) -> str:
    """``12.34 MiB`` / ``1.20 GiB``; ``—`` for None."""
    if n is None:
        return "—"
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    if abs(n) >= MIB:
        return f"{n / MIB:.2f} MiB"
    return f"{n / 1024:.1f} KiB"


def peak_note(measured: dict | None) -> str:
    """One sentence on what the measured peak is."""
    kind = (measured or {}).get("peak_kind") or next(
        (r.get("peak_kind") for r in (measured or {}).get("ranks", []) if r.get("peak_kind")), None
    )
    if kind and (measured or {}).get("peak") is None:  # the run goes on: memory.json holds step 1's figures only
        return (
            "measured peak: shown when the run ends (the peak of a whole tracked step, the quantity the estimate "
            "is); parameters, gradients and optimizer state are measured after the first step"
        )
    if kind == "cuda_max_memory_allocated":
        return "measured peak: torch.cuda.max_memory_allocated() of the largest rank"
    if kind == "cpu_tensor_peak":
        return (
            "measured peak: tensor memory at the peak of one step, tracked by PyTorch's MemTracker (a CPU has "
            "no allocator statistics); the estimate is the allocator peak of a steady-state step"
        )
    if kind:
        return f"measured peak: {kind}"
    return "measured figures appear after the first step"


def draw_curves(fig, df, total_steps: int | None = None) -> None:
    """Loss and grad norm against step (two panels) into matplotlib Figure ``fig``; the step axis runs a quarter
    past the last step logged (at least 10 steps, at most the run's length), so a long run stays readable."""
    panels = [("train/loss", "loss"), ("train/grad_norm", "grad norm")]
    axes = fig.subplots(1, 2)
    last = int(df.index.max()) if df is not None and len(df) else 0
    right = min(total_steps, max(10, int(last * 1.25) + 1)) if total_steps else None  # grows with the run
    for ax, (col, label) in zip(axes, panels):
        if df is not None and col in getattr(df, "columns", ()):
            ax.plot(
                df.index.to_numpy(),
                df[col].to_numpy(dtype=float),
                marker="." if len(df) < 40 else None,
                lw=1.5,
                color="#1f77b4" if col == "train/loss" else "#d62728",
            )
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        if right:
            ax.set_xlim(0, right + 0.5)
        ax.grid(alpha=0.3)
    if df is None or not len(df):
        axes[0].text(0.5, 0.5, "waiting for the first step", ha="center", va="center", transform=axes[0].transAxes)
    fig.tight_layout()


MESH_KEYS = tuple(a.name for a in RUN_AXES) + DERIVED
"""The mesh line's fields: the axes a debug run takes (:data:`mlite.mesh.axes.RUN_AXES`), then DP and EDP."""


def mesh_text(est, measured: dict | None = None) -> str:
    """``mesh: tp T · cp C · ep E · etp 1 · dp D · edp F`` of an estimate's plan; with ``memory.json``'s content,
    how many ranks it measured and, should any rank report another mesh, that rank's mesh."""
    plan = est.plan.to_dict()
    text = "mesh: " + " · ".join(f"{k} {plan[k]}" for k in MESH_KEYS)
    ranks = [r for r in (measured or {}).get("ranks") or [] if r.get("mesh")]
    if ranks:
        text += f" · measured on {len(ranks)} rank{'s' if len(ranks) != 1 else ''}"
        other = [r["mesh"] for r in ranks if any(r["mesh"].get(k) != plan[k] for k in MESH_KEYS)]
        if other:
            text += " (a rank measured " + " · ".join(f"{k} {other[0].get(k)}" for k in MESH_KEYS) + ")"
    return text


def curves_png(df, total_steps: int | None = None, *, size=(9.0, 3.0), dpi: int = 90) -> bytes:
    """PNG bytes of :func:`draw_curves`."""
    return figure_png(lambda fig: draw_curves(fig, df, total_steps), size=size, dpi=dpi)


class RunMonitor:
    """Cheap polling of one run for a live view (see the module docstring)."""

    def __init__(self, handle: RunHandle):
        self.handle = handle
        self._size = -1
        self._df = None
        self.estimate = None
        """The memory estimate for the run's config (computed once)."""

    def poll(self) -> dict:
        """``{"status", "reason", "step", "total", "changed", "loss", "grad_norm"}``; ``changed`` when new metric
        records arrived since the last poll."""
        h = self.handle
        status = h.status
        try:
            size = h.metrics_jsonl.stat().st_size
        except OSError:
            size = 0
        changed = size != self._size
        if changed:
            self._size = size
            self._df = h.metrics()
        df = self._df
        last = df.iloc[-1] if df is not None and len(df) else None
        return {
            "status": status,
            "reason": h.reason if status in (FAILED, STOPPED) else None,
            "step": int(df.index[-1]) if last is not None else 0,
            "total": h.total_steps,
            "changed": changed,
            "loss": _num(last, "train/loss"),
            "grad_norm": _num(last, "train/grad_norm"),
        }

    def metrics(self):
        return self._df if self._df is not None else self.handle.metrics()

    def png(self) -> bytes:
        return curves_png(self.metrics(), self.handle.total_steps)

    def memory_rows(self) -> list[dict]:
        cfg = self.handle.config
        if cfg is None:
            return []
        if self.estimate is None:
            self.estimate = estimate_for(cfg)
        return memory_rows(cfg, self.handle.memory(), self.estimate)

    def mesh_line(self) -> str | None:
        """:func:`mesh_text` of the run's config and its ``memory.json`` (None for a run without a config)."""
        cfg = self.handle.config
        if cfg is None:
            return None
        if self.estimate is None:
            self.estimate = estimate_for(cfg)
        return mesh_text(self.estimate, self.handle.memory())

    def optimizer(self) -> str | None:
        """The run's optimizer (``fsdp2`` or ``dist_opt``): the estimate column is ``mlite memory --optimizer`` it."""
        cfg = self.handle.config
        return None if cfg is None else cfg.optimizer


def _num(row, key):
    if row is None or key not in row.index:
        return None
    return float(row[key])
