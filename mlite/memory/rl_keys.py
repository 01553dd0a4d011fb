"""The rollout knobs once: :class:`~mlite.memory.rl_options.RolloutOptions` field <-> verl Hydra key, both ways.

Used to read a verl config (the nested dict verl prints at start-up, or flat ``key=value`` overrides) into
``RolloutOptions`` and to write the overrides of a launcher. Keys are verl ``main``'s
(``verl/trainer/config/rollout/rollout.yaml``, ``ppo_trainer.yaml``); ``ALIASES`` lists older spellings that are
read but never written.
"""

from __future__ import annotations

from dataclasses import fields

from ..errors import MliteError
from .rl_options import RolloutOptions

_R = "actor_rollout_ref.rollout"

ROLLOUT_KEYS: tuple[tuple[str, str], ...] = (
    ("name", f"{_R}.name"),
    ("tensor_model_parallel_size", f"{_R}.tensor_model_parallel_size"),
    ("data_parallel_size", f"{_R}.data_parallel_size"),
    ("expert_parallel_size", f"{_R}.expert_parallel_size"),
    ("gpu_memory_utilization", f"{_R}.gpu_memory_utilization"),
    ("free_cache_engine", f"{_R}.free_cache_engine"),
    ("n", f"{_R}.n"),
    ("max_model_len", f"{_R}.max_model_len"),
    ("max_num_batched_tokens", f"{_R}.max_num_batched_tokens"),
    ("max_num_seqs", f"{_R}.max_num_seqs"),
    ("dtype", f"{_R}.dtype"),
    ("enforce_eager", f"{_R}.enforce_eager"),
    ("update_weights_bucket_megabytes", f"{_R}.checkpoint_engine.update_weights_bucket_megabytes"),
    ("prompt_length", "data.max_prompt_length"),
    ("response_length", "data.max_response_length"),
    ("train_batch_size", "data.train_batch_size"),
)
"""(RolloutOptions field, verl key) for every knob a launcher writes."""

ALIASES: dict[str, str] = {
    f"{_R}.update_weights_bucket_megabytes": "update_weights_bucket_megabytes",
}
"""Older verl keys read as the field they name."""

REF_OFFLOAD_KEYS = ("actor_rollout_ref.ref.megatron.param_offload", "actor_rollout_ref.ref.fsdp_config.param_offload")
"""Where verl's reference-model weight offload lives (Megatron and FSDP backends)."""

_FIELDS = {f.name: f for f in fields(RolloutOptions)}
_BY_KEY = {k: f for f, k in ROLLOUT_KEYS} | ALIASES


def _get(cfg: dict, dotted: str):
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def flatten(cfg: dict, prefix: str = "") -> dict:
    """A nested verl config as flat ``{dotted.key: value}``."""
    out = {}
    for k, v in cfg.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def _coerce(field: str, value, key: str):
    if value is None:
        return None
    t = _FIELDS[field].type
    try:
        if "bool" in t:
            if isinstance(value, str):
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                return value.lower() == "true"
            return bool(value)
        if "int" in t:
            return int(value)
        if "float" in t:
            return float(value)
    except (TypeError, ValueError):
        raise MliteError(f"verl key {key}={value!r}: not a valid {t} for {field}") from None
    return str(value)


def rollout_kwargs(cfg: dict, *, problems: list | None = None) -> dict:
    """RolloutOptions keyword arguments from a verl config: nested (verl's printed config) or flat overrides.
    Keys absent or null keep the field's default; the reference is ``colocated`` when verl builds one (a KL loss
    or a KL reward: ``need_reference_policy`` in ``verl/trainer/ppo/utils.py``, both keys False by default, so a
    config that sets neither has no reference), and its offload comes from the backend's ``param_offload``. A value that is not of the field's
    type raises :class:`MliteError`, or, when ``problems`` is a list, is left out and its message appended there
    (a launcher's unresolved ``$VAR``)."""
    flat = cfg if any("." in k for k in cfg) else flatten(cfg)
    out = {}
    for key, field in _BY_KEY.items():
        try:
            v = _coerce(field, flat.get(key), key)
        except MliteError as e:
            if problems is None:
                raise
            problems.append(e.message)
            continue
        if v is not None:
            out[field] = v
    kl = (flat.get("actor_rollout_ref.actor.use_kl_loss"), flat.get("algorithm.use_kl_in_reward"))
    out["ref"] = "colocated" if any(str(v).lower() == "true" for v in kl) else "none"
    for key in REF_OFFLOAD_KEYS:
        if flat.get(key) is not None:
            out["ref_param_offload"] = str(flat[key]).lower() == "true"
    return out


def rollout_overrides(r: RolloutOptions, *, defaults: RolloutOptions | None = None) -> dict:
    """verl overrides ``{key: value}`` for the knobs of ``r`` (only those that differ from ``defaults`` when given;
    ``max_model_len`` None is not written: verl then takes the model's own limit)."""
    out = {}
    for field, key in ROLLOUT_KEYS:
        v = getattr(r, field)
        if v is None or (defaults is not None and getattr(defaults, field) == v):
            continue
        out[key] = v
    return out
