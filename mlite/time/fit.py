"""Benchmark-anchored calibration: refit a profile's compute efficiency from one finished debug run.

The run directory's ``config.json`` says what ran (model, mesh, options: :func:`mlite.launch.memory_check.plan_for`),
its ``metrics.jsonl`` how long each step took (``timing_s/step``, rank 0's wall time). The median step after the
warm-up steps is the anchor; one scale ``s`` multiplies every compute efficiency of the profile (GEMM, grouped GEMM,
attention forward and backward, elementwise; capped at 1) and divides its host launch cost and fixed GEMM cost (a
small model is launch-bound), and is solved so that :func:`mlite.time.predict` of the run
equals the anchor. Communication and host figures are not touched (a single-node run does not measure them). The
idea is AMD Primus's "benchmark-anchored" projection: measure once per regime, then project analytically.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path

from ..errors import MliteError
from .hardware import HardwareProfile

WARMUP_STEPS = 2
"""Steps left out of the anchor (allocator warm-up, compilation, first-touch)."""
EFFICIENCIES = (
    "gemm_efficiency",
    "grouped_gemm_efficiency",
    "attention_efficiency",
    "attention_bwd_efficiency",
    "elementwise_efficiency",
)
"""The profile fields the refit scales."""


def run_step_seconds(run_dir) -> tuple[float, int]:
    """Median ``timing_s/step`` after :data:`WARMUP_STEPS` of a run directory, and how many steps it is over (the
    records as :meth:`mlite.launch.rundir.RunDir.read_metrics` reads them: a torn last line is left out)."""
    from ..launch.rundir import RunDir

    rd = RunDir(run_dir)
    if not rd.metrics_jsonl.is_file():
        raise MliteError(
            f"--calibrate-from {run_dir}: no {rd.metrics_jsonl.name} there; give a finished mlite run's folder"
        )
    kept = [
        float(t)
        for step, data in rd.read_metrics()
        if step > WARMUP_STEPS
        and isinstance(t := data.get("timing_s/step"), (int, float))
        and math.isfinite(t)
        and t > 0
    ]
    if not kept:
        raise MliteError(
            f"--calibrate-from {run_dir}: {rd.metrics_jsonl.name} has no timing_s/step after the first "
            f"{WARMUP_STEPS} steps; run at least {WARMUP_STEPS + 1} steps"
        )
    return statistics.median(kept), len(kept)


def scaled(hw: HardwareProfile, s: float) -> HardwareProfile:
    """The profile with every compute efficiency times ``s`` (capped at 1), launch and fixed GEMM costs over ``s``."""
    return replace(
        hw,
        kernel_launch_s=hw.kernel_launch_s / s,
        gemm_overhead_s=hw.gemm_overhead_s / s,
        **{k: min(1.0, getattr(hw, k) * s) for k in EFFICIENCIES},
    )


def refit(hw: HardwareProfile, spec, plan, training, measured_s: float) -> tuple[HardwareProfile, float, float]:
    """``(profile, scale, predicted_before)``: the profile whose prediction of ``plan`` equals ``measured_s``."""
    from .model import predict

    before = predict(spec, plan, training, hw).step_s
    lo, hi = 1e-4, 1e4
    for _ in range(80):  # bisection on log s: the step time falls as s grows
        mid = math.sqrt(lo * hi)
        if predict(spec, plan, training, scaled(hw, mid)).step_s > measured_s:
            lo = mid
        else:
            hi = mid
    s = math.sqrt(lo * hi)
    return scaled(hw, s), s, before


def calibrate_from_run(run_dir, hw: HardwareProfile) -> tuple[HardwareProfile, dict]:
    """The refitted profile and what the refit did (run, its step time, the prediction before and after)."""
    from ..launch.config import RunConfig
    from ..launch.memory_check import plan_for
    from ..launch.rundir import RunDir
    from .model import predict

    d = Path(run_dir)
    doc = RunDir(d).read_config_dict()
    if not isinstance(doc, dict):
        raise MliteError(
            f"--calibrate-from {run_dir}: no readable config.json; give the folder of a run mlite run wrote"
        )
    config = RunConfig.from_dict(doc)
    spec, plan, training = plan_for(config)
    measured, n = run_step_seconds(d)
    fitted, s, before = refit(hw, spec, plan, training, measured)
    after = predict(spec, plan, training, fitted).step_s
    info = {
        "run_dir": str(d),
        "model": spec.name,
        "device": config.device,
        "measured_step_s": measured,
        "steps": n,
        "predicted_before_s": before,
        "predicted_after_s": after,
        "scale": s,
        "capped": any(getattr(fitted, k) >= 1.0 for k in EFFICIENCIES),
        "reached": abs(after / measured - 1) < 0.01,
    }
    fitted = replace(
        fitted,
        name=f"{hw.name} (refit from {d.name})",
        sources={**hw.sources, **{k: f"refit x{s:.3g} from {d}" for k in EFFICIENCIES}},
    )
    return fitted, info
