"""The phases of one colocated verl RL step as a registry: one :class:`PhaseEntry` per phase, the only place that
names it and says what it holds on the GPU and in its process's host RAM, as a small function of :class:`Step`
(the inputs and the figures every phase shares, computed once by :func:`mlite.memory.rl.rl_estimate`).

:func:`~mlite.memory.rl.rl_estimate` iterates over :data:`PHASE_REGISTRY` in order; ``mlite rl-memory`` (its table
and ``--json``), the RL view (``widgets/rl_view.py``) and the verdicts read the phases from the estimate, so a new
phase is one :func:`register_phase` call. verl ``main``; file names relative to the verl repository.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import MliteError
from ..options import TrainingOptions
from .estimate import RankMemory, estimate
from .rl_engine import EngineMemory
from .rl_lazy import absent

if TYPE_CHECKING:
    from .rl_options import RolloutOptions


@dataclass(kw_only=True)
class Step:
    """What the phases of one step read: the inputs and the shared figures (bytes on one GPU unless said)."""

    spec: Any
    """The model (:class:`~mlite.models.ModelSpec`)."""
    plan: Any
    """The actor's mesh plan (:func:`mlite.mesh.resolve`)."""
    training: TrainingOptions
    """The actor's training options."""
    rollout: RolloutOptions
    """The rollout options."""
    actor: RankMemory
    """The actor's worst rank (:attr:`~mlite.memory.estimate.MemoryEstimate.worst` of :func:`mlite.memory.estimate`)."""
    engine: EngineMemory
    """The rollout engine's start-up (:class:`~mlite.memory.rl_engine.EngineMemory`)."""
    framework: float
    """CUDA context and allocator reserve of the actor's process (the estimate's ``other`` parts)."""
    ref_weights: float
    """The reference's bf16 weights (0 without a reference)."""
    ref_gpu: float
    """The reference's weights left on the GPU between its forwards (0 when offloaded)."""
    idle_other: float
    """The actor's idle state other than its weights."""
    awake: dict
    """The awake engine by part (its start-up claim when it would not start)."""
    stays: dict
    """Engine parts outside the sleep pools (overhead, CUDA graphs)."""
    kept: dict
    """What the sleeping engine keeps between generation and the next weight sync."""
    base_host: dict
    """Host bytes of every phase's process: the process itself, the actor's offloaded state, the reference's."""
    sleeping_host: dict
    """Host bytes of the sleeping engine (vLLM level-1 weights)."""
    forward: float
    """One forward-only micro-batch (:func:`forward_bytes`)."""
    notes: list
    """Warnings of the step's set-up (before the verdicts)."""
    resident_masters: float = 0.0
    """Chunked offload's selected masters / PAO remainders a Megatron Lite build without ``offload_for_forward()``
    leaves on the GPU (ISEEKYAN/Megatron-LM#232; :mod:`mlite.memory.chunked`): part of the actor's idle state,
    listed apart as ``actor_resident_masters`` in the phases outside the update."""
    ref_forward: float | None = None
    """The reference's forward micro-batch when it differs from :attr:`forward` (the FSDP reference:
    :mod:`mlite.memory.rl_fsdp_step`); None: :attr:`forward`."""
    strategy: str = "megatron"
    """The actor's ``actor_rollout_ref.actor.strategy`` (``megatron``, ``fsdp``, ``fsdp2``)."""
    always: dict = field(default_factory=dict)
    """GPU bytes by part in every phase, whatever the phase's entry says: the sibling workers' CUDA contexts on the
    engine's first GPU (``sibling_contexts``; processes do not free a context between phases)."""
    extra_host: dict = field(default_factory=dict)
    """Phase name -> host bytes by part added to that phase (``separate_async``'s copy of the current weights
    during ``old_log_prob``)."""
    critic: Any = None
    """PPO's critic (:class:`mlite.memory.rl_critic.CriticState`); None: no critic (GRPO)."""
    resync: Any = None
    """The weight resync's export peak (:class:`mlite.memory.rl_resync.ExportPeak`); None: the model's largest
    tensor once (the kit before the mesh rule)."""
    actor_moments: float = 0.0
    """The optimizer moments the actor's idle state counts on the GPU (:func:`mlite.memory.rl_lazy.moments_idle`):
    absent before its first update (:mod:`mlite.memory.rl_lazy`)."""
    logged_step: int | None = None
    """The step whose phases these are (:mod:`mlite.memory.rl_lazy`): None, the steady state (every state present);
    1, before each owner's first update its moments do not exist yet."""


