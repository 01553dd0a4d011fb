"""verl logs: console lines ``step:N - key:value - ...`` inside the noise of a multi-node Slurm job (Ray
prefixes with ANSI colours, vLLM chatter, rollout dumps, tqdm bars, optionally glued or hard-wrapped), and
the file logger's JSONL ``{"step", "data"}``."""

from __future__ import annotations

import json
import math
import random

from . import text as T
from .curves import curves
from .metrics import plausible
from .spec import GenSpec, Truth, ending_events, step_sequence
from .text import hard_wrap


def verl_values(rng: random.Random, step: int, spec: GenSpec) -> dict[str, float]:
    """The metrics verl prints at ``step`` for the trainer ``spec.kind``."""
    c = curves(rng, step, spec)
    if spec.kind == "sft":
        return {
            "train/loss": c["loss"],
            "train/grad_norm": c["grad_norm"],
            "train/lr": c["lr"],
            "train/mfu": rng.uniform(0.3, 0.45),
            "train/global_tokens": float(rng.randint(60000, 70000)),
            "train/total_tokens(B)": step * 6.5e-5,
            "perf/max_memory_allocated_gb": 38.16 + rng.random(),
            "perf/max_memory_reserved_gb": 59.59,
            "perf/cpu_memory_used_gb": rng.uniform(60, 70),
        }
    keys = T.GRPO_KEYS + (T.PPO_EXTRA_KEYS if spec.kind == "ppo" else ())
    out = {}
    for k in keys:
        if k == "training/global_step":
            out[k] = float(step)
        elif k == "actor/pg_loss":
            out[k] = c["loss"] - 0.3 + rng.gauss(0, 0.01)
        elif k == "actor/grad_norm":
            out[k] = c["grad_norm"]
        elif k == "critic/grad_norm":
            out[k] = 10 * c["grad_norm"] * math.exp(rng.gauss(0, 0.05))
        elif k == "critic/vf_loss":
            out[k] = 0.1 * c["loss"]
        elif k in ("actor/ppo_kl", "actor/kl_loss"):
            out[k] = c["kl"]
        elif k == "actor/entropy":
            out[k] = c["entropy"]
        elif k in ("critic/score/mean", "critic/rewards/mean"):
            out[k] = min(1.0, max(0.0, c["reward"]))  # the mean of 0/1 rewards
        elif k.endswith("/lr"):
            out[k] = c["lr"]
        else:
            out[k] = plausible(k, rng, step, out)
    return out


def format_value(key: str, v: float, precision: str) -> str:
    """A value as verl prints it: ``3f`` (``{v:.3f}``), ``repr`` (pprint) or ``np`` (numpy >= 2 reprs)."""
    if precision == "3f":
        return f"{v:.3f}"
    if key in T.INT_KEYS and v.is_integer():
        s = str(int(v))
        return f"np.int64({s})" if precision == "np" and key.startswith("training/") else s
    return f"np.float64({v!r})" if precision == "np" and key in T.NP_KEYS else repr(v)


def metric_line(step: int, values: dict[str, float], precision: str) -> tuple[str, dict[str, float]]:
    """The console line of one step and the values a reader gets back from it (``float`` of the printed text)."""
    parts, exact = [], {}
    for k, v in values.items():
        tok = format_value(k, v, precision)
        parts.append(f"{k}:{tok}")
        inner = tok[tok.index("(") + 1 : -1] if tok.startswith("np.") else tok
        exact[k] = float(inner)
    return f"step:{step} - " + " - ".join(parts), exact


def verl_console(spec: GenSpec, rng: random.Random) -> tuple[list[str], Truth]:
    """``(lines, truth)`` of a verl console log."""
    truth = Truth()
    drv = T.ray("TaskRunner", 14640, ansi=spec.ansi) if spec.kind != "sft" else ""
    steps = step_sequence(spec)
    total = spec.first_step + spec.steps + 20
    lines = (
        T.startup(rng, driver=drv, nodes=spec.nodes, gpus=spec.gpus_per_node, ansi=spec.ansi, total_steps=total)
        if spec.noise
        else []
    )
    if spec.first_step > 1:
        lines.append(f"{drv}Resuming from /checkpoints/global_step_{spec.first_step - 1}")
    prev = None
    for n, step in enumerate(steps):
        if prev is not None and step < prev:
            lines += [f"{drv}Resuming from /checkpoints/global_step_{step - 1}"]
            truth.events.add("restart")
        prev = step
        if spec.noise:
            lines += T.step_noise(rng, driver=drv, nodes=spec.nodes, ansi=spec.ansi, scale=spec.noise, step=step)
        values = verl_values(rng, step, spec)
        text, exact = metric_line(step, values, spec.precision)
        bar = T.tqdm_bar("Training Progress" if spec.kind != "sft" else "Epoch 1/3", step, total, 9.8)
        line = f"{drv}{bar}{text}" if spec.glued_tqdm else f"{drv}{text}"
        lines += hard_wrap(line, spec.wrap)
        if not spec.glued_tqdm and spec.noise:
            lines += [drv.rstrip() if drv else "", bar]
        truth.records.append((step, exact))
        if spec.val_every and (n + 1) % spec.val_every == 0:
            key = "val/loss" if spec.kind == "sft" else "val-core/openai/gsm8k/reward/mean@1"
            vtext, vexact = metric_line(step, {key: exact.get("train/loss", 0.5) + 0.03}, spec.precision)
            lines.append(f"{drv}{vtext}")
            truth.records.append((step, vexact))
    if any(math.isnan(v) for _, r in truth.records for v in r.values()):
        truth.events.add("nan")
    if spec.spikes:
        truth.events.add("spike")
    if spec.drift_from is not None:
        truth.events.add("change_point")
    lines += T.verl_ending(spec.ending, rng, driver=drv, nodes=spec.nodes, ansi=spec.ansi)
    truth.events |= ending_events(spec.ending)
    return lines, truth


def verl_jsonl(spec: GenSpec, rng: random.Random) -> tuple[list[str], Truth]:
    """``(lines, truth)`` of a verl file-logger JSONL file."""
    truth = Truth()
    lines = []
    for step in step_sequence(spec):
        values = verl_values(rng, step, spec)
        data = {k: (None if (math.isnan(v) and spec.null_nan) else v) for k, v in values.items()}
        lines.append(json.dumps({"step": step, "data": data}))  # bare NaN when not null_nan (old verl)
        truth.records.append((step, values))
    if any(math.isnan(v) for _, r in truth.records for v in r.values()):
        truth.events.add("nan")
    if spec.restart:
        truth.events.add("restart")
    if spec.spikes:
        truth.events.add("spike")
    if spec.drift_from is not None:
        truth.events.add("change_point")
    return lines, truth
