"""Which training state exists at phase P of step k of a verl run: the one rule the RL phases
(:mod:`mlite.memory.rl_phases`), the engine's start-up (:func:`at_engine_start`) and
:func:`mlite.memory.rl_metrics.predicted_metrics` call.

What the code says (verl-project/verl; v0.4.1 = 8d9e350e, v0.7.0 = f9c855f7, main = 1dda039b; NVIDIA/Megatron-LM
``megatron/core/optimizer/distrib_optimizer.py`` @ 00119989):

- Optimizer moments are created lazily, at the first ``step()``. verl's FSDP actor and critic use ``torch.optim.
  AdamW`` (``optim.AdamW`` in ``_build_model_optimizer`` / ``_build_critic_model_optimizer`` of
  ``verl/workers/fsdp_workers.py`` @ v0.4.1; ``build_optimizer`` in ``verl/workers/config/optimizer.py`` @ v0.7.0,
  "PyTorch AdamW" by default), whose ``exp_avg`` / ``exp_avg_sq`` appear in ``_init_group`` at the first step; so
  verl's ``offload_fsdp_optimizer`` (``verl/utils/fsdp_utils.py`` @ v0.7.0) returns at once while
  ``optimizer.state`` is empty. Megatron-Core's ``DistributedOptimizer.__init__`` allocates the fp32 main-parameter
  shards ("Allocate main param shards": ``_build_model_and_main_param_groups``, ``shard_model_param.clone().float()``)
  but not the Adam state ("the Torch optimizers state has yet to be allocated at this point", its
  ``load_state_dict`` docstring; ``init_state_fn`` runs only when loading a checkpoint), and the DDP's contiguous
  gradient buffer is allocated when the model is wrapped (``_ParamAndGradBuffer``), zeroed in place between steps.
  So before the first update of a process only the moments are missing: the FSDP worker's fp32 parameters, the
  Megatron worker's bf16 parameters, gradient buffer and fp32 main parameters are there.
- FSDP gradients exist only inside an update: ``update_policy`` (``verl/workers/actor/dp_actor.py``: line 525 @
  v0.4.1, 555 @ v0.7.0) and ``update_critic`` (``verl/workers/critic/dp_critic.py``: 268 @ v0.4.1, 262 @ v0.7.0) end
  with ``optimizer.zero_grad()``, whose default ``set_to_none=True`` (torch >= 2.0) frees them; verl main's engine
  context does the same on exit (``zero_grad_on_exit=True``, ``BaseEngineCtx`` in ``verl/workers/engine/base.py``,
  ``optimizer_zero_grad`` in ``verl/workers/engine/fsdp/transformer_impl.py``). That holds at every step, so it is
  the FSDP actor's idle state itself (:data:`FSDP_GRADS_BETWEEN_UPDATES`, read by
  :func:`mlite.memory.rl_fsdp.fsdp_actor`), not a step-1 effect.
- Order in a step (``RayPPOTrainer.fit``, ``verl/trainer/ppo/ray_trainer.py``): the weight sync before the
  generation (the sharding manager's ``__enter__`` in v0.3-v0.5, ``update_weights`` before the loop on main), the
  rollout, old_log_prob, the reference, the critic's values and its update, then the actor's update, inside which
  ``perf/max_memory_allocated_gb`` is read (:mod:`mlite.memory.rl_metrics`). The critic is built before the actor
  and the engine (``init_workers``), and vLLM sizes its KV cache once, at start-up, before any update.

So, at step ``k``: for ``k >= 2`` every phase has its whole state (the figure read at step k covers steps 1..k, and
no phase of step 1 holds more than the same phase later); at step 1 an owner's moments (``actor`` / ``critic``)
exist from its own update on (the critic's update runs before the actor's); at the engine's start-up they exist for
neither. ``logged_step=None`` is the steady state, the planner's worst case and ``mlite rl-memory``'s default. The
first update's own backward runs before its first ``step()``: the kit counts the update phase with its moments
(exact when an update takes two or more optimizer steps, ``ppo_epochs`` x mini-batches; an upper bound otherwise).
"""

from __future__ import annotations

from ..errors import MliteError

FSDP_GRADS_BETWEEN_UPDATES = False
"""Whether an FSDP worker's gradients stay allocated between its updates: no (``zero_grad(set_to_none=True)`` at the
end of ``update_policy`` / ``update_critic``; see the module docstring)."""
ENGINE_START = "engine_start"
"""The moment the rollout engine profiles the device and sizes its KV cache (before the first update)."""
UPDATE_PHASE = {"actor": "actor_update", "critic": "critic_update"}
"""Owner -> the phase whose optimizer step creates its moments."""
STEP_ONE_ORDER = (ENGINE_START, "weight_sync", "rollout", "old_log_prob", "ref", "critic_values", "critic_update",
                  "actor_update")  # fmt: skip
"""The phases of step 1 in the order they run up to the read (the weight sync of step 1 is the one before its
generation)."""


def check_logged_step(logged_step) -> int | None:
    """``logged_step`` as the rule takes it (None: steady state); anything but a positive integer raises
    :class:`MliteError` naming ``--logged-step``."""
    if logged_step is None:
        return None
    if isinstance(logged_step, bool) or not isinstance(logged_step, int) or logged_step < 1:
        raise MliteError(f"--logged-step must be a positive integer (the step line the log shows), got {logged_step!r}")
    return logged_step


def moments_exist(owner: str, phase: str, logged_step: int | None = None) -> bool:
    """Whether ``owner``'s (``actor`` / ``critic``) optimizer moments exist at ``phase`` of step ``logged_step``
    (None: steady state). A phase the rule does not know (a caller's own) counts them at step 1 too."""
    if owner not in UPDATE_PHASE:
        raise MliteError(f"moments_exist: owner must be one of {', '.join(UPDATE_PHASE)}, got {owner!r}")
    if phase == ENGINE_START:
        return False
    step = check_logged_step(logged_step)
    if step is None or step >= 2 or phase not in STEP_ONE_ORDER:
        return True
    return STEP_ONE_ORDER.index(phase) >= STEP_ONE_ORDER.index(UPDATE_PHASE[owner])


def absent(moments: float, owner: str, phase: str, logged_step: int | None = None) -> float:
    """Bytes of ``owner``'s idle state that do not exist yet at ``phase`` of step ``logged_step``: its ``moments``
    (the moment bytes its idle state counts on the GPU) before they are created, else 0."""
    return 0.0 if moments_exist(owner, phase, logged_step) else moments


def moments_idle(rank, optimizer_on_host: bool) -> float:
    """Moment bytes (``exp_avg`` + ``exp_avg_sq``) that ``rank`` (:class:`~mlite.memory.estimate.RankMemory`) counts
    in its idle GPU state: 0 when the optimizer state is offloaded between steps."""
    return 0.0 if optimizer_on_host else rank.exp_avg + rank.exp_avg_sq


def at_engine_start(idle: float, moments: float) -> float:
    """What an owner holds on the GPU when the engine starts: its idle state less the moments not created yet."""
    return idle - absent(moments, "actor", ENGINE_START)


__all__ = [
    "ENGINE_START",
    "FSDP_GRADS_BETWEEN_UPDATES",
    "STEP_ONE_ORDER",
    "UPDATE_PHASE",
    "absent",
    "at_engine_start",
    "check_logged_step",
    "moments_exist",
    "moments_idle",
]