@dataclass(frozen=True)
class PhaseEntry:
    """One phase of the RL step."""

    name: str
    """Phase name: the ``--json`` key, the table row and the RL view's bar."""
    gpu: Callable[[Step], dict]
    """GPU bytes by part on one GPU (zero parts are dropped)."""
    host: Callable[[Step], dict]
    """Host bytes of the process beyond the base (the process and the actor's offloaded state)."""
    when: Callable[[Step], bool]
    """Whether the step has this phase."""
    help: str
    """One line: what the phase is (the RL view's tooltip)."""


PHASE_REGISTRY: dict[str, PhaseEntry] = {}
"""Phase name -> entry, in the order of the step."""


def register_phase(entry: PhaseEntry, *, before: str | None = None) -> PhaseEntry:
    """Add ``entry`` at the end of the step (or before phase ``before``); a taken name raises :class:`MliteError`."""
    if entry.name in PHASE_REGISTRY:
        raise MliteError(f"RL phase {entry.name!r} is registered already; unregister_phase it first")
    if before is not None and before not in PHASE_REGISTRY:
        raise MliteError(f"no RL phase {before!r} to register {entry.name!r} before: {', '.join(PHASE_REGISTRY)}")
    items = list(PHASE_REGISTRY.items())
    at = len(items) if before is None else [n for n, _ in items].index(before)
    items.insert(at, (entry.name, entry))
    PHASE_REGISTRY.clear()
    PHASE_REGISTRY.update(items)
    return entry


def unregister_phase(name: str) -> None:
    """Remove phase ``name`` (a test's toy phase)."""
    if name not in PHASE_REGISTRY:
        raise MliteError(f"no RL phase {name!r}: {', '.join(PHASE_REGISTRY)}")
    del PHASE_REGISTRY[name]


def phase(name: str, *, help: str, when: Callable[[Step], bool] | None = None, host=None):
    """Decorator: register the decorated ``gpu(step) -> dict`` as phase ``name``."""

    def add(gpu):
        register_phase(
            PhaseEntry(
                name=name,
                gpu=gpu,
                host=host or (lambda s: {}),
                when=when or (lambda s: True),
                help=help,
            )
        )
        return gpu

    return add


