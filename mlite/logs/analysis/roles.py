"""Semantic roles for plots and checks: which printed metric is *the* loss, grad norm, KL... of a run.

Each format names things differently (verl SFT ``train/loss``, verl PPO/GRPO ``actor/pg_loss``, Megatron
``lm_loss``); :func:`resolve_role` picks the first candidate of the run's format that the run actually has,
then falls back to the candidates of the other formats. The names per format are the ``roles`` of its registry
entry (:class:`..formats.registry.LogFormat`).
"""

from __future__ import annotations

from ..formats import registry

ROLES = ("loss", "grad_norm", "kl", "entropy", "reward", "lr", "throughput")
"""Roles of the standard panel, in display order."""

EXTRA_ROLES = ("val_loss",)
"""Roles drawn with another one (validation loss on the loss panel)."""

ROLE_LABELS = {
    "loss": "loss",
    "val_loss": "validation loss",
    "grad_norm": "grad norm",
    "kl": "KL",
    "entropy": "entropy",
    "reward": "reward",
    "lr": "learning rate",
    "throughput": "throughput",
}
"""Axis titles."""

SPIKE_ROLES = ("loss", "grad_norm")
"""Roles watched for spikes."""

KL_METRICS = ("actor/ppo_kl", "actor/kl_loss", "critic/kl")
"""Metrics checked for being identically zero."""

CLIPFRAC_METRIC = "actor/pg_clipfrac"
"""Zero together with a zero ``actor/ppo_kl``: a fully on-policy configuration."""


def candidates(role: str, fmt: str | None = None) -> tuple[str, ...]:
    """Metric names that can play ``role``: the format's own first, then every other format's."""
    seen: list[str] = []
    own = registry.get(fmt) if fmt else None
    order = ([own.roles] if own is not None else []) + [f.roles for f in registry.entries()]
    for table in order:
        for name in table.get(role, ()):
            if name not in seen:
                seen.append(name)
    return tuple(seen)


def resolve_role(role: str, metrics, fmt: str | None = None) -> str | None:
    """The metric of ``metrics`` (any container of names) that plays ``role`` for ``fmt``, or None."""
    have = set(metrics)
    for name in candidates(role, fmt):
        if name in have:
            return name
    return None


def all_role_candidates(role: str) -> frozenset[str]:
    """Every metric name that can play ``role`` in any format."""
    return frozenset(candidates(role))
