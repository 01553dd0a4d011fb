"""An imported verl GRPO/PPO launcher whose actor is verl's FSDP / FSDP2 worker, estimated as FSDP (never as a
Megatron mesh): :func:`fsdp_options` reads its ``actor_rollout_ref.actor.strategy`` and FSDP keys (the rows of
:data:`mlite.options.rl_fsdp.FSDP_ROWS`), :func:`fsdp_estimate` gives the FSDP actor on one GPU and the RL phases
(:func:`mlite.memory.rl.rl_estimate` with those options).

A launcher is FSDP when :func:`mlite.export.mapping.read_parallel` finds neither the mlite engine's nor verl's
Megatron keys (target ``verl-fsdp-grpo``): verl's ``ppo_trainer`` config, the default of ``main_ppo``, has
``actor_rollout_ref.actor.strategy: fsdp`` (``verl/trainer/config/_generated_ppo_trainer.yaml`` @ 1dda039b), so a
launcher that names no strategy is FSDP1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MliteError

if TYPE_CHECKING:
    from ..memory.rl_fsdp import FsdpOptions

FSDP_RL_TARGET = "verl-fsdp-grpo"
"""The import target of a GRPO/PPO launcher with an FSDP actor."""
DEFAULT_STRATEGY = "fsdp"
"""``actor_rollout_ref.actor.strategy`` of verl's ``ppo_trainer`` config."""


def fsdp_keys() -> set[str]:
    """The verl keys the FSDP rows read (an import consumes them: not "ignored")."""
    from ..options.rl_fsdp import FSDP_ROWS
    from ..options.schema import Key

    return {k for r in FSDP_ROWS if isinstance(r.mlite, Key) for k in (r.mlite.key, *r.mlite.aliases)}


def fsdp_options(imp: Any) -> FsdpOptions | None:
    """The launcher's :class:`~mlite.memory.rl_fsdp.FsdpOptions` (None unless it is an FSDP GRPO/PPO launcher);
    a value of the wrong kind (an unresolved ``$VAR``) is left at verl's default and said in ``imp.warnings``;
    a strategy other than fsdp / fsdp2 raises :class:`MliteError` naming the key."""
    if imp.target != FSDP_RL_TARGET:
        return None
    from ..memory.rl_fsdp import FSDP_STRATEGIES, FsdpOptions
    from ..memory.rl_keys import fsdp_kwargs
    from ..options.rl_fsdp import STRATEGY_KEY

    problems: list[str] = []
    kw = fsdp_kwargs({o.key: o.value for o in imp.overrides}, default_strategy=DEFAULT_STRATEGY, problems=problems)
    for p in problems:
        if p not in imp.warnings:
            imp.warnings.append(f"{p}; verl's default used")
    if kw["strategy"] not in FSDP_STRATEGIES:
        raise MliteError(
            f"{STRATEGY_KEY}={kw['strategy']} in a launcher without Megatron keys: the kit reads fsdp or fsdp2 here "
            "(verl's ppo_trainer config); add the actor_rollout_ref.actor.megatron.* keys or "
            "--config-name ppo_megatron_trainer for a Megatron actor"
        )
    return FsdpOptions(**kw)


def _actor_doc(act, usable: float) -> dict:
    """The FSDP actor on one GPU (bytes as integers)."""
    return {
        "params": round(act.params),
        "grads": round(act.grads),
        "optimizer": round(act.optimizer),
        "activations": round(act.activation_total),
        "transient_peak": round(act.transient_peak),
        "peak": round(act.peak),
        "total": round(act.total),
        "idle_gpu": round(act.idle_gpu),
        "host_per_gpu": round(sum(act.host.values())),
        "activation_parts": {k: round(v) for k, v in act.activations.items()},
        "transients": {k: round(v) for k, v in act.transients.items()},
        "usable": round(usable),
        "fits": act.total <= usable,
    }


def fsdp_estimate(imp: Any, config: str | None = None, *, gpu_memory_gib: float | None = None) -> dict:
    """``{"strategy", "fsdp", "actor", "rl"}``: the FSDP options read, the FSDP actor's update on one GPU
    (:func:`mlite.memory.rl_fsdp.fsdp_actor`) and the RL phases (``mlite rl-memory --json``'s document).
    Refused (:class:`MliteError`) without a model config, as :meth:`ImportedLauncher.estimate` is."""
    from dataclasses import replace

    from ..memory.estimate import GIB
    from ..memory.rl import rl_estimate
    from ..memory.rl_fsdp import fsdp_actor
    from ..memory.rl_options import RolloutOptions
    from ..models import from_hf_config

    f = fsdp_options(imp)
    if f is None:
        raise MliteError(f"{imp.source}: not an FSDP GRPO/PPO launcher (target {imp.target})")
    mp, ref = imp.plan(config)
    if mp is None:
        imp.estimate(config)  # raises the model-missing message
        raise MliteError("--estimate needs the model; pass --config NAME_OR_PATH")
    spec = from_hf_config(ref)
    o = imp.training_options()
    if gpu_memory_gib is not None:
        o = replace(o, gpu_memory_gib=gpu_memory_gib)
    r = RolloutOptions(**imp.rollout)
    act = fsdp_actor(spec, imp.ngpu, o, f, r.seq_tokens, r.response_length / r.seq_tokens, r.verl_version)
    usable = o.gpu_memory_gib * GIB * (1 - o.headroom)
    return {
        "strategy": f.strategy,
        "fsdp": f.to_dict(),
        "actor": _actor_doc(act, usable),
        "rl": rl_estimate(spec, mp, o, r, f, imp.critic_options()).to_dict(),
    }


__all__ = ["DEFAULT_STRATEGY", "FSDP_RL_TARGET", "fsdp_estimate", "fsdp_keys", "fsdp_options"]
