"""``rl_estimate(spec, plan, training, rollout) -> RLEstimate``: GPU and host memory of one verl GRPO/PPO step, phase
by phase, with the actor, a colocated reference and a vLLM or SGLang rollout engine on the same GPUs.

The actor's state comes from :func:`mlite.memory.estimate` (called, not copied): ``idle_gpu`` is what its runtime
context offload leaves on the GPU outside its own phases, ``peak`` + framework is the update step. The engine's
start-up is :mod:`mlite.memory.rl_engine`, its KV bytes :mod:`mlite.memory.rl_kv`. What the phases share (verl
``main``; file names relative to the verl repository):

- after generation (the ``rollout`` phase) verl sleeps the engine (``vLLMHttpServer.sleep``,
  ``verl/workers/rollout/vllm_rollout/vllm_async_server.py``): nothing happens unless ``free_cache_engine``; hybrid
  mode sleeps at level 2
  (``_resolve_sleep_level``: 1 with MTP rollout or a LoRA adapter), colocated mode at level 1. vLLM's level 1 copies
  the weights to host RAM and discards the KV cache, level 2 discards both (``Worker.sleep`` in
  ``vllm/v1/worker/gpu_worker.py``: ``CuMemAllocator.sleep(offload_tags=("weights",))`` at level 1). SGLang
  (``SGLangHttpServer.sleep``, ``verl/workers/rollout/sglang_rollout/async_sglang_server.py``) releases the KV cache
  and the weights in hybrid and colocated mode alike, and only the KV cache with a LoRA adapter ("sleep_level=1 ...
  in SGLang never released weights", ``update_weights`` in ``verl/workers/engine_workers.py``); ``--sleep-level 1``
  asks for that. CUDA graphs and the engine's NCCL buffers are outside the sleep pools and stay.

What each phase then holds is its entry in :mod:`mlite.memory.rl_phases` (the phase registry).

Host RAM per GPU process: a base (``host_process_gib``), the actor's offloaded state (pinned buffers kept across
phases), the reference's offloaded weights, and at sleep level 1 the vLLM weights while they are on the host.
Host per node multiplies by the GPU processes of one node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..errors import MliteError
from ..models.quantized import check_rollout_tp
from ..options import TrainingOptions
from .estimate import GIB, estimate
from .optimizer import state_bytes
from .rl_critic import CriticOptions, CriticState, critic_state
from .rl_engine import EngineMemory, start_engine
from .rl_fsdp import FsdpOptions
from .rl_fsdp_step import fsdp_step
from .rl_kv import FULL_KINDS
from .rl_lazy import at_engine_start, check_logged_step, moments_idle
from .rl_offload import verl_offloaded
from .rl_options import RolloutOptions
from .rl_phases import PHASE_REGISTRY, PHASES, Step, megatron_forward
from .rl_resync import ExportPeak, export_peak, resync_verdict, sync_host, sync_refusals
from .rl_vllm import kv_rule


@dataclass(kw_only=True)
class Phase:
    """What one phase holds on one GPU and in its process's host RAM."""

    name: str
    """A name in :data:`mlite.memory.rl_phases.PHASE_REGISTRY`."""
    gpu: dict
    """GPU bytes by part."""
    host: dict
    """Host bytes of this GPU's process by part."""

    @property
    def gpu_total(self) -> float:
        return sum(self.gpu.values())

    @property
    def host_total(self) -> float:
        return sum(self.host.values())


