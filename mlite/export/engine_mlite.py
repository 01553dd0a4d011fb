"""Engine and optimizer overrides for verl's mlite engine (SFT ``engine.*``, GRPO ``actor_rollout_ref.actor.engine.*``).

The training options come from the options table (:func:`mlite.export.mapping.option_overrides`); this module adds
the engine's fixed keys and the mesh. Keys and ``+`` prefixes follow :mod:`mlite.export.mlite_keys`. What the mlite
engine cannot take through verl is returned as notes (the launcher header lists them) instead of being written as
keys it would ignore.
"""

from __future__ import annotations

from ..mesh.axes import AXES
from . import mlite_keys as K
from .mapping import option_overrides
from .overrides import Override, var


def build(plan, mp, spec, *, engine: str) -> tuple[list, list[Override], list[str], object]:
    """``(knobs, overrides, notes, options run)`` for the engine at ``engine`` (``engine`` or
    ``actor_rollout_ref.actor.engine``); the optimizer overrides go to the target's optimizer group."""
    knobs, opts, notes, view = option_overrides(plan, mp, spec)
    e = lambda k, v: Override(f"{engine}.{k}", v)
    ovs = [
        Override.lit(f"{engine}.impl", K.ENGINE_FIELDS["impl"]),
        Override.lit(f"{engine}.model_name", K.ENGINE_FIELDS["model_name"]),
        *(e(a.engine_key, var(a.label)) for a in AXES),
    ] + opts
    if mp.parallel.pp_layout:
        notes.append(
            f"pp_layout '{mp.parallel.pp_layout}' is not exported: verl's mlite engine config has no "
            "pp_layout key, Megatron Lite balances the layers itself (pp_layout=None)"
        )
    elif mp.layout_source == "auto":
        notes.append(
            f"{mp.layout} is the planner's uneven layout; verl's mlite engine has no pp_layout key, so "
            "Megatron Lite balances the layers itself: compare with the layout it prints at start-up"
        )
    return knobs, ovs, notes, view


def check(overrides_: list, *, engine: str, optim: str) -> list[str]:
    """Problems of the mlite-specific overrides (parsed, values expanded) against the key list."""
    problems = []
    for ov in overrides_:
        if ov.key.startswith(engine + "."):
            p = K.engine_key_problem(ov.key[len(engine) + 1 :], ov.add, ov.value)
        elif ov.key.startswith(optim + ".override_optimizer_config."):
            p = K.optim_override_problem(ov.key[len(optim + ".override_optimizer_config.") :], ov.add)
        else:
            p = None
        if p:
            problems.append(p)
    return problems
