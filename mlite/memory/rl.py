"""``rl_estimate(spec, plan, training, rollout) -> RLEstimate``: GPU and host memory of one verl GRPO/PPO step, phase
by phase, with the actor, a colocated reference and a vLLM or SGLang rollout engine on the same GPUs.

The actor's state comes from :func:`mlite.memory.estimate` (called, not copied): ``idle_gpu`` is what its runtime
context offload leaves on the GPU outside its own phases, ``peak`` + framework is the update step. The engine's
start-up is :mod:`mlite.memory.rl_engine`, its KV bytes :mod:`mlite.memory.rl_kv`. What each phase holds (verl
``main``; file names relative to the verl repository):

- ``rollout``: the awake engine (weights at its TP, KV cache, profile activations, CUDA graphs, overhead), the
  actor's idle state, the reference's weights unless offloaded. The engine is started after the actor is built
  and offloaded (``init_model``), so "free at rollout start" is the device less that resident state.
- after generation verl sleeps the engine (``vLLMHttpServer.sleep``, ``verl/workers/rollout/vllm_rollout/
  vllm_async_server.py``): nothing happens unless ``free_cache_engine``; hybrid mode sleeps at level 2
  (``_resolve_sleep_level``: 1 with MTP rollout or a LoRA adapter), colocated mode at level 1. vLLM's level 1 copies
  the weights to host RAM and discards the KV cache, level 2 discards both (``Worker.sleep`` in
  ``vllm/v1/worker/gpu_worker.py``: ``CuMemAllocator.sleep(offload_tags=("weights",))`` at level 1). SGLang
  (``SGLangHttpServer.sleep``, ``verl/workers/rollout/sglang_rollout/async_sglang_server.py``) releases the KV cache
  and the weights in hybrid and colocated mode alike, and only the KV cache with a LoRA adapter ("sleep_level=1 ...
  in SGLang never released weights", ``update_weights`` in ``verl/workers/engine_workers.py``); ``--sleep-level 1``
  asks for that. CUDA graphs and the engine's NCCL buffers are outside the sleep pools and stay.
- ``old_log_prob``: the actor's weights loaded (param_offload loads them for the forward), its other state as the
  offload flags leave it, one forward micro-batch (no autograd state: one layer's working set and the logits).
- ``ref``: the reference's weights on the GPU, the actor back to its idle state, one forward micro-batch.
- ``actor_update``: today's training estimate (everything loaded), plus what the sleeping engine keeps.
- ``weight_sync`` (``ActorRolloutRefWorker.update_weights``, ``verl/workers/engine_workers.py``): the engine's
  weights are woken first (``resume(tags=["weights"])``), the actor's weights are on the GPU to be sent in buckets
  of ``update_weights_bucket_megabytes`` (one full tensor gathered at a time), then the actor is offloaded and only
  then the KV cache is woken (``resume(tags=["kv_cache"])``), so weights and KV are not both held at this peak.
  With ``free_cache_engine=False`` the KV cache never left.

Host RAM per GPU process: a base (``host_process_gib``), the actor's offloaded state (pinned buffers kept across
phases), the reference's offloaded weights, and at sleep level 1 the vLLM weights while they are on the host.
Host per node multiplies by the GPU processes of one node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..errors import MliteError
from .estimate import GIB, estimate
from .optimizer import state_bytes
from .options import TrainingOptions
from .rl_engine import EngineMemory, start_engine
from .rl_kv import FULL_KINDS
from .rl_options import RolloutOptions

PHASES = ("rollout", "old_log_prob", "ref", "actor_update", "weight_sync")


@dataclass(kw_only=True)
class Phase:
    """What one phase holds on one GPU and in its process's host RAM."""

    name: str
    """One of :data:`PHASES`."""
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

    def to_dict(self) -> dict:
        """The ``mlite rl-memory --json`` document (bytes as integers)."""
        phases = {
            n: {
                "gpu": round(p.gpu_total),
                "host_per_gpu": round(p.host_total),
                "parts": {k: round(v) for k, v in p.gpu.items()},
            }
            for n, p in self.phases.items()
        }
        kv = {k: v for k, v in self.kv_cache().items() if k != "state_bytes_per_seq"}
        return {
            "phases": phases,
            "peak_phase": self.peak_phase,
            "fits": self.fits,
            "kv_cache": kv,
            "host_per_node": round(self.host_per_node),
            "warnings": list(self.warnings),
            "errors": list(self.errors),
        }


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
    kv = spec.num_key_value_heads
    full = any(layer.attention in FULL_KINDS for layer in spec.main_layers)
    if full and kv and kv % tp and tp % kv:
        raise MliteError(
            f"--rollout-tp {tp} and the {kv} KV heads of {spec.name}: one must divide the other (vLLM and SGLang "
            f"split KV heads over TP or replicate them past it); use a TP that divides {kv} or a multiple of it"
        )


def _forward_bytes(spec, plan, o: TrainingOptions) -> float:
    """One forward-only micro-batch (``compute_log_prob``): no autograd state is kept, so one layer's working set
    (the estimate's full-recompute rebuild of one layer), the layer inputs it keeps with full recompute (an upper
    bound) and the logits."""
    fwd = estimate(spec, plan, replace(o, recompute="full", num_microbatches=1), explain=False).worst
    return fwd.activation_total + fwd.transients.get("recompute_layer", 0.0)


def _largest_tensor(spec, bytes_per: int) -> float:
    groups = list(spec.pre) + list(spec.post) + [g for layer in spec.main_layers for g in layer.groups]
    return max((g.numel for g in groups), default=0) * bytes_per


