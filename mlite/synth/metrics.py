"""Plausible values of the verl GRPO / PPO metrics that are not training curves (:mod:`.curves`): each metric drawn in
the range a real run prints it (fractions in [0, 1], lengths in tokens, seconds per phase, the epoch counted from
the step), never one shared ``uniform(0, 10)``.

The ranges follow a verl GSM8K GRPO run as its console prints it (verl ``verl/trainer/ppo/metric_utils.py``
``compute_data_metrics`` / ``compute_timing_metrics`` / ``compute_throughout_metrics`` name the metrics; the
reward of GSM8K is 0 or 1, ``actor/kl_coef`` is the configured ``kl_loss_coef``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

STEPS_PER_EPOCH = 29
"""Training steps of one epoch (GSM8K's 7,473 prompts in batches of 256), what ``Size of train dataloader`` says."""

KL_COEF = 0.001
"""``actor/kl_coef``: the configured ``kl_loss_coef`` (fixed for the run)."""

MAX_RESPONSE_LENGTH = 1024
"""``data.max_response_length``: the longest response (``response_length/max`` never exceeds it)."""

MAX_PROMPT_LENGTH = 512
"""``data.max_prompt_length``."""

TOKENS_PER_STEP = 256 * 8 * 600
"""About the tokens of one step (batch 256 x 8 rollouts x ~600 tokens), for ``perf/total_num_tokens``."""

Draw = Callable[[random.Random, int, dict[str, float]], float]
"""``(rng, step, curves) -> value``; ``curves`` holds :func:`.curves.curves`' values and the values drawn so far."""


def _frac(lo: float, hi: float) -> Draw:
    return lambda rng, _s, _c: rng.uniform(lo, hi)


def _around(mean: float, sd: float, lo: float = 0.0) -> Draw:
    return lambda rng, _s, _c: max(lo, rng.gauss(mean, sd))


def _tokens(lo: int, hi: int) -> Draw:
    return lambda rng, _s, _c: float(rng.randint(lo, hi))


def _step_seconds(_rng: random.Random, _step: int, c: dict[str, float]) -> float:
    """The sum of the phases drawn before it (``timing_s/gen`` ... ``timing_s/update_actor``)."""
    return sum(v for k, v in c.items() if k.startswith("timing_s/"))


def _throughput(_rng: random.Random, _step: int, c: dict[str, float]) -> float:
    seconds = c.get("timing_s/step") or 60.0
    return c.get("perf/total_num_tokens", TOKENS_PER_STEP) / seconds / 16


METRICS: dict[str, Draw] = {
    "actor/pg_clipfrac": _frac(0.0005, 0.008),
    "actor/pg_clipfrac_lower": _frac(0.0, 0.0005),
    "actor/kl_coef": lambda _rng, _s, _c: KL_COEF,
    "perf/mfu/actor": _frac(0.18, 0.32),
    "perf/max_memory_allocated_gb": _around(52.0, 1.5, 1.0),
    "perf/max_memory_reserved_gb": _around(68.0, 1.0, 1.0),
    "perf/cpu_memory_used_gb": _around(96.0, 3.0, 1.0),
    "training/epoch": lambda _rng, step, _c: float(max(0, step - 1) // STEPS_PER_EPOCH),
    "critic/score/max": lambda _rng, _s, _c: 1.0,
    "critic/score/min": lambda _rng, _s, _c: 0.0,
    "critic/rewards/max": lambda _rng, _s, _c: 1.0,
    "critic/rewards/min": lambda _rng, _s, _c: 0.0,
    "critic/advantages/mean": _around(0.0, 0.004, -1.0),
    "critic/advantages/max": _around(2.2, 0.15),
    "critic/advantages/min": lambda rng, _s, _c: -max(0.0, rng.gauss(2.2, 0.15)),
    "critic/returns/mean": _around(0.0, 0.004, -1.0),
    "critic/returns/max": _around(2.2, 0.15),
    "critic/returns/min": lambda rng, _s, _c: -max(0.0, rng.gauss(2.2, 0.15)),
    "response_length/mean": _around(420.0, 25.0, 1.0),
    "response_length/max": _tokens(MAX_RESPONSE_LENGTH - 200, MAX_RESPONSE_LENGTH),
    "response_length/min": _tokens(20, 90),
    "response_length/clip_ratio": _frac(0.0, 0.02),
    "prompt_length/mean": _around(150.0, 4.0, 1.0),
    "prompt_length/max": _tokens(300, MAX_PROMPT_LENGTH),
    "prompt_length/min": _tokens(40, 70),
    "prompt_length/clip_ratio": lambda _rng, _s, _c: 0.0,
    "timing_s/gen": _around(38.0, 3.0, 1.0),
    "timing_s/reward": _around(0.9, 0.1, 0.1),
    "timing_s/old_log_prob": _around(7.5, 0.4, 0.5),
    "timing_s/ref": _around(7.0, 0.4, 0.5),
    "timing_s/adv": _around(0.12, 0.02, 0.01),
    "timing_s/update_actor": _around(27.0, 1.5, 1.0),
    "timing_s/step": _step_seconds,
    "timing_per_token_ms/gen": _around(0.03, 0.003, 0.001),
    "timing_per_token_ms/update_actor": _around(0.035, 0.003, 0.001),
    "perf/total_num_tokens": lambda rng, _s, _c: float(round(TOKENS_PER_STEP * rng.uniform(0.9, 1.1))),
    "perf/time_per_step": lambda _rng, _s, c: c.get("timing_s/step", 60.0),
    "perf/throughput": _throughput,
    "critic/vf_clipfrac": _frac(0.0, 0.05),
    "critic/vpred_mean": _around(0.5, 0.05, -1.0),
    "critic/values/mean": _around(0.5, 0.05, -1.0),
    "critic/values/max": _around(1.4, 0.1),
    "critic/values/min": _around(-0.4, 0.1, -5.0),
    "critic/vf_explained_var": lambda rng, step, _c: math.tanh(step / 30) * 0.8 + rng.gauss(0, 0.02),
}
"""Metric -> how its value is drawn (metrics drawn from the curves are :mod:`.verl`'s)."""


def plausible(key: str, rng: random.Random, step: int, drawn: dict[str, float]) -> float:
    """The value of ``key`` at ``step``; ``drawn`` holds the values of the step drawn before it."""
    draw = METRICS.get(key)
    if draw is None:
        raise KeyError(f"no plausible range for the synthetic metric {key!r}: add it to mlite.synth.metrics.METRICS")
    return draw(rng, step, drawn)
