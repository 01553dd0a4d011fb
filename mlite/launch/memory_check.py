"""The measured memory of a debug run next to the estimator's figure for the same configuration.

* :func:`estimate_for` -- ``mlite.memory.estimate`` for a :class:`~mlite.launch.config.RunConfig`: the run's
  optimizer (``fsdp2`` or ``dist_opt``, with its distributed-optimizer switch and gradient dtype), the mesh the run
  uses (``nproc`` ranks, as ``mlite.mesh.resolve`` plans it), the run's dtypes, PAO, moments, offload and
  recompute, sequence length = tokens per micro-batch.
* :func:`memory_rows` -- per item (parameters, gradients, optimizer state, peak): measured bytes (largest rank of
  ``memory.json``) and estimated bytes, and their ratio.

The run view (``widgets/run_monitor.py``, ``widgets/run_view.py``) renders these rows; nothing here draws.
"""

from __future__ import annotations

from .config import RunConfig


def plan_for(config: RunConfig):
    """``(spec, plan, training options)`` of ``config``'s run: its model, the mesh its ``nproc`` ranks use (as
    ``mlite.mesh.resolve`` plans it) and its options, as the estimator and the time model take them."""
    from ..mesh import resolve

    spec = config.model_spec()
    opts = config.training_options()
    p = config.parallel_config()
    # CP splits each sequence into 2*CP chunks: the planner's sequence-length rule sees the padded length
    seq = max(opts.seq_len // (2 * p.cp), 1) * 2 * p.cp
    plan = resolve(spec, config.nproc, p, seq_len=seq, gpus_per_node=opts.gpus_per_node, auto_uneven=True)
    return spec, plan, opts


def estimate_for(config: RunConfig):
    """The memory estimate (``MemoryEstimate``) of ``config``'s run."""
    from ..memory import estimate

    return estimate(*plan_for(config))


def memory_rows(config: RunConfig, measured: dict | None, est=None) -> list[dict]:
    """Rows ``{"item", "measured", "estimated", "ratio"}`` (bytes per rank; measured = the largest rank).

    Optimizer state counts device and host together (offload_fraction moves it, it still exists). ``peak``:
    measured as ``memory.json`` says once the run has ended (its top-level ``peak``, gathered from every rank:
    ``peak_kind`` CUDA ``max_memory_allocated``, or on CPU the tensor peak of the step run under PyTorch's
    MemTracker), estimated as the allocator peak of a steady-state step. While the run goes ``memory.json`` holds
    only the first step's per-rank figures (on a CPU the tally of parameters, gradients and optimizer state, not a
    peak): the peak row stays empty until then, so the ratio always compares the same quantity.
    """
    est = est if est is not None else estimate_for(config)
    w = est.worst
    host_opt = w.host.get("offloaded_optimizer", 0.0)
    estimated = {
        "parameters": w.params,
        "gradients": w.grads,
        "optimizer state": w.optimizer + host_opt,
        "peak": w.peak,
    }
    ranks = (measured or {}).get("ranks") or []

    def largest(key):
        vals = [r.get(key) for r in ranks if r.get(key) is not None]
        return max(vals) if vals else None

    got = {
        "parameters": largest("params"),
        "gradients": largest("grads"),
        "optimizer state": largest("optimizer"),
        "peak": (measured or {}).get("peak"),  # the finished run's (see above), never the first step's tally
    }
    rows = []
    for item, e in estimated.items():
        m = got[item]
        ratio = (m / e) if m is not None and e else None
        rows.append({"item": item, "measured": m, "estimated": round(e), "ratio": ratio})
    return rows
