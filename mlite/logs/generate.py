"""A generator of realistic, noisy training logs with known contents, for tests, samples and benchmarks.

``generate(GenSpec(...), path)`` writes one log (verl console, verl JSONL, Megatron-LM console, or the kit's
own run directory) and returns its :class:`Truth`: every record as the parser must read it back (values are
``float(printed text)``, so exact) and the event kinds the log must produce. Logs look like multi-node Slurm
jobs: Ray prefixes with ANSI colours, worker vLLM chatter, rollout dumps, ``[repeated Nx across cluster]``,
tqdm bars (optionally glued to the metric line), hard-wrapped metric lines, NaN, spikes, restarts, and an
ending (clean, CUDA OOM, NCCL watchdog, Slurm time limit / preemption / cancel, traceback, exit code).
"""

from __future__ import annotations

import gzip
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from . import gen_text as T
from .detect import MLITE_HEADER

@dataclass(kw_only=True, slots=True)
class GenSpec:
    """What log to write."""

    format: str = "verl"
    """``verl`` (console), ``verl_jsonl``, ``megatron`` or ``mlite`` (a run directory)."""
    kind: str = "grpo"
    """verl trainer: ``grpo``, ``ppo`` (adds a critic) or ``sft``."""
    steps: int = 40
    """Metric records to write (Megatron: log intervals)."""
    first_step: int = 1
    """Step of the first record (a resumed run starts later)."""
    seed: int = 0
    """Everything is a function of the spec and this seed."""
    nodes: int = 2
    """Nodes of the simulated job."""
    gpus_per_node: int = 8
    """GPUs per node."""
    precision: str = "repr"
    """verl console values: ``repr`` (pprint, since 2025-07), ``3f`` (older) or ``np`` (numpy >= 2 reprs)."""
    ansi: bool = True
    """Colour Ray prefixes."""
    noise: float = 1.0
    """Scale of the chatter between metric lines (0: metric lines only)."""
    glued_tqdm: bool = False
    """Write the tqdm bar on the metric line's line, without a newline between them."""
    wrap: int | None = None
    """Hard-wrap metric lines at this many characters (a terminal's width)."""
    nan_from: int | None = None
    """From this step on, loss and grad norm are NaN."""
    spikes: tuple[int, ...] = ()
    """Steps where loss and grad norm jump 10x."""
    restart: tuple[int, int] | None = None
    """``(at, back_to)``: after step ``at`` the job restarts from step ``back_to`` (steps go back)."""
    ending: str = "ok"
    """``ok``, ``oom``, ``nccl_timeout``, ``time_limit``, ``preempted``, ``cancelled``, ``traceback``, ``exit_code``."""
    prefix: str = "torchrun"
    """Megatron launcher prefix: ``""``, ``torchrun`` (``[default7]:``), ``srun`` (``7: ``), ``hostrank``."""
    skipped: tuple[int, ...] = ()
    """Megatron fp16 intervals with every iteration skipped (no ``lm loss`` / ``grad norm``)."""
    val_every: int = 0
    """Validation every this many records (0: never)."""
    null_nan: bool = True
    """JSONL: write NaN as ``null`` (newer verl) instead of bare ``NaN``."""
    gzip: bool = False
    """Compress the file."""
    crlf: bool = False
    """Windows line endings."""


@dataclass(kw_only=True, slots=True)
class Truth:
    """What a correct reader must find in a generated log."""

    records: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    """``(step, {metric: value})`` in file order (values exactly as printed)."""
    events: set[str] = field(default_factory=set)
    """Event kinds the log must produce."""
    path: Path | None = None
    """Where it was written."""


def _curves(rng: random.Random, step: int, spec: GenSpec) -> dict[str, float]:
    t = step / max(spec.steps + spec.first_step, 10)
    loss = 0.3 + 1.2 * math.exp(-4 * t) + rng.gauss(0, 0.02)
    gn = math.exp(rng.gauss(math.log(1.5 - 0.8 * t), 0.12))
    if step in spec.spikes:
        loss, gn = loss * 10, gn * 10
    if spec.nan_from is not None and step >= spec.nan_from:
        loss, gn = math.nan, math.nan
    reward = 1 / (1 + math.exp(-6 * (t - 0.4))) + rng.gauss(0, 0.03)
    return {"loss": loss, "grad_norm": gn, "reward": reward, "kl": abs(rng.gauss(0.002 * t, 0.0005)),
            "entropy": 0.6 - 0.3 * t + rng.gauss(0, 0.01), "lr": 1e-6 if spec.kind != "sft" else 1e-5 * min(1, 20 * t)}


