"""Synthetic Megatron-LM console logs (optionally hard-wrapped at ``spec.wrap`` columns, as a terminal or a copy
into an issue cuts them): iteration lines behind a launcher prefix, fp16
iterations skipped by the loss scaler (no ``lm loss`` / ``grad norm``), validation blocks between rulers, a
restart from a checkpoint, NaN loss, and a Slurm or CUDA ending."""

from __future__ import annotations

import math
import random

from ..logs.formats.megatron import field_name
from . import text as T
from .curves import curves
from .spec import GenSpec, Truth, ending_events, step_sequence


def megatron_log(spec: GenSpec, rng: random.Random) -> tuple[list[str], Truth]:
    """``(lines, truth)`` of the Megatron log ``spec`` describes."""
    truth = Truth()
    world = spec.nodes * spec.gpus_per_node
    pre = T.megatron_prefix(spec.prefix, world - 1, spec.nodes - 1)
    lines = [
        f"{pre}> building GPT model ...",
        f"{pre}training ...",
        f"{pre}[before the start of training step] datetime: 2025-04-13 23:41:00 ",
    ]
    interval, gbs, total = 10, 16 * spec.nodes, 10 * (spec.first_step + spec.steps + 10)
    seen: set[int] = set()
    prev = None
    for n, rec in enumerate(step_sequence(spec)):
        it = rec * interval
        if prev is not None and it < prev:
            lines += [
                f"{pre}  loading checkpoint from /ckpt at iteration {it - interval}",
                f"{pre}  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration {it - interval}",
            ]
            truth.events.add("restart")
        prev = it
        lines += T.megatron_noise(rng, pre, spec.noise)
        c = curves(rng, rec, spec)
        loss = 10.8 * c["loss"] / 1.5
        fields = [
            ("consumed samples", f"{it * gbs:12d}", float(it * gbs)),
            ("elapsed time per iteration (ms)", f"{rng.uniform(800, 1300):.1f}", None),
            ("throughput per GPU (TFLOP/s/GPU)", f"{rng.uniform(120, 180):.1f}", None),
            ("learning rate", f"{1e-4 * min(1, it / 200):.6E}", None),
            ("global batch size", f"{gbs:5d}", float(gbs)),
        ]
        skipped = rec in spec.skipped
        if not skipped:
            fields.append(("lm loss", f"{loss:.6E}", None))
        fields.append(("loss scale", f"{(8388608.0 if skipped else 4096.0):.1f}", None))
        if not skipped:
            fields += [("grad norm", f"{c['grad_norm']:.3f}", None), ("num zeros", f"{rng.randint(0, 2000):.1f}", None)]
        nan_its = 1 if math.isnan(loss) else 0
        fields += [
            ("number of skipped iterations", f"{interval if skipped else 0:3d}", None),
            ("number of nan iterations", f"{nan_its:3d}", None),
        ]
        body = " | ".join(f"{k}: {v}" for k, v, _ in fields)
        lines += T.hard_wrap(
            f"{pre} [2025-04-13 23:{41 + n // 60:02d}:{n % 60:02d}] iteration {it:8d}/{total:8d} | {body} |", spec.wrap
        )
        truth.records.append((it, {field_name(k): float(v) for k, v, _ in fields}))
        if nan_its:
            truth.events.add("nan")
        seen.add(it)
        if spec.val_every and (n + 1) % spec.val_every == 0:
            vl = loss + 0.1
            ppl = vl if math.isnan(vl) else math.exp(min(vl, 700))
            ruler = "-" * 90
            v1, v2 = f"{vl:.6E}", f"{ppl:.6E}"
            val = f"{pre} validation loss at iteration {it} on validation set | lm loss value: {v1} | lm loss PPL: {v2} | "
            lines += [f"{pre}{ruler}", *T.hard_wrap(val, spec.wrap), f"{pre}{ruler}"]
            truth.records.append((it, {"val/lm_loss": float(v1), "val/lm_loss_ppl": float(v2)}))
    if spec.spikes:
        truth.events.add("spike")
    if spec.drift_from is not None:
        truth.events.add("change_point")
    tail = (
        T.verl_ending(spec.ending, rng, driver=pre, nodes=spec.nodes, ansi=False, worker=pre)
        if spec.ending != "ok"
        else []
    )
    lines += [ln for ln in tail if "ray.exceptions" not in ln]
    truth.events |= ending_events(spec.ending)
    return lines, truth
