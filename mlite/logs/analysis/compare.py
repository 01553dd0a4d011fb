"""Comparing two runs: per metric, over the steps both printed it, the max absolute and relative difference,
and whether the values are bitwise equal (the question behind "do the mlite and Megatron-Core curves match").

Metrics that measure the machine rather than the math (``timing_s/*``, ``perf/*``, throughput, MFU, memory,
elapsed time) never match between two runs; they are listed under ``ignored`` and left out of the verdict
unless asked for. ``by="role"`` compares the semantic roles instead (``loss`` of one run against ``loss`` of
the other even when one calls it ``train/loss`` and the other ``lm_loss``).
"""

from __future__ import annotations

import re

from ...errors import MliteError
from .roles import ROLES

MACHINE_RE = re.compile(
    r"^(timing_s|timing_per_token_ms|timing|perf)/|throughput|mfu|elapsed_time|memory|_gb$"
    r"|time_per|tokens_per_sec"
)
"""Metric names excluded from the verdict by default."""


def is_machine_metric(name: str) -> bool:
    """True for timing / throughput / memory metrics."""
    return bool(MACHINE_RE.search(name))


def _diff(sa, sb) -> dict:
    import numpy as np

    joined = sa.to_frame("a").join(sb.to_frame("b"), how="inner")
    a = joined["a"].to_numpy(dtype=np.float64)
    b = joined["b"].to_numpy(dtype=np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    same_special = (np.isnan(a) & np.isnan(b)) | ((a == b) & ~finite)  # NaN and NaN, inf and inf
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(a[finite] - b[finite])
        scale = np.maximum(np.abs(a[finite]), np.abs(b[finite]))
        rel = np.where(d == 0, 0.0, d / np.where(scale == 0, 1.0, scale))
    bits = a.view(np.int64) == b.view(np.int64)
    equal = bits | (np.isnan(a) & np.isnan(b))
    bitwise = bool(np.all(equal)) and len(a) > 0
    first = None
    if not bitwise and len(a):
        first = int(joined.index[np.argmax(~equal)])
    return {
        "steps": len(a),
        "max_abs_diff": float(d.max()) if d.size else (0.0 if len(a) else None),
        "max_rel_diff": float(rel.max()) if rel.size else (0.0 if len(a) else None),
        "nan_mismatch": int((~finite & ~same_special).sum()),
        "bitwise_equal": bitwise,
        "first_diff_step": first,
    }


def compare_runs(a, b, *, metrics=None, by: str = "metric", include_machine: bool = False) -> dict:
    """Compare runs ``a`` and ``b`` (:class:`frame.RunLog`).

    ``metrics``: names (or roles with ``by="role"``) to compare, default all common ones; ``include_machine``:
    count timing / throughput / memory metrics in the verdict. Returns a dict: ``a``, ``b`` (paths),
    ``by``, ``common_steps``, ``only_in_a``, ``only_in_b``, ``ignored``, ``metrics`` (one entry per compared
    metric: ``metric``, ``steps`` (common steps that printed it), ``max_abs_diff`` / ``max_rel_diff`` (over the
    steps where both values are finite; rel = |a-b| / max(|a|, |b|)), ``nan_mismatch`` (steps where only one
    side is NaN or inf, or they differ in that), ``bitwise_equal``, ``first_diff_step``) and ``bitwise_equal``
    (every compared value equal bit for bit, NaN matching NaN; at least one value compared).
    """
    if by not in ("metric", "role"):
        raise MliteError(f"compare by '{by}': use 'metric' or 'role'")
    if by == "role":
        ra, rb = a.roles(), b.roles()
        names = [r for r in (metrics or ROLES) if r in ra and r in rb]
        only_a = [r for r in (metrics or ROLES) if r in ra and r not in rb]
        only_b = [r for r in (metrics or ROLES) if r in rb and r not in ra]
        pairs = [(r, ra[r], rb[r]) for r in names]
        ignored: list[str] = []
    else:
        ma, mb = a.metrics, set(b.metrics)
        wanted = list(metrics) if metrics else [m for m in ma if m in mb]
        for m in wanted:
            if m not in mb or m not in a.metrics:
                raise MliteError(
                    f"metric '{m}' is not in both runs ({a.name}: {m in a.metrics}, "
                    f"{b.name}: {m in mb}); see `mlite logs check` for the metric names"
                )
        ignored = [] if (include_machine or metrics) else [m for m in wanted if is_machine_metric(m)]
        pairs = [(m, m, m) for m in wanted if m not in ignored]
        only_a = [m for m in ma if m not in mb]
        only_b = [m for m in b.metrics if m not in set(ma)]
    steps_a = set(a.wide.index.tolist())
    steps_b = set(b.wide.index.tolist())
    rows = []
    for label, name_a, name_b in pairs:
        row = {"metric": label}
        if by == "role":
            row["metric_a"], row["metric_b"] = name_a, name_b
        row.update(_diff(a.series(name_a), b.series(name_b)))
        rows.append(row)
    compared = [r for r in rows if r["steps"]]
    return {
        "a": a.path,
        "b": b.path,
        "by": by,
        "common_steps": len(steps_a & steps_b),
        "only_in_a": only_a,
        "only_in_b": only_b,
        "ignored": ignored,
        "metrics": rows,
        "bitwise_equal": bool(compared) and all(r["bitwise_equal"] for r in compared),
    }