def _verl_values(rng: random.Random, step: int, spec: GenSpec) -> dict[str, float]:
    c = _curves(rng, step, spec)
    if spec.kind == "sft":
        return {"train/loss": c["loss"], "train/grad_norm": c["grad_norm"], "train/lr": c["lr"],
                "train/mfu": rng.uniform(0.3, 0.45), "train/global_tokens": float(rng.randint(60000, 70000)),
                "train/total_tokens(B)": step * 6.5e-5, "perf/max_memory_allocated_gb": 38.16 + rng.random(),
                "perf/max_memory_reserved_gb": 59.59, "perf/cpu_memory_used_gb": rng.uniform(60, 70)}
    keys = T.GRPO_KEYS + (T.PPO_EXTRA_KEYS if spec.kind == "ppo" else ())
    out = {}
    for k in keys:
        if k in T.INT_KEYS:
            out[k] = float(step if k == "training/global_step" else rng.randint(50, 4000))
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
            out[k] = c["reward"]
        elif k.endswith("/lr"):
            out[k] = c["lr"]
        else:
            out[k] = rng.uniform(0, 10)
    return out


def _fmt(k: str, v: float, precision: str) -> str:
    if precision == "3f":
        return f"{v:.3f}"
    if k in T.INT_KEYS and v == v and v.is_integer():
        s = str(int(v))
        return f"np.int64({s})" if precision == "np" and k.startswith("training/") else s
    return f"np.float64({v!r})" if precision == "np" and k in T.NP_KEYS else repr(v)


def _metric_line(step: int, values: dict[str, float], precision: str) -> tuple[str, dict[str, float]]:
    parts, exact = [], {}
    for k, v in values.items():
        tok = _fmt(k, v, precision)
        parts.append(f"{k}:{tok}")
        inner = tok[tok.index("(") + 1:-1] if tok.startswith("np.") else tok
        exact[k] = float(inner)
    return f"step:{step} - " + " - ".join(parts), exact


def _step_sequence(spec: GenSpec) -> list[int]:
    steps = list(range(spec.first_step, spec.first_step + spec.steps))
    if spec.restart:
        at, back = spec.restart
        i = steps.index(at) + 1
        steps = steps[:i] + list(range(back, back + len(steps) - i))
    return steps


def _wrap(line: str, width: int | None) -> list[str]:
    if not width or len(line) <= width:
        return [line]
    return [line[i:i + width] for i in range(0, len(line), width)]


def _verl_console(spec: GenSpec, rng: random.Random) -> tuple[list[str], Truth]:
    truth = Truth()
    drv = T.ray("TaskRunner", 14640, ansi=spec.ansi) if spec.kind != "sft" else ""
    steps = _step_sequence(spec)
    total = spec.first_step + spec.steps + 20
    lines = T.startup(rng, driver=drv, nodes=spec.nodes, gpus=spec.gpus_per_node, ansi=spec.ansi,
                      total_steps=total) if spec.noise else []
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
        values = _verl_values(rng, step, spec)
        text, exact = _metric_line(step, values, spec.precision)
        bar = T.tqdm_bar("Training Progress" if spec.kind != "sft" else "Epoch 1/3", step, total, 9.8)
        line = (f"{drv}{bar}{text}" if spec.glued_tqdm else f"{drv}{text}")
        lines += _wrap(line, spec.wrap)
        if not spec.glued_tqdm and spec.noise:
            lines += [drv.rstrip() if drv else "", bar]
        truth.records.append((step, exact))
        if spec.val_every and (n + 1) % spec.val_every == 0:
            key = "val/loss" if spec.kind == "sft" else "val-core/openai/gsm8k/reward/mean@1"
            vtext, vexact = _metric_line(step, {key: exact.get("train/loss", 0.5) + 0.03}, spec.precision)
            lines.append(f"{drv}{vtext}")
            truth.records.append((step, vexact))
    if any(v != v for _, r in truth.records for v in r.values()):
        truth.events.add("nan")
    if spec.spikes:
        truth.events.add("spike")
    lines += T.verl_ending(spec.ending, rng, driver=drv, nodes=spec.nodes, ansi=spec.ansi)
    truth.events |= _ending_events(spec.ending)
    return lines, truth


def _ending_events(ending: str) -> set[str]:
    return {"ok": set(), "oom": {"oom", "traceback", "exit_code"}, "nccl_timeout": {"nccl_timeout", "exit_code"},
            "time_limit": {"time_limit"}, "preempted": {"preempted"}, "cancelled": {"cancelled"},
            "traceback": {"traceback"}, "exit_code": {"exit_code"}}[ending]


