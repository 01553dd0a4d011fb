"""A predicted step as the views show it: bar rows of its parts (the memory view's time chart), its one-line
summary (the launcher header, the console) and the ``mlite time`` command line that reproduces it."""

from __future__ import annotations

import shlex

from .model import COMM_PARTS, PARTS

KIND = {
    **{k: "compute" for k in ("forward", "backward", "recompute")},
    **{k: "comm" for k in COMM_PARTS},
    "pp_bubble": "bubble",
    "host_bound": "host",
    "optimizer": "optimizer",
    "offload": "offload",
}
"""Part -> what kind of time it is (the chart colours by kind)."""


def time_rows(step_time) -> list[dict]:
    """One row per part that takes time, in step order (:data:`mlite.time.PARTS`): ``part``, ``kind``
    (:data:`KIND`), ``seconds`` and ``share`` (of the step)."""
    step = step_time.step_s
    return [
        {"part": k, "kind": KIND[k], "seconds": s, "share": s / step if step > 0 else 0.0}
        for k in PARTS
        if (s := step_time.parts.get(k, 0.0)) > 0
    ]


def summary(step_time) -> str:
    """``1.37 s, 750 tokens/s/GPU, MFU 32.8 % on H100``."""
    t = step_time
    return f"{t.step_s:.3g} s, {t.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, MFU {100 * t.mfu:.1f} % on {t.hardware.name}"


def time_command(ref: str, plan, options, hardware: str) -> str:
    """The ``mlite time ... --json`` command line of ``plan`` (a resolved mesh; a layout the planner chose is
    given as ``--pp-layout``) with ``options`` on ``hardware`` (a profile name or file, as given)."""
    from ..mesh.choices import mesh_command
    from ..options.cli import memory_flags

    words = [mesh_command(ref, plan).replace("mlite mesh", "mlite time", 1)]
    if plan.layout_source == "auto" and not plan.parallel.pp_layout:
        words += ["--pp-layout", shlex.quote(plan.layout)]
    words += memory_flags(options)
    return " ".join([*words, "--hardware", shlex.quote(str(hardware)), "--json"])
