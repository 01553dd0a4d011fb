"""What the run view shows, computed from a run's files: live loss / grad-norm curves, progress, and the measured
memory next to the estimator's figure for the same configuration.

* :func:`estimate_for` -- ``mlite.memory.estimate`` for a :class:`~mlite.launch.config.RunConfig`: optimizer
  ``fsdp2``, the mesh the run uses (``nproc`` ranks, pure DP, as ``mlite.mesh.resolve`` plans it), the run's
  dtypes, PAO, moments, offload and recompute, sequence length = tokens per micro-batch.
* :func:`memory_rows` -- per item (parameters, gradients, optimizer state, peak): measured bytes (largest rank of
  ``memory.json``) and estimated bytes, and their ratio.
* :class:`RunMonitor` -- polls a :class:`~mlite.launch.handle.RunHandle` (cheap when nothing changed: it looks at
  the metrics file's size) and renders the curves to PNG with the Agg canvas (no pyplot; safe in a thread).

No UI library is imported at module level; matplotlib and pandas load inside the functions.
"""

from __future__ import annotations

from .config import RunConfig
from .handle import RunHandle

MIB = 1024**2


def estimate_for(config: RunConfig):
    """The memory estimate (``MemoryEstimate``) of ``config``'s run."""
    from ..memory import estimate
    from ..mesh import resolve
    from ..models import from_hf_config

    spec = from_hf_config(config.model)
    opts = config.training_options()
    p = config.parallel_config()
    plan = resolve(spec, config.nproc, p, seq_len=max(opts.seq_len // (2 * p.cp), 1) * 2 * p.cp, gpus_per_node=opts.gpus_per_node,
                   auto_uneven=True)
    return estimate(spec, plan, opts)


def memory_rows(config: RunConfig, measured: dict | None, est=None) -> list[dict]:
    """Rows ``{"item", "measured", "estimated", "ratio"}`` (bytes per rank; measured = the largest rank).

    Optimizer state counts device and host together (offload_fraction moves it, it still exists). ``peak``:
    measured as ``memory.json`` says (``peak_kind``: CUDA ``max_memory_allocated``, or on CPU the tensor peak of
    the step run under PyTorch's MemTracker), estimated as the allocator peak of a steady-state step.
    """
    est = est if est is not None else estimate_for(config)
    w = est.worst
    host_opt = w.host.get("offloaded_optimizer", 0.0)
    estimated = {"parameters": w.params, "gradients": w.grads, "optimizer state": w.optimizer + host_opt,
                 "peak": w.peak}
    ranks = (measured or {}).get("ranks") or []

    def largest(key):
        vals = [r.get(key) for r in ranks if r.get(key) is not None]
        return max(vals) if vals else None

    got = {"parameters": largest("params"), "gradients": largest("grads"), "optimizer state": largest("optimizer"),
           "peak": (measured or {}).get("peak", largest("peak"))}
    rows = []
    for item, e in estimated.items():
        m = got[item]
        ratio = (m / e) if m is not None and e else None
        rows.append({"item": item, "measured": m, "estimated": int(round(e)), "ratio": ratio})
    return rows


def fmt_bytes(n) -> str:
    """``12.34 MiB`` / ``1.20 GiB``; ``—`` for None."""
    if n is None:
        return "—"
    if abs(n) >= 1024**3:
        return f"{n / 1024**3:.2f} GiB"
    if abs(n) >= MIB:
        return f"{n / MIB:.2f} MiB"
    return f"{n / 1024:.1f} KiB"


def peak_note(measured: dict | None) -> str:
    """One sentence on what the measured peak is."""
    kind = (measured or {}).get("peak_kind") or next(
        (r.get("peak_kind") for r in (measured or {}).get("ranks", []) if r.get("peak_kind")), None)
    if kind == "cuda_max_memory_allocated":
        return "measured peak: torch.cuda.max_memory_allocated() of the largest rank"
    if kind == "cpu_tensor_peak":
        return ("measured peak: tensor memory at the peak of one step, tracked by PyTorch's MemTracker (a CPU has "
                "no allocator statistics); the estimate is the allocator peak of a steady-state step")
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
            ax.plot(df.index.to_numpy(), df[col].to_numpy(dtype=float), marker="." if len(df) < 40 else None,
                    lw=1.5, color="#1f77b4" if col == "train/loss" else "#d62728")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        if right:
            ax.set_xlim(0, right + 0.5)
        ax.grid(alpha=0.3)
    if df is None or not len(df):
        axes[0].text(0.5, 0.5, "waiting for the first step", ha="center", va="center", transform=axes[0].transAxes)
    fig.tight_layout()


def curves_png(df, total_steps: int | None = None, *, size=(9.0, 3.0), dpi: int = 90) -> bytes:
    """PNG bytes of :func:`draw_curves` (Agg canvas)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi)
    FigureCanvasAgg(fig)
    draw_curves(fig, df, total_steps)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


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
        return {"status": status, "reason": h.reason if status in ("failed", "stopped") else None,
                "step": int(df.index[-1]) if last is not None else 0, "total": h.total_steps, "changed": changed,
                "loss": _num(last, "train/loss"), "grad_norm": _num(last, "train/grad_norm")}

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


def _num(row, key):
    if row is None or key not in row.index:
        return None
    return float(row[key])
