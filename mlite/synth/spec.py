"""What synthetic log to write (:class:`GenSpec`) and what a correct reader must find in it (:class:`Truth`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

FORMATS = ("verl", "verl_jsonl", "megatron")
"""Formats the generator writes: verl console, verl file-logger JSONL, Megatron-LM console."""

ENDINGS = ("ok", "oom", "nccl_timeout", "time_limit", "preempted", "cancelled", "traceback", "exit_code")
"""How a generated job ends."""


@dataclass(kw_only=True, slots=True)
class GenSpec:
    """What log to write."""

    format: str = "verl"
    """``verl`` (console), ``verl_jsonl`` or ``megatron``."""
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
    """Hard-wrap metric lines (verl) or iteration and validation records (Megatron) at this many characters."""
    nan_from: int | None = None
    """From this step on, loss and grad norm are NaN."""
    spikes: tuple[int, ...] = ()
    """Steps where loss and grad norm jump 10x."""
    drift_from: int | None = None
    """From this step on, loss, grad norm and KL drift slowly upward (x3 over 20 steps, see :mod:`.curves`)."""
    restart: tuple[int, int] | None = None
    """``(at, back_to)``: after step ``at`` the job restarts from step ``back_to`` (steps go back)."""
    ending: str = "ok"
    """One of :data:`ENDINGS`."""
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


def step_sequence(spec: GenSpec) -> list[int]:
    """The record steps in file order (a restart makes them go back once)."""
    steps = list(range(spec.first_step, spec.first_step + spec.steps))
    if spec.restart:
        at, back = spec.restart
        i = steps.index(at) + 1
        steps = steps[:i] + list(range(back, back + len(steps) - i))
    return steps


def ending_events(ending: str) -> set[str]:
    """Event kinds the ending ``ending`` must produce."""
    return {
        "ok": set(),
        "oom": {"oom", "traceback", "exit_code"},
        "nccl_timeout": {"nccl_timeout", "exit_code"},
        "time_limit": {"time_limit"},
        "preempted": {"preempted"},
        "cancelled": {"cancelled"},
        "traceback": {"traceback"},
        "exit_code": {"exit_code"},
    }[ending]
