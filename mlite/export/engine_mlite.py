"""Engine and optimizer overrides for verl's mlite engine (SFT ``engine.*``, GRPO ``actor_rollout_ref.actor.engine.*``).

Keys and ``+`` prefixes follow :mod:`mlite.export.mlite_keys`. Options the mlite engine cannot take through verl
are returned as notes (the launcher header lists them) instead of being written as keys it would ignore.
"""

from __future__ import annotations

from . import mlite_keys as K
from .launcher import Knob
from .overrides import Override, var


def _flag(b: bool) -> str:
    return "True" if b else "False"


def recompute_list(o) -> list[str]:
    """``impl_cfg.recompute``: ``[full]``, or the recomputed mlite modules (selective = ``core_attn`` + extras)."""
    if o.recompute == "full":
        return ["full"]
    mods = list(o.recompute_modules)
    if o.recompute == "selective" and "core_attn" not in mods:
        mods.insert(0, "core_attn")
    return mods


def knobs(plan) -> list[Knob]:
    o = plan.options
    out = [
        Knob(name="OPTIMIZER", default=o.optimizer, comment="fsdp2 | dist_opt (engine.impl_cfg.optimizer)"),
        Knob(name="PARAM_OFFLOAD", default=_flag(o.param_offload), comment="runtime context offload of parameters"),
        Knob(name="OPTIMIZER_OFFLOAD", default=_flag(o.optimizer_offload),
             comment="runtime context offload of optimizer state"),
        Knob(name="GRAD_OFFLOAD", default=_flag(o.grad_offload), comment="runtime context offload of gradients"),
    ]
    if o.offload_fraction > 0:
        out.append(Knob(name="OFFLOAD_FRACTION", default=f"{o.offload_fraction:g}",
                        comment="optimizer state share on CPU (override_optimizer_config.offload_fraction)"))
    return out


def overrides(plan, mp, *, engine: str, optim: str) -> tuple[list[Override], list[str]]:
    """``(overrides, notes)`` for the engine at ``engine`` (``engine`` or ``actor_rollout_ref.actor.engine``) and
    the optimizer group at ``optim``."""
    o, notes = plan.options, []
    e = lambda k, v, add=False: Override(f"{engine}.{k}", v, add)  # noqa: E731
    ovs = [
        Override.lit(f"{engine}.impl", K.ENGINE_FIELDS["impl"]),
        Override.lit(f"{engine}.model_name", K.ENGINE_FIELDS["model_name"]),
        e("tp", var("TP")), e("pp", var("PP")), e("vpp", var("VPP")), e("cp", var("CP")), e("ep", var("EP")),
        e("etp", var("ETP")),
        e("param_offload", var("PARAM_OFFLOAD")), e("optimizer_offload", var("OPTIMIZER_OFFLOAD")),
        e("grad_offload", var("GRAD_OFFLOAD")),
        e("impl_cfg.optimizer", var("OPTIMIZER"), True),
    ]
    rec = recompute_list(o)
    if rec:
        ovs.append(Override.lit(f"{engine}.impl_cfg.recompute", rec, add=True))
    if o.offload_fraction > 0:
        ovs.append(Override(f"{optim}.override_optimizer_config.offload_fraction", var("OFFLOAD_FRACTION"), True))
    if o.use_precision_aware_optimizer:
        ovs.append(Override.lit(f"{optim}.override_optimizer_config.use_precision_aware_optimizer", True, add=True))
    if o.optimizer_offload and o.offload_fraction == 0:
        notes.append("optimizer_offload=True without offload_fraction: verl's mlite engine then offloads the whole "
                     "optimizer state (offload_fraction 1.0)")
    bf16 = [n for n in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype") if getattr(o, n) != "fp32"]
    if bf16:
        notes.append(f"{', '.join(bf16)}=bf16 is not exported: verl's mlite engine passes only offload_fraction, "
                     "use_precision_aware_optimizer, decoupled_weight_decay and adam_eps to the mlite optimizer")
    if o.use_precision_aware_optimizer and not o.store_param_remainders:
        notes.append("store_param_remainders=False is not exported: the mlite engine has no such key")
    if not o.use_distributed_optimizer:
        notes.append("use_distributed_optimizer=False is not exported: mlite's dist_opt always shards the state")
    if mp.parallel.pp_layout:
        notes.append(f"pp_layout '{mp.parallel.pp_layout}' is not exported: verl's mlite engine config has no "
                     "pp_layout key, Megatron Lite balances the layers itself (pp_layout=None)")
    elif mp.layout_source == "auto":
        notes.append(f"{mp.layout} is the planner's uneven layout; verl's mlite engine has no pp_layout key, so "
                     "Megatron Lite balances the layers itself: compare with the layout it prints at start-up")
    for m in o.recompute_modules if o.recompute == "full" else ():
        notes.append(f"recompute_modules '{m}' dropped: recompute=full recomputes whole layers")
    return ovs, notes


def check(overrides_: list, *, engine: str, optim: str) -> list[str]:
    """Problems of the mlite-specific overrides (parsed, values expanded) against the key list."""
    problems = []
    for ov in overrides_:
        if ov.key.startswith(engine + "."):
            p = K.engine_key_problem(ov.key[len(engine) + 1:], ov.add, ov.value)
        elif ov.key.startswith(optim + ".override_optimizer_config."):
            p = K.optim_override_problem(ov.key[len(optim + ".override_optimizer_config."):], ov.add)
        else:
            p = None
        if p:
            problems.append(p)
    return problems