def rl_estimate(
    spec, plan, training: TrainingOptions | None = None, rollout: RolloutOptions | None = None
) -> RLEstimate:
    """Phase-by-phase memory of one colocated verl step for ``spec`` on ``plan`` (the actor's mesh)."""
    o = training or TrainingOptions()
    r = rollout or RolloutOptions()
    if not plan.valid:
        raise MliteError("invalid mesh: " + plan.errors[0].message)
    _check_mesh(spec, plan, r)
    act = estimate(spec, plan, o, explain=False).worst
    device = o.gpu_memory_gib * GIB
    usable = device * (1 - o.headroom)
    framework = sum(act.other.values())
    ref_on = r.ref == "colocated"
    # the reference: the actor's weights in its layout, in bf16 (verl builds it in bf16 even when the FSDP actor
    # keeps fp32 parameters: ``_build_model_optimizer`` in verl/workers/fsdp_workers.py @ 14667609; on main the
    # forward-only engine, verl/workers/engine/fsdp/transformer_impl.py), no grads nor optimizer
    ref_w = act.params * 2 / state_bytes(o).param if ref_on else 0.0
    ref_gpu = ref_w if not r.ref_param_offload else 0.0
    ref_host = ref_w if r.ref_param_offload else 0.0
    # actor state other than its weights left on the GPU between its phases
    idle_other = act.idle_gpu - (0.0 if o.param_offload else act.params)
    resident = act.idle_gpu + ref_gpu + framework
    eng = start_engine(spec, r, device, resident)
    errors, warnings = list(eng.errors), list(eng.warnings)

    # what the sleeping engine keeps between generation and the next weight sync
    level = r.resolved_sleep_level
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
    engine_host = 0.0
    if not r.free_cache_engine:
        kept = dict(awake)
        warnings.append(
            "free_cache_engine=False: the engine keeps its weights and KV cache on the GPU through "
            "old_log_prob, ref, the update and the weight sync"
        )
    elif r.name == "sglang" and (r.lora_as_adapter or r.sleep_level == 1):
        kept = {"engine_weights": eng.weights, **stays}
    else:
        kept = dict(stays)
        if r.name == "vllm" and level == 1:
            engine_host = eng.weights
    base_host = {"process": r.host_process_gib * GIB}
    base_host.update({f"actor_{k}": v for k, v in act.host.items()})
    if ref_host:
        base_host["ref_offloaded_params"] = ref_host

    def phase(name, gpu, host_extra=None):
        gpu = {k: v for k, v in gpu.items() if v}
        host = dict(base_host, **(host_extra or {}))
        return Phase(name=name, gpu=gpu, host={k: v for k, v in host.items() if v})

    sleeping_host = {"engine_weights_offloaded": engine_host} if engine_host else {}
    fwd = _forward_bytes(spec, plan, o)
    ph = {
        "rollout": phase(
            "rollout", {**awake, "actor_resident": act.idle_gpu, "ref_params": ref_gpu, "framework": framework}
        ),
        "old_log_prob": phase(
            "old_log_prob",
            {
                **kept,
                "actor_params": act.params,
                "actor_resident": idle_other,
                "forward_activations": fwd,
                "ref_params": ref_gpu,
                "framework": framework,
            },
            sleeping_host,
        ),
    }
    if ref_on:
        ph["ref"] = phase(
            "ref",
            {
                **kept,
                "actor_resident": act.idle_gpu,
                "ref_params": ref_w,
                "forward_activations": fwd,
                "framework": framework,
            },
            sleeping_host,
        )
    ph["actor_update"] = phase(
        "actor_update",
        {**kept, "actor_training_peak": act.peak, "ref_params": ref_gpu, "framework": framework},
        sleeping_host,
    )
    bucket = min(r.update_weights_bucket_megabytes * 1024**2, spec.total * 2)  # a small model fills less than one
    sync_kv = {"kv_cache": max(0.0, eng.kv)} if not r.free_cache_engine and eng.kv > 0 else {}
    sync_engine = {"engine_weights": eng.weights, **stays, **sync_kv} if eng.kv > 0 else dict(awake)
    ph["weight_sync"] = phase(
        "weight_sync",
        {
            **sync_engine,
            "actor_params": act.params,
            "actor_resident": idle_other,
            "sync_bucket": bucket,
            "gathered_tensor": _largest_tensor(spec, 2),
            "ref_params": ref_gpu,
            "framework": framework,
        },
    )
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
    instances = plan.ngpu // r.tensor_model_parallel_size
    demand = math.ceil(r.train_batch_size * r.n / instances)
    kvd = RLEstimate(
        model=spec.name,
        training=o,
        rollout=r,
        engine=eng,
        phases=ph,
        usable=usable,
        host_per_node=host_per_node,
        gpus_per_node=per_node,
    ).kv_cache()
    if eng.kv > 0:
        cap = min(kvd["max_concurrent_seqs"], r.max_num_seqs)
        if demand > cap:
            warnings.append(
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
    if r.tensor_model_parallel_size > o.gpus_per_node:
        warnings.append(f"rollout TP {r.tensor_model_parallel_size} spans nodes ({o.gpus_per_node} GPUs per node)")
    for name, p in ph.items():
        if p.gpu_total > usable:
            warnings.append(
                f"{name} does not fit: {g(p.gpu_total)} per GPU, usable {g(usable)} "
                f"({o.gpu_memory_gib:g} GiB less {o.headroom:.0%} headroom)"
            )
    return RLEstimate(
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
    )
