"""Semantic roles for plots and checks: which printed metric is *the* loss, grad norm, KL... of a run.

Each format names things differently (verl SFT ``train/loss``, verl PPO/GRPO ``actor/pg_loss``, Megatron
``lm_loss``); :func:`resolve_role` picks the first candidate of the run's format that the run actually has,
then falls back to the candidates of the other formats.
"""

from __future__ import annotations

ROLES = ("loss", "grad_norm", "kl", "entropy", "reward", "lr", "throughput")
"""Roles of the standard panel, in display order."""

EXTRA_ROLES = ("val_loss",)
"""Roles drawn with another one (validation loss on the loss panel)."""

_VERL = {
    "loss": ("train/loss", "actor/pg_loss", "critic/vf_loss"),
    "val_loss": ("val/loss",),
    "grad_norm": ("train/grad_norm", "actor/grad_norm", "critic/grad_norm"),
    "kl": ("actor/ppo_kl", "actor/kl_loss", "critic/kl"),
    "entropy": ("actor/entropy", "actor/entropy_loss"),
    "reward": ("critic/score/mean", "critic/rewards/mean"),
    "lr": ("train/lr", "actor/lr", "train/lr(1e-3)", "critic/lr"),
    "throughput": ("perf/throughput", "train/global_tokens", "perf/total_num_tokens"),
}
_MEGATRON = {
    "loss": ("lm_loss", "lm loss", "lm-loss-training/lm loss"),
    "val_loss": ("val/lm_loss", "lm loss validation", "lm-loss-validation/lm loss validation"),
    "grad_norm": ("grad_norm", "grad-norm", "grad-norm/grad-norm"),
    "lr": ("learning_rate", "learning-rate", "learning-rate/learning-rate"),
    "throughput": ("throughput_per_gpu", "throughput"),
}
"""Console names (lower_snake) first, then the TensorBoard tags Megatron writes (``lm loss``, ``grad-norm``...)."""

_PIPE = {
    "loss": ("loss", "train_loss", "lm_loss"),
    "val_loss": ("val_loss",),
    "grad_norm": ("grad_norm", "gradnorm"),
    "lr": ("lr", "learning_rate"),
    "throughput": ("tflops", "tokens_per_second", "tokens_s"),
}

ROLE_CANDIDATES: dict[str, dict[str, tuple[str, ...]]] = {
    "verl": _VERL,
    "verl_jsonl": _VERL,
    "mlite": _VERL,
    "megatron": _MEGATRON,
    "pipe": _PIPE,
    "tensorboard": {r: _VERL.get(r, ()) + _MEGATRON.get(r, ()) for r in set(_VERL) | set(_MEGATRON)},
}
"""Format -> role -> metric names in order of preference."""

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
    order = [ROLE_CANDIDATES.get(fmt or "", {})] + list(ROLE_CANDIDATES.values())
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
