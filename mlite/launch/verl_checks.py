"""Checks of the verl-sft fields of a :class:`~mlite.launch.RunConfig`, run before anything starts.

Kept apart from :mod:`mlite.launch.verl_sft` (the launcher process) so that the config can call them without importing
the run-directory and supervisor modules. No verl import.
"""

from __future__ import annotations

from ..errors import MliteError
from ..options.optimizers import check_verl_lite_engine
from ..options.table import (
    LITE_ENGINE,
    LITE_ENGINE_KEYS,
    LITE_OPTIM_OVERRIDES,
    RUN,
    RUN_VERL_KEYS,
    RUN_VERL_NOT_RUN,
    TRAINERS,
    rows_by_field,
)


def check_trainer(cfg) -> tuple:
    """Verl-free checks of the verl-sft fields of a RunConfig; returns the overrides as a tuple of ``key=value``."""
    if cfg.trainer not in TRAINERS:
        raise MliteError(f"trainer: {cfg.trainer!r} is not one of {', '.join(TRAINERS)}")
    if isinstance(cfg.train_batch_size, bool) or not isinstance(cfg.train_batch_size, int) or cfg.train_batch_size < 1:
        raise MliteError(f"train_batch_size: {cfg.train_batch_size!r} must be an integer >= 1")
    ovs = tuple(cfg.verl_overrides or ())
    if cfg.trainer == "lite":
        return ovs  # refused at start (refuse_unused): a config.json may carry them for a later verl-sft run
    if cfg.launcher != "torchrun":
        raise MliteError("launcher: --trainer verl-sft runs under torchrun; drop --launcher ray")
    check_verl_lite_engine(cfg.optimizer, "--optimizer")  # the engine would refuse it after torchrun started
    rows = rows_by_field(RUN)
    for name, why in RUN_VERL_NOT_RUN.items():
        if getattr(cfg, name) != rows[name].default:
            raise MliteError(
                f"{name}: --trainer verl-sft does not run {rows[name].flag} ({why}); drop it or use --trainer lite"
            )
    for ov in ovs:
        check_override(ov)
    return ovs


def refuse_unused(cfg) -> None:
    """At start: the kit's own loop does not read Hydra overrides."""
    if cfg.trainer == "lite" and cfg.verl_overrides:
        raise MliteError("verl_overrides: only --trainer verl-sft reads Hydra overrides; drop --verl-overrides")


def check_override(ov: str) -> None:
    """Refuse an ``engine.*`` / ``optim.override_optimizer_config.*`` key the lite engine does not know."""
    if "=" not in ov:
        raise MliteError(f"verl_overrides: {ov!r} is not KEY=VALUE (e.g. engine.param_offload=true)")
    key = ov.split("=", 1)[0].lstrip("+~")
    flags = {RUN_VERL_KEYS[f].lstrip("+"): f for f in RUN_VERL_KEYS}
    if key in flags:  # a run flag writes it: one spelling (and the mesh checks see it)
        flag = rows_by_field(RUN)[flags[key]].flag
        raise MliteError(f"verl_overrides: {key} is written from the run flag {flag}; give {flag} instead")
    check_lite_engine_key(key, "verl_overrides")
    if key in ("engine", "hydra.searchpath"):
        raise MliteError(f"verl_overrides: {key} is set by --trainer verl-sft (engine={LITE_ENGINE}); drop it")


def check_lite_engine_key(key: str, where: str) -> None:
    """Refuse an ``engine.*`` / ``optim.override_optimizer_config.*`` key (``+``/``~`` stripped) that the lite engine
    (``engine=lite``) does not read (:data:`~mlite.options.table.LITE_ENGINE_KEYS`,
    :data:`~mlite.options.table.LITE_OPTIM_OVERRIDES`); ``where`` names the input (``verl_overrides``, a launcher)."""
    if key.startswith("engine."):
        sub = key[len("engine.") :]
        if sub not in LITE_ENGINE_KEYS:
            raise MliteError(
                f"{where}: engine.{sub} is not a key of the lite engine (engine=lite); known: "
                f"{', '.join(sorted(LITE_ENGINE_KEYS))}"
            )
    elif key.startswith("optim.override_optimizer_config."):
        sub = key[len("optim.override_optimizer_config.") :]
        if sub not in LITE_OPTIM_OVERRIDES:
            raise MliteError(
                f"{where}: optim.override_optimizer_config.{sub} is not read by the lite engine; "
                f"known: {', '.join(sorted(LITE_OPTIM_OVERRIDES))}"
            )


__all__ = ["check_lite_engine_key", "check_override", "check_trainer", "refuse_unused"]