def forward_bytes(
    spec,
    plan,
    o: TrainingOptions,
    *,
    rows: int | None = None,
    seq_len: int | None = None,
    entropy: bool = False,
    fused: bool = False,
) -> float:
    """One forward-only micro-batch (``compute_log_prob``): verl runs it under ``torch.no_grad()``
    (``MegatronPPOActor.compute_log_prob``, ``verl/workers/actor/megatron_actor.py`` line 237 @ v0.7.0 f9c855f7,
    around ``forward_backward_batch(forward_only=True)``), so no autograd state is kept and each layer's output
    replaces its input: one layer's input (the full-recompute rule's per-layer share; the other layers' inputs are
    not held) and the embedding's ids, then the larger of one layer's working set (the estimate's full-recompute
    rebuild of one layer) and, on a rank with the output layer, the final norm and verl's log-prob head
    (:func:`mlite.memory.rl_megatron_head.head_bytes`: fp32 logits, with ``entropy`` old_log_prob's three copies,
    without the reference's cast; ``fused``: ``use_fused_kernels``); ``rows`` x ``seq_len`` tokens (default the
    update's micro-batch: ``--micro-batch`` x ``--seq-len``), split over CP."""
    from .rl_megatron_head import head_bytes

    fo = replace(
        o,
        recompute="full",
        num_microbatches=1,
        micro_batch_size=rows or o.micro_batch_size,
        seq_len=seq_len or o.seq_len,
    )
    fwd = estimate(spec, plan, fo, explain=False).worst
    local_layers = max(1, -(-len(spec.main_layers) // plan.parallel.pp))
    acts = fwd.activations
    held = acts.get("layer_inputs", 0.0) / local_layers + acts.get("embedding", 0.0)
    layer = fwd.transients.get("recompute_layer", 0.0)
    if "logits" not in acts:  # no output layer on this rank
        return held + layer
    tokens = fo.micro_batch_size * fo.seq_len / plan.parallel.cp
    head = acts.get("final_norm", 0.0) + sum(head_bytes(spec, plan, tokens, entropy=entropy, fused=fused).values())
    return held + max(layer, head)


def megatron_forward(spec, plan, o: TrainingOptions, f, seq_tokens: int, which: str) -> float:
    """The Megatron actor's / reference's forward micro-batch of ``which`` (``old_log_prob`` or ``ref``) sized as
    verl sizes it (:func:`mlite.memory.rl_fsdp.log_prob_sizing`): ``rows`` x ``--seq-len`` tokens, or with
    ``use_dynamic_bsz`` one packed micro-batch of ``max_token_len x CP`` tokens (at least one sequence of P + R)
    split over CP (``max_token_len * context_parallel_size`` in ``MegatronPPOActor.compute_log_prob``,
    ``verl/workers/actor/megatron_actor.py`` @ v0.7.0 f9c855f7); old_log_prob computes the entropy, the reference
    does not (:mod:`mlite.memory.rl_megatron_head`)."""
    from .rl_fsdp import log_prob_sizing

    rows, tokens = log_prob_sizing(f, o, which)
    kw = {"entropy": which == "old_log_prob", "fused": f.use_fused_kernels}
    if not f.use_dynamic_bsz:
        return forward_bytes(spec, plan, o, rows=rows, **kw)
    cp = plan.parallel.cp
    return forward_bytes(spec, plan, o, rows=1, seq_len=max(tokens * cp, seq_tokens), **kw)


def largest_tensor(spec, bytes_per: int) -> float:
    """Bytes of the model's largest tensor at ``bytes_per`` bytes per element."""
    groups = list(spec.pre) + list(spec.post) + [g for layer in spec.main_layers for g in layer.groups]
    return max((g.numel for g in groups), default=0) * bytes_per


def _sleeping(s: Step) -> dict:
    return s.sleeping_host


def actor_idle(s: Step, phase: str) -> float:
    """The actor's idle state on the GPU at ``phase`` of step ``s.logged_step`` (its moments only once created:
    :func:`mlite.memory.rl_lazy.absent`)."""
    return s.actor.idle_gpu - absent(s.actor_moments, "actor", phase, s.logged_step)


def actor_other(s: Step, phase: str) -> float:
    """The actor's idle state other than its weights at ``phase`` (:func:`actor_idle` less the weights)."""
    return s.idle_other - absent(s.actor_moments, "actor", phase, s.logged_step)


def critic_other(s: Step, phase: str) -> float:
    """The critic's idle state other than its weights at ``phase`` (its moments only once created)."""
    return s.critic.idle_other - absent(s.critic.moments, "critic", phase, s.logged_step)


def critic_idle(s: Step, phase: str) -> dict:
    """The critic's idle state on the GPU in the phases outside its own at ``phase`` of step ``s.logged_step``
    (nothing without a critic)."""
    if s.critic is None:
        return {}
    return {"critic_resident": s.critic.rank.idle_gpu - absent(s.critic.moments, "critic", phase, s.logged_step)}


@phase("rollout", help="generation: the awake engine beside the actor's idle state and the reference")
def _rollout(s: Step) -> dict:
    """The awake engine (weights at its TP, KV cache, profile activations, CUDA graphs, overhead), the actor's idle
    state, the reference's weights unless offloaded. The engine is started after the actor is built and offloaded
    (``init_model``), so "free at rollout start" is the device less that resident state."""
    return {
        **s.awake,
        "actor_resident": actor_idle(s, "rollout") - s.resident_masters,
        "actor_resident_masters": s.resident_masters,
        "ref_params": s.ref_gpu,
        "framework": s.framework,
        **critic_idle(s, "rollout"),
    }


@phase("old_log_prob", help="the actor's forward over the rollouts, the engine asleep", host=_sleeping)
def _old_log_prob(s: Step) -> dict:
    """The actor's weights loaded (param_offload loads them for the forward), its other state as the offload flags
    leave it, one forward micro-batch (no autograd state: one layer's working set and the logits)."""
    return {
        **s.kept,
        "actor_params": s.actor.params,
        "actor_resident": actor_other(s, "old_log_prob") - s.resident_masters,
        "actor_resident_masters": s.resident_masters,
        "forward_activations": s.forward,
        "ref_params": s.ref_gpu,
        "framework": s.framework,
        **critic_idle(s, "old_log_prob"),
    }


@phase(
    "ref",
    help="the reference's forward (KL term)",
    when=lambda s: s.rollout.ref == "colocated",
    host=_sleeping,
)
def _ref(s: Step) -> dict:
    """The reference's weights on the GPU, the actor back to its idle state, one forward micro-batch."""
    return {
        **s.kept,
        "actor_resident": actor_idle(s, "ref") - s.resident_masters,
        "actor_resident_masters": s.resident_masters,
        "ref_params": s.ref_weights,
        "forward_activations": s.forward if s.ref_forward is None else s.ref_forward,
        "framework": s.framework,
        **critic_idle(s, "ref"),
    }


@phase("actor_update", help="the actor's training step (the mlite memory estimate)", host=_sleeping)
def _actor_update(s: Step) -> dict:
    """Today's training estimate (everything loaded), plus what the sleeping engine keeps."""
    return {
        **s.kept,
        "actor_training_peak": s.actor.peak,
        "ref_params": s.ref_gpu,
        "framework": s.framework,
        **critic_idle(s, "actor_update"),
    }


@phase("weight_sync", help="the actor's weights sent to the woken engine in buckets")
def _weight_sync(s: Step) -> dict:
    """``ActorRolloutRefWorker.update_weights`` (``verl/workers/engine_workers.py``): the engine's weights are woken
    first (``resume(tags=["weights"])``), the actor's weights are on the GPU to be sent in buckets of
    ``update_weights_bucket_megabytes`` (one full tensor gathered at a time; a small model fills less than one;
    the gathered tensor, its further copies and the buckets on this mesh and backend: :mod:`.rl_resync`), then the
    actor is offloaded and only then the KV cache is woken (``resume(tags=["kv_cache"])``), so weights and
    KV are not both held at this peak. With ``free_cache_engine=False`` the KV cache never left."""
    eng, r = s.engine, s.rollout
    bucket = min(r.update_weights_bucket_megabytes * 1024**2, s.spec.total * 2)
    gathered, copies = largest_tensor(s.spec, 2), 0.0
    if s.resync is not None:  # the export peak on the actor mesh (mlite.memory.rl_resync)
        bucket, gathered, copies = s.resync.staging, s.resync.gathered, s.resync.extra_copies
    sync_kv = {"kv_cache": max(0.0, eng.kv)} if not r.free_cache_engine and eng.kv > 0 else {}
    sync_engine = {"engine_weights": eng.weights, **s.stays, **sync_kv} if eng.kv > 0 else dict(s.awake)
    return {
        **sync_engine,
        "actor_params": s.actor.params,
        "actor_resident": actor_other(s, "weight_sync") - s.resident_masters,
        "actor_resident_masters": s.resident_masters,
        "sync_bucket": bucket,
        "gathered_tensor": gathered,
        "gather_copies": copies,
        "ref_params": s.ref_gpu,
        "framework": s.framework,
        **critic_idle(s, "weight_sync"),
    }


PHASES = tuple(PHASE_REGISTRY)
"""The built-in phases every step may have, in order (a GRPO step's; the registry may hold more: the critic's,
and a caller's own)."""


def _has_critic(s: Step) -> bool:
    return s.critic is not None


def _critic_values(s: Step) -> dict:
    """``compute_values`` (after the reference, before the advantages): the critic's weights loaded (eval mode: no
    gradients, no optimizer), one values micro-batch; the actor at its idle state, the engine asleep."""
    c = s.critic
    return {
        **s.kept,
        "actor_resident": actor_idle(s, "critic_values") - s.resident_masters,
        "actor_resident_masters": s.resident_masters,
        "ref_params": s.ref_gpu,
        "critic_params": c.params,
        "critic_resident": critic_other(s, "critic_values"),
        "critic_forward_activations": c.forward,
        "framework": s.framework,
    }


def _critic_update(s: Step) -> dict:
    """``update_critic`` (before the actor's update): the critic's training step, everything loaded (its params,
    gradient buffer, optimizer state, one update micro-batch through the value head); the actor idle."""
    return {
        **s.kept,
        "actor_resident": actor_idle(s, "critic_update") - s.resident_masters,
        "actor_resident_masters": s.resident_masters,
        "ref_params": s.ref_gpu,
        "critic_training_peak": s.critic.rank.peak,
        "framework": s.framework,
    }


register_phase(
    PhaseEntry(
        name="critic_values",
        gpu=_critic_values,
        host=_sleeping,
        when=_has_critic,
        help="PPO: the critic's values forward (compute_values)",
    ),
    before="actor_update",
)
register_phase(
    PhaseEntry(
        name="critic_update",
        gpu=_critic_update,
        host=_sleeping,
        when=_has_critic,
        help="PPO: the critic's training step (update_critic)",
    ),
    before="actor_update",
)
CRITIC_PHASES = ("critic_values", "critic_update")
"""The critic's phases (a PPO step with ``adv_estimator=gae``), between the reference and the actor's update."""
