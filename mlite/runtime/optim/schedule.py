"""Learning-rate schedule: Megatron-Core's ``OptimizerParamScheduler`` rule (linear warmup, then constant / linear /
cosine decay to ``min_lr``).

``lr(n)`` for the scheduler's step count ``n`` (0 before the first ``step()``)::

    n <= warmup (warmup > 0):  lr_warmup_init + (lr - lr_warmup_init) * n / warmup
    constant:                  lr
    n > decay_steps:           min_lr
    else:                      min_lr + coeff * (lr - min_lr), ratio = (n - warmup) / (decay_steps - warmup),
                               coeff = 1 - ratio (linear) or 0.5 * (cos(pi * ratio) + 1) (cosine)

As in Megatron, the optimizer step ``k`` (1-based) runs with ``lr(k - 1)`` when ``lr_scheduler_step`` is called once
after each successful step, so with warmup the very first update uses ``lr_warmup_init`` (0 by default).
"""

from __future__ import annotations

import math

from ..config import OptimizerConfig


class LRScheduler:
    """Holds the step count; ``lr`` is the rate the next optimizer step uses."""

    def __init__(self, cfg: OptimizerConfig):
        self.cfg = cfg
        self.num_steps = 0

    def lr_at(self, n: int) -> float:
        c = self.cfg
        if c.lr_warmup_steps > 0 and n <= c.lr_warmup_steps:
            return c.lr_warmup_init + (c.lr - c.lr_warmup_init) * float(n) / float(c.lr_warmup_steps)
        if c.lr_decay_style == "constant":
            return c.lr
        decay_steps = c.lr_decay_steps
        assert decay_steps is not None  # OptimizerConfig requires it for a decaying style
        if n > decay_steps:
            return c.min_lr
        ratio = float(n - c.lr_warmup_steps) / float(decay_steps - c.lr_warmup_steps)
        coeff = 1.0 - ratio if c.lr_decay_style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
        return c.min_lr + coeff * (c.lr - c.min_lr)

    @property
    def lr(self) -> float:
        return self.lr_at(self.num_steps)

    def step(self, increment: int = 1) -> float:
        """Advance by ``increment`` steps; return the new learning rate."""
        self.num_steps += int(increment)
        return self.lr

    def state_dict(self) -> dict:
        return {"num_steps": self.num_steps}

    def load_state_dict(self, sd: dict) -> None:
        self.num_steps = int(sd["num_steps"])