def _verl_jsonl(spec: GenSpec, rng: random.Random) -> tuple[list[str], Truth]:
    truth = Truth()
    lines = []
    for step in _step_sequence(spec):
        values = _verl_values(rng, step, spec)
        data = {k: (None if (v != v and spec.null_nan) else v) for k, v in values.items()}
        lines.append(json.dumps({"step": step, "data": data}))  # bare NaN when not null_nan (old verl)
        truth.records.append((step, values))
    if any(v != v for _, r in truth.records for v in r.values()):
        truth.events.add("nan")
    if spec.restart:
        truth.events.add("restart")
    if spec.spikes:
        truth.events.add("spike")
    return lines, truth


def _mlite_run(spec: GenSpec, rng: random.Random, out: Path) -> Truth:
    truth = Truth()
    out.mkdir(parents=True, exist_ok=True)
    log = [MLITE_HEADER, "[mlite] status: running", "[mlite] command: torchrun --nproc-per-node 2 -m mlite.runtime.worker"]
    jsonl = []
    for step in _step_sequence(spec):
        c = _curves(rng, step, spec)
        values = dict(zip(T.MLITE_KEYS, (2.0 * c["loss"], c["grad_norm"], 1e-3 * min(1, step / 5), 0.0,
                                         1.5 + rng.random() * 0.1)))
        text, exact = _metric_line(step, values, "repr")
        log.append(text)
        jsonl.append(json.dumps({"step": step, "data": {k: (None if v != v else v) for k, v in exact.items()}}))
        truth.records.append((step, exact))
    if spec.ending == "ok":
        log.append("[mlite] status: completed")
    else:
        log += ["Traceback (most recent call last):", '  File "/work/mlite/runtime/worker.py", line 88, in main',
                "    loss.backward()", "RuntimeError: worker 1 crashed (deliberately, for the failure sample)",
                "[mlite] status: failed (worker 1 exited with code 1)"]
        truth.events |= {"traceback", "exit_code"}
    if any(v != v for _, r in truth.records for v in r.values()):
        truth.events.add("nan")
    if spec.spikes:
        truth.events.add("spike")
    if spec.restart:
        truth.events.add("restart")
    (out / "train.log").write_text("\n".join(log) + "\n", encoding="utf-8")
    (out / "metrics.jsonl").write_text("\n".join(jsonl) + "\n", encoding="utf-8")
    truth.path = out
    return truth


def generate(spec: GenSpec, path) -> Truth:
    """Write the log ``spec`` describes to ``path`` (a directory for ``mlite``) and return its :class:`Truth`."""
    rng = random.Random(spec.seed)
    path = Path(path)
    if spec.format == "mlite":
        return _mlite_run(spec, rng, path)
    from .gen_megatron import megatron_log

    make = {"verl": _verl_console, "verl_jsonl": _verl_jsonl, "megatron": megatron_log}.get(spec.format)
    if make is None:
        raise ValueError(f"unknown format {spec.format!r}")
    lines, truth = make(spec, rng)
    nl = "\r\n" if spec.crlf else "\n"
    data = (nl.join(lines) + nl).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    if spec.gzip:
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    truth.path = path
    return truth


def write_bench_log(path, size_mb: float, *, seed: int = 0, noise: float = 4.0) -> dict:
    """Write at least ``size_mb`` MB of noisy multi-node verl GRPO console output (3-decimal, repr and numpy
    values mixed by segment) in chunks; returns ``{"bytes", "metric_lines", "metric_bytes"}``."""
    path = Path(path)
    target = int(size_mb * 1e6)
    written = metric_lines = metric_bytes = 0
    seg = 0
    with open(path, "wb") as f:
        while written < target:
            spec = GenSpec(steps=200, first_step=1 + 200 * seg, seed=seed + seg, noise=noise,
                           precision=("repr", "np", "3f")[seg % 3], glued_tqdm=seg % 5 == 4)
            lines, truth = _verl_console(spec, random.Random(spec.seed))
            data = ("\n".join(lines) + "\n").encode("utf-8")
            f.write(data)
            written += len(data)
            metric_lines += len(truth.records)
            metric_bytes += sum(len(ln) for ln in lines if "step:" in ln and " - " in ln)
            seg += 1
    return {"bytes": written, "metric_lines": metric_lines, "metric_bytes": metric_bytes}