@dataclass(kw_only=True)
class RLEstimate:
    """The phases of one RL step, the engine and the verdicts."""

    model: str
    """Model name."""
    training: TrainingOptions
    """The actor's training options."""
    rollout: RolloutOptions
    """The rollout options."""
    engine: EngineMemory
    """The rollout engine on one GPU."""
    phases: dict
    """Phase name -> :class:`Phase`."""
    usable: float
    """Device bytes a phase may use (device less the headroom of the training options)."""
    host_per_node: float
    """Largest host RAM of one node over the phases."""
    gpus_per_node: int
    """GPU processes on one node."""
    errors: list = field(default_factory=list)
    """Why the job would not start or would be killed."""
    warnings: list = field(default_factory=list)
    """What would hurt without stopping it."""
    fsdp: FsdpOptions | None = None
    """verl's FSDP actor / reference options (None or ``strategy`` megatron: the Megatron estimate)."""
    resync: ExportPeak | None = None
    """The weight resync's export peak (:class:`mlite.memory.rl_resync.ExportPeak`)."""
    critic: CriticState | None = None
    """PPO's critic (:mod:`mlite.memory.rl_critic`); None: no critic (GRPO)."""
    step: Step | None = field(default=None, repr=False)
    """What the phases share (:class:`~mlite.memory.rl_phases.Step`), for :meth:`phases_at`."""

    def phases_at(self, logged_step: int | None = None) -> dict:
        """Phase name -> :class:`Phase` as the phases of step ``logged_step`` have run (:mod:`mlite.memory.rl_lazy`):
        :attr:`phases` (the steady state) for None or a step >= 2, step 1's own phases (each owner's moments only
        from its first update on) for 1."""
        k = check_logged_step(logged_step)
        if k is None or k >= 2 or self.step is None:
            return self.phases
        return _phases(self.step, k)

    @property
    def peak_phase(self) -> str:
        return max(self.phases.values(), key=lambda p: p.gpu_total).name

    def phase_fits(self, name: str) -> bool:
        return self.phases[name].gpu_total <= self.usable

    @property
    def fits(self) -> bool:
        return not self.errors and all(self.phase_fits(n) for n in self.phases)

    def kv_cache(self) -> dict:
        e, r = self.engine, self.rollout
        kv = max(0.0, e.kv)
        per_seq = e.layout.seq_bytes(r.seq_tokens)
        seqs = int(kv // per_seq) if per_seq else 0
        tokens = int(kv * r.seq_tokens // per_seq) if per_seq else 0
        return {
            "bytes_per_token": e.layout.bytes_per_token,
            "bytes": round(kv),
            "tokens": tokens,
            "max_concurrent_seqs": seqs,
            "state_bytes_per_seq": e.layout.state_bytes_per_seq,
        }

    def to_dict(self, logged_step: int | None = None) -> dict:
        """The ``mlite rl-memory --json`` document (bytes as integers); ``logged_step`` (``--logged-step``) adds
        ``logged_step``, ``phases_at_logged_step`` and ``predicted_metrics_at_logged_step`` (the phases and the
        metrics as a log line of that step shows them: :mod:`mlite.memory.rl_lazy`), every other key as before."""
        phases = {
            n: {
                "gpu": round(p.gpu_total),
                "host_per_gpu": round(p.host_total),
                "parts": {k: round(v) for k, v in p.gpu.items()},
            }
            for n, p in self.phases.items()
        }
        kv = {k: v for k, v in self.kv_cache().items() if k != "state_bytes_per_seq"}
        doc = {
            "phases": phases,
            "peak_phase": self.peak_phase,
            "fits": self.fits,
            "kv_cache": kv,
            "host_per_node": round(self.host_per_node),
            "warnings": list(self.warnings),
            "errors": list(self.errors),
            **({"resync": self.resync.to_dict()} if self.resync is not None else {}),
            **({"vllm_kv_rule": kv_rule(self.rollout.vllm_version).name} if self.rollout.name == "vllm" else {}),
            **self.metrics_dict(),
        }
        if logged_step is not None:  # the figures a log line of that step shows (rl_lazy)
            from .rl_metrics import predicted_metrics

            at = self.phases_at(logged_step)
            doc["logged_step"] = logged_step
            doc["phases_at_logged_step"] = {
                n: {"gpu": round(p.gpu_total), "parts": {k: round(v) for k, v in p.gpu.items()}} for n, p in at.items()
            }
            doc["predicted_metrics_at_logged_step"] = predicted_metrics(self, logged_step=logged_step)
        if self.critic is not None:  # PPO's critic: its options, model and state on one GPU
            k = self.critic
            doc["critic"] = {
                "options": k.options.to_dict(),
                "model": k.model,
                "params": round(k.rank.params),
                "idle_gpu": round(k.rank.idle_gpu),
                "peak": round(k.rank.peak),
                "forward": round(k.forward),
            }
        if self.fsdp is not None and self.fsdp.is_fsdp:  # verl's FSDP actor: which one, and its inputs
            doc["actor_strategy"] = self.fsdp.strategy
            doc["fsdp"] = self.fsdp.to_dict()
        return doc

    def metrics_dict(self) -> dict:
        """``predicted_metrics`` (verl's memory metric -> bytes the log would show) and
        ``predicted_metrics_assumed`` (the verl release, the engine placement, what each covers):
        :mod:`mlite.memory.rl_metrics`."""
        from .rl_metrics import assumed, predicted_metrics

        return {"predicted_metrics": predicted_metrics(self), "predicted_metrics_assumed": assumed(self)}


def _check_mesh(spec, plan, r: RolloutOptions) -> None:
    """The rollout layout the engines accept: verl's replicas of TP x DP GPUs (``RolloutReplica`` in
    ``verl/workers/rollout/replica.py``) tile the GPUs; vLLM and SGLang split the attention heads over TP and the KV
    heads over TP or replicate them past it (``QKVParallelLinear`` in ``vllm/model_executor/layers/linear.py`` and
    ``python/sglang/srt/layers/linear.py``: ``divide(kv_heads, tp)`` or ``divide(tp, kv_heads)``)."""
    tp, dp = r.tensor_model_parallel_size, r.data_parallel_size
    if plan.ngpu % (tp * dp):
        what = f"--rollout-tp {tp}" + (f" x --rollout-dp {dp}" if dp > 1 else "")
        raise MliteError(f"{what} must divide --ngpu {plan.ngpu} (each engine instance takes {tp * dp} GPUs)")
    if spec.num_attention_heads % tp:
        raise MliteError(
            f"--rollout-tp {tp} must divide the {spec.num_attention_heads} attention heads of "
            f"{spec.name} (vLLM and SGLang split heads over TP)"
        )
    # block-quantized weights keep whole blocks per rank; DeepSeek-V4's o_groups divide by TP (mlite.models.quantized)
    check_rollout_tp(spec, tp, r.weight_block_size, expert_parallel=r.expert_parallel_size > 1)
    kv = spec.num_key_value_heads
    full = any(layer.attention in FULL_KINDS for layer in spec.main_layers)
    if full and kv and kv % tp and tp % kv:
        raise MliteError(
            f"--rollout-tp {tp} and the {kv} KV heads of {spec.name}: one must divide the other (vLLM and SGLang "
            f"split KV heads over TP or replicate them past it); use a TP that divides {kv} or a multiple of it"
        )


def _step(spec, plan, o: TrainingOptions, r: RolloutOptions, f: FsdpOptions, critic_idle: float = 0.0) -> Step:
    """What the phases share: the actor's estimate, the reference, the engine's start-up and what it keeps asleep."""
    act = verl_offloaded(estimate(spec, plan, o, explain=False).worst, o)  # grad buffer freed with the params
    device = o.gpu_memory_gib * GIB
    framework = sum(act.other.values())
    # the reference: the actor's weights in its layout, in bf16 (verl builds it in bf16 even when the FSDP actor
    # keeps fp32 parameters: ``_build_model_optimizer`` in verl/workers/fsdp_workers.py @ 14667609; on main the
    # forward-only engine, verl/workers/engine/fsdp/transformer_impl.py), no grads nor optimizer
    ref_w = act.params * 2 / state_bytes(o).param if r.ref == "colocated" else 0.0
    ref_gpu = ref_w if not r.ref_param_offload else 0.0
    ref_host = ref_w if r.ref_param_offload else 0.0
    siblings = r.sibling_contexts * r.sibling_context_gib * GIB  # other processes' contexts on the first GPU
    moments = moments_idle(act, o.optimizer_offload)  # Adam's state: at the first step (rl_lazy)
    resident = at_engine_start(act.idle_gpu, moments) + ref_gpu + framework + siblings + critic_idle
    eng = start_engine(spec, r, device, resident)
    notes = []
    # what the sleeping engine keeps between generation and the next weight sync
    awake = {
        "engine_weights": eng.weights,
        "kv_cache": max(0.0, eng.kv),
        "engine_activations": eng.activations,
        "engine_overhead": eng.overhead,
        "cuda_graphs": eng.cuda_graphs,
    }
    if eng.kv <= 0:  # would not start: count its claim
        awake = {"engine_share": eng.share, "cuda_graphs": eng.cuda_graphs}
    stays = {"engine_overhead": eng.overhead, "cuda_graphs": eng.cuda_graphs}
    if r.sleep_residue_gib is not None and r.name == "vllm":  # the measured flat residue instead of the parts
        stays = {"engine_sleep_residue": r.sleep_residue_gib * GIB}
    engine_host = 0.0
    if not r.free_cache_engine:
        kept = dict(awake)
        notes.append(
            "free_cache_engine=False: the engine keeps its weights and KV cache on the GPU through "
            "old_log_prob, ref, the update and the weight sync"
        )
    elif r.name == "sglang" and (r.lora_as_adapter or r.sleep_level == 1):
        kept = {"engine_weights": eng.weights, **stays}
    else:
        kept = dict(stays)
        if r.name == "vllm" and r.resolved_sleep_level == 1:
            engine_host = eng.weights
    stuck = act.chunked.resident_masters if act.chunked is not None else 0.0
    if stuck:
        notes.append(
            f"offload_master_for_forward=False: the chunked offload's masters / PAO remainders ({stuck / GIB:.2f} GiB "
            "per GPU) stay on the GPU through rollout, the log-prob forwards and the weight sync (Megatron Lite "
            "before ISEEKYAN/Megatron-LM#232, merged 2026-09-20: offload_optimizer() skipped offload_for_forward()); "
            "a build with it frees them"
        )
    base_host = {"process": r.host_process_gib * GIB}
    base_host.update({f"actor_{k}": v for k, v in act.host.items()})
    if ref_host:
        base_host["ref_offloaded_params"] = ref_host
    sync_every, sync_phase = sync_host(spec, act.params, o, r)
    base_host.update(sync_every)
    return Step(
        spec=spec,
        plan=plan,
        training=o,
        rollout=r,
        actor=act,
        engine=eng,
        framework=framework,
        ref_weights=ref_w,
        ref_gpu=ref_gpu,
        idle_other=act.idle_gpu - (0.0 if o.param_offload else act.params),  # its state other than its weights
        awake=awake,
        stays=stays,
        kept=kept,
        base_host=base_host,
        sleeping_host={"engine_weights_offloaded": engine_host} if engine_host else {},
        forward=megatron_forward(spec, plan, o, f, r.seq_tokens, "old_log_prob"),
        ref_forward=megatron_forward(spec, plan, o, f, r.seq_tokens, "ref") if r.ref == "colocated" else None,
        notes=notes,
        resident_masters=stuck,
        always={"sibling_contexts": siblings} if siblings else {},
        extra_host=sync_phase,
        resync=export_peak(spec, plan, o, r),
        actor_moments=moments,
    )


def _phases(step: Step, logged_step: int | None = None) -> dict:
    """Phase name -> :class:`Phase`: every registered phase the step has, in order (one entry each), with the state
    present at step ``logged_step`` (None: the steady state; :mod:`mlite.memory.rl_lazy`)."""
    step = replace(step, logged_step=check_logged_step(logged_step))
    ph = {}
    for name, entry in PHASE_REGISTRY.items():
        if entry.when(step):
            host = dict(step.base_host, **entry.host(step), **step.extra_host.get(name, {}))
            gpu = {**entry.gpu(step), **step.always}
            ph[name] = Phase(
                name=name, gpu={k: v for k, v in gpu.items() if v}, host={k: v for k, v in host.items() if v}
            )
    return ph


def _generation_waves(step: Step, kvd: dict) -> str | None:
    """The warning when an engine gets more sequences than it runs at once (KV capacity or ``max_num_seqs``)."""
    r, plan = step.rollout, step.plan
    instances = plan.ngpu // r.tensor_model_parallel_size
    demand = math.ceil(r.train_batch_size * r.n / instances)
    cap = min(kvd["max_concurrent_seqs"], r.max_num_seqs)
    if step.engine.kv <= 0 or demand <= cap:
        return None
    return (
        f"each of the {instances} engine {'instances' if r.data_parallel_size == 1 else 'data-parallel ranks'}"
        f" gets {demand} sequences of P + R = "
        f"{r.seq_tokens} tokens but runs at most {cap} at once (KV holds "
        f"{kvd['max_concurrent_seqs']}, max_num_seqs {r.max_num_seqs}): generation runs in waves"
        + (
            f" and {r.name} preempts or queues requests"
            if kvd["max_concurrent_seqs"] < min(demand, r.max_num_seqs)
            else ""
        )
    )


def rl_estimate(
    spec,
    plan,
    training: TrainingOptions | None = None,
    rollout: RolloutOptions | None = None,
    fsdp: FsdpOptions | None = None,
    critic: CriticOptions | None = None,
) -> RLEstimate:
    """Phase-by-phase memory of one colocated verl step for ``spec`` on ``plan`` (the actor's mesh), its phases
    those of :data:`~mlite.memory.rl_phases.PHASE_REGISTRY`; the verdicts hold over every phase. ``fsdp`` with
    ``strategy`` fsdp / fsdp2: the actor and reference are verl's FSDP workers (:mod:`mlite.memory.rl_fsdp_step`;
    ``plan`` then gives the world size and must have TP = PP = CP = EP = 1)."""
    o = training or TrainingOptions()
    r = rollout or RolloutOptions()
    if not plan.valid:
        raise MliteError("invalid mesh: " + plan.errors[0].message)
    _check_mesh(spec, plan, r)
    f = fsdp or FsdpOptions()
    c = critic or CriticOptions()
    cs = critic_state(spec, plan.ngpu, o, c, use_dynamic_bsz=f.use_dynamic_bsz, seq_tokens=r.seq_tokens, fsdp=f)
    held = cs.at_engine_start if cs is not None else 0.0  # built before the actor and the engine (init_workers)
    step = fsdp_step(spec, plan, o, r, f, held) if f.is_fsdp else _step(spec, plan, o, r, f, held)
    if cs is not None:
        step.critic = cs
        step.base_host.update({f"critic_{k}": v for k, v in cs.rank.host.items()})
    step.notes.extend(c.notes())
    ph = _phases(step)
    eng = step.engine
    errors, warnings = [*eng.errors, *sync_refusals(step.training, r)], [*eng.warnings, *step.notes]
    usable = o.gpu_memory_gib * GIB * (1 - o.headroom)
    g = lambda x: f"{x / GIB:.1f} GiB"
    per_node = min(o.gpus_per_node, plan.ngpu)
    host_per_node = max(p.host_total for p in ph.values()) * per_node
    if r.host_mem_gib is not None and host_per_node > r.host_mem_gib * GIB:
        worst = max(ph.values(), key=lambda p: p.host_total).name
        errors.append(
            f"host RAM per node {g(host_per_node)} ({worst} phase, {per_node} GPU processes) exceeds "
            f"--host-mem {r.host_mem_gib:g} GiB: the Ray node would be OOM-killed; offload less or use "
            f"sleep level 2"
        )
    est = RLEstimate(
        model=spec.name,
        training=o,
        rollout=r,
        engine=eng,
        phases=ph,
        usable=usable,
        host_per_node=host_per_node,
        gpus_per_node=per_node,
        errors=errors,
        warnings=warnings,
        fsdp=f,
        resync=step.resync,
        critic=step.critic,
        step=step,
    )
    if "weight_sync" in ph:
        short = resync_verdict(ph["weight_sync"].gpu_total, usable, step.resync)
        if short:
            warnings.append(short)
    waves = _generation_waves(step, est.kv_cache())
    if waves:
        warnings.append(waves)
    if r.tensor_model_parallel_size > o.gpus_per_node:
        warnings.append(f"rollout TP {r.tensor_model_parallel_size} spans nodes ({o.gpus_per_node} GPUs per node)")
    for name, p in ph.items():
        if p.gpu_total > usable:
            warnings.append(
                f"{name} does not fit: {g(p.gpu_total)} per GPU, usable {g(usable)} "
                f"({o.gpu_memory_gib:g} GiB less {o.headroom:.0%} headroom)"
            )
    return est


__all__ = ["PHASES", "Phase", "RLEstimate", "rl_estimate"]
