"""The rollout options <-> verl Hydra keys, both ways, from the rows of :data:`mlite.options.rollout.ROLLOUT`
(each row's :class:`~mlite.options.schema.Key` names its key and older aliases; the reference's two
:class:`~mlite.options.schema.Codec` rows are read here).

Used to read a verl config (the nested dict verl prints at start-up, or flat ``key=value`` overrides) into
:class:`~mlite.memory.rl_options.RolloutOptions` and to write the overrides of a launcher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import MliteError
from ..options.rollout import REF_KL_KEYS, REF_OFFLOAD_KEYS, ROLLOUT
from ..options.schema import Key

if TYPE_CHECKING:
    from .rl_options import RolloutOptions

_KEYED: tuple[tuple[str, Key], ...] = tuple((r.field, r.mlite) for r in ROLLOUT if isinstance(r.mlite, Key))

ROLLOUT_KEYS: tuple[tuple[str, str], ...] = tuple((f, m.key) for f, m in _KEYED)
"""(RolloutOptions field, verl key) for every knob a launcher writes, from the rows."""

ALIASES: dict[str, str] = {a: f for f, m in _KEYED for a in m.aliases}
"""Older verl keys read as the field they name, from the rows."""

_TYPES = {r.field: r.type for r in ROLLOUT}
_BY_KEY = {k: f for f, k in ROLLOUT_KEYS} | ALIASES


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
    t = _TYPES[field]
    try:
        if t is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                return value.lower() == "true"
            return bool(value)
        if t is int:
            return int(value)
        if t is float:
            return float(value)
    except (TypeError, ValueError):
        raise MliteError(f"verl key {key}={value!r}: not a valid {t.__name__} for {field}") from None
    return str(value)


def rollout_kwargs(cfg: dict, *, problems: list | None = None) -> dict:
    """RolloutOptions keyword arguments from a verl config: nested (verl's printed config) or flat overrides.
    Keys absent or null keep the field's default; the reference is ``colocated`` when verl builds one (a KL loss
    or a KL reward: ``need_reference_policy`` in ``verl/trainer/ppo/utils.py``, both keys False by default, so a
    config that sets neither has no reference), and its offload comes from the backend's ``param_offload`` (the
    keys of the ``ref`` and ``ref_param_offload`` rows). A value that is not of the field's type raises
    :class:`MliteError`, or, when ``problems`` is a list, is left out and its message appended there (a launcher's
    unresolved ``$VAR``)."""
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
    kl = [flat.get(k) for k in REF_KL_KEYS]
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


__all__ = ["ALIASES", "REF_OFFLOAD_KEYS", "ROLLOUT_KEYS", "flatten", "rollout_kwargs", "rollout_overrides"]


# ------------------------------------------------------------------ verl's FSDP actor (mlite/options/rl_fsdp.py)
def _fsdp_rows():
    from ..options.rl_fsdp import FSDP_ROWS

    return FSDP_ROWS


def rows_kwargs(rows, cfg: dict, *, problems: list | None = None) -> dict:
    """Keyword arguments of the dataclass ``rows`` describe (one :class:`~mlite.options.schema.Option` per field,
    its :class:`~mlite.options.schema.Key` naming the verl key and older aliases) from a verl config, nested or flat:
    one per row whose key (else an alias) is set and not null. A value not of the row's type raises
    :class:`MliteError`, or with ``problems`` a list is left out and its message appended there."""
    flat = cfg if any("." in k for k in cfg) else flatten(cfg)
    out: dict = {}
    for row in rows:
        key = next((k for k in (row.mlite.key, *row.mlite.aliases) if flat.get(k) is not None), row.mlite.key)
        v = flat.get(key)
        if v is None or (isinstance(v, str) and v.lower() in ("null", "none", "~")):
            continue
        try:
            out[row.field] = _coerce_as(row.type, row.field, v, key)
        except MliteError as e:
            if problems is None:
                raise
            problems.append(e.message)
    return out


def rows_overrides(rows, obj, *, defaults=None) -> dict:
    """verl overrides ``{key: value}`` of ``obj``'s fields for ``rows`` (only those that differ from ``defaults``
    when given; unset ``None`` fields are not written): the writing direction of :func:`rows_kwargs`."""
    out = {}
    for row in rows:
        v = getattr(obj, row.field)
        if v is None or (defaults is not None and getattr(defaults, row.field) == v):
            continue
        out[row.mlite.key] = v
    return out


def fsdp_kwargs(cfg: dict, *, default_strategy: str = "megatron", problems: list | None = None) -> dict:
    """:class:`~mlite.memory.rl_fsdp.FsdpOptions` keyword arguments from a verl config (nested or flat), one per
    row of :data:`mlite.options.rl_fsdp.FSDP_ROWS` whose key is set; ``strategy`` is ``default_strategy`` when the
    config does not name one (``fsdp`` for verl's ``ppo_trainer`` config, whose ``actor.strategy`` default is
    ``fsdp``: ``verl/trainer/config/_generated_ppo_trainer.yaml`` @ 1dda039b). A value not of the row's type
    raises :class:`MliteError`, or with ``problems`` a list is left out and its message appended there."""
    return {"strategy": default_strategy, **rows_kwargs(_fsdp_rows(), cfg, problems=problems)}


def _coerce_as(t: type, field: str, value, key: str):
    try:
        if t is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                return value.lower() == "true"
            return bool(value)
        if t is int:
            if isinstance(value, str) and not value.lstrip("-").isdigit():
                raise ValueError(value)
            return int(value)
        if t is float:
            return float(value)
    except (TypeError, ValueError):
        raise MliteError(f"verl key {key}={value!r}: not a valid {t.__name__} for {field}") from None
    return str(value)


def fsdp_overrides(f, *, defaults=None) -> dict:
    """verl overrides ``{key: value}`` for the FSDP options ``f`` (only those that differ from ``defaults`` when
    given; unset ``None`` fields are not written)."""
    return rows_overrides(_fsdp_rows(), f, defaults=defaults)


__all__ += ["fsdp_kwargs", "fsdp_overrides", "rows_kwargs", "rows_overrides"]


# ------------------------------------------------------ the log-prob forwards of both strategies, and PPO's critic
def _log_prob_rows():
    from ..options.rl_fsdp import FSDP_ROWS, LOG_PROB_FIELDS

    return tuple(r for r in FSDP_ROWS if r.field in LOG_PROB_FIELDS)


def log_prob_kwargs(cfg: dict, *, problems: list | None = None) -> dict:
    """The :class:`~mlite.memory.rl_fsdp.FsdpOptions` fields that size the old_log_prob / ref forwards of any
    strategy (:data:`mlite.options.rl_fsdp.LOG_PROB_FIELDS`, read by :func:`mlite.memory.rl_fsdp.log_prob_sizing`)
    from a verl config, nested or flat; ``strategy`` megatron (a Megatron actor: the FSDP rows do not apply)."""
    return {"strategy": "megatron", **rows_kwargs(_log_prob_rows(), cfg, problems=problems)}


def log_prob_overrides(f, *, defaults=None) -> dict:
    """verl overrides of the log-prob fields of ``f`` (:func:`log_prob_kwargs` written back)."""
    return rows_overrides(_log_prob_rows(), f, defaults=defaults)


def _critic_rows():
    from ..options.rl_critic import CRITIC_ROWS

    return CRITIC_ROWS


def critic_kwargs(cfg: dict, *, problems: list | None = None) -> dict:
    """:class:`~mlite.memory.rl_critic.CriticOptions` keyword arguments from a verl config (nested or flat), one per
    row of :data:`mlite.options.rl_critic.CRITIC_ROWS` whose key is set (``critic.enable`` null: verl's
    ``need_critic`` decides from ``algorithm.adv_estimator``)."""
    return rows_kwargs(_critic_rows(), cfg, problems=problems)


def critic_overrides(c, *, defaults=None) -> dict:
    """verl overrides ``{key: value}`` for the critic options ``c`` (only those that differ from ``defaults``)."""
    return rows_overrides(_critic_rows(), c, defaults=defaults)


__all__ += ["critic_kwargs", "critic_overrides", "log_prob_kwargs", "log_prob_overrides"]
