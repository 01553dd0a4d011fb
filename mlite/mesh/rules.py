"""Validation of a mesh against a model: each rule explains itself (rule, numbers, nearest valid values).

Rules (Megatron-Core / mlite):
  world        GPU count divisible by TP*CP*PP (dense) and by ETP*EP*PP (experts)
  heads        attention heads divisible by TP; KV heads (query groups) divisible by TP
  gdn_heads    Gated DeltaNet key and value heads divisible by TP
  experts      routed experts divisible by EP; EP/ETP > 1 only for MoE models
  ffn          dense FFN (and shared-expert FFN) divisible by TP; expert FFN divisible by ETP
  layers       layers split into PP*VPP stages, evenly or by pp_layout
  vpp          VPP > 1 needs PP > 1
  seq_len      sequence length divisible by 2*CP (load-balanced causal context parallelism)
  deepseek_v4  DeepSeek-V4 runs with TP = ETP = 1 in mlite
Warnings: TP or EP groups that span nodes; verl's launcher rule (DP = ngpu/PP/(TP*EP)) disagreeing with the
runtime's (DP = ngpu/(TP*CP*PP)); MoE with TP > 1 needs sequence parallelism; Gated DeltaNet with CP > 1 needs
flash-linear-attention >= 0.5. Info: vocabulary padding to a multiple of 128*TP.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule's verdict on a mesh."""

    rule: str
    """Rule id (see the module docstring)."""
    level: str
    """``error``, ``warning`` or ``info``."""
    message: str
    """One line: the rule, the numbers, and what would fix it."""
    field: str | None = None
    """The ParallelConfig field (or ``ngpu``, ``seq_len``) to change."""
    nearest: tuple[int, ...] = ()
    """Nearest values of ``field`` that satisfy this rule."""


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n``, ascending."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def nearest(value: int, ok) -> tuple[int, ...]:
    """The closest valid value below and above ``value`` (searching up to 4x), for messages."""
    below = next((v for v in range(value - 1, 0, -1) if ok(v)), None)
    above = next((v for v in range(value + 1, 4 * value + 64) if ok(v)), None)
    return tuple(v for v in (below, above) if v is not None)


def fmt_nearest(field: str, values: tuple[int, ...]) -> str:
    if not values:
        return ""
    return f"; nearest valid {field}: " + " or ".join(str(v) for v in values)


def pad_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron pads the vocabulary to a multiple of ``divisible_by * tp``."""
    m = divisible_by * tp
    return -(-vocab // m) * m
