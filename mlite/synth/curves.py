"""The noisy training curves behind every synthetic log: a falling loss, a log-normal grad norm, a rising
reward, a small stationary KL, a falling entropy, with the spikes, the slow drift and the NaN stretch the spec
asks for."""

from __future__ import annotations

import math
import random

from .spec import GenSpec

DRIFT_FACTOR = 3.0
"""A drift (``GenSpec.drift_from``) multiplies loss, grad norm and KL by up to this factor..."""
DRIFT_STEPS = 20
"""...reached this many steps after it starts (linearly), then held."""


def curves(rng: random.Random, step: int, spec: GenSpec) -> dict[str, float]:
    """``loss, grad_norm, reward, kl, entropy, lr`` at ``step`` (draws from ``rng``)."""
    t = step / max(spec.steps + spec.first_step, 10)
    loss = 0.3 + 1.2 * math.exp(-4 * t) + rng.gauss(0, 0.02)
    gn = math.exp(rng.gauss(math.log(1.5 - 0.8 * t), 0.12))
    kl = abs(rng.gauss(0.001, 0.0002))
    if spec.drift_from is not None and step >= spec.drift_from:
        f = 1 + (DRIFT_FACTOR - 1) * min(1.0, (step - spec.drift_from) / DRIFT_STEPS)
        loss, gn, kl = loss * f, gn * f, kl * f
    if step in spec.spikes:
        loss, gn = loss * 10, gn * 10
    if spec.nan_from is not None and step >= spec.nan_from:
        loss, gn = math.nan, math.nan
    reward = 1 / (1 + math.exp(-6 * (t - 0.4))) + rng.gauss(0, 0.03)
    return {
        "loss": loss,
        "grad_norm": gn,
        "reward": reward,
        "kl": kl,
        "entropy": 0.6 - 0.3 * t + rng.gauss(0, 0.01),
        "lr": 1e-6 if spec.kind != "sft" else 1e-5 * min(1, 20 * t),
    }
