"""The :class:`~mlite.memory.rl_phases.Step` of an RL step whose actor and reference are verl's FSDP / FSDP2
workers (:mod:`mlite.memory.rl_fsdp` holds the byte rules and their sources): the same phases as the Megatron path
(:data:`~mlite.memory.rl_phases.PHASE_REGISTRY`), fed with the FSDP actor, the reference's CPU-offloaded shards and
the FSDP forward micro-batches.

What differs from :func:`mlite.memory.rl._step` (the Megatron path):

- ``actor``: :func:`~mlite.memory.rl_fsdp.fsdp_actor` (its ``idle_gpu`` follows ``fsdp_config.param_offload`` /
  ``optimizer_offload`` / ``offload_policy``, not the training options' Megatron offload flags);
- ``ref_weights``: what the reference holds on the GPU during its forward (its gathered root and units, bf16);
  ``ref_gpu`` is 0 (verl forces its CPU offload), its shards are host bytes (``ref_offloaded_params``);
- ``forward``: one old_log_prob micro-batch with the entropy and the gathered units; ``ref_forward`` the
  reference's, without the entropy (its units are in ``ref_weights``);
- ``training``: the training options as verl's FSDP worker runs them (:func:`fsdp_view`: ``optimizer=fsdp2`` with
  the ``model_dtype`` parameters), so that the weight-sync rules of :mod:`mlite.memory.rl_resync` (the FSDP
  ``full_tensor()`` export peak, the delta snapshot's shard, the ``delta_sharded`` refusal) see an FSDP actor.

The engine's parts (sibling contexts, the sleep residue, what the sleeping engine keeps) follow
:func:`mlite.memory.rl._step`'s rules, the same calls.
"""

from __future__ import annotations

from ..errors import MliteError
from ..options import TrainingOptions
from .estimate import GIB
from .rl_engine import start_engine
from .rl_fsdp import (
    DTYPE_BYTES,
    FsdpOptions,
    forward_only,
    fsdp_actor,
    fsdp_group,
    fsdp_ref,
    gathered_units,
    passes,
    trained_params,
)
from .rl_lazy import at_engine_start, moments_idle
from .rl_options import RolloutOptions
from .rl_phases import Step
from .rl_resync import export_peak, sync_host

_PARAM_DTYPES = {
    "fp32": "fp32",
    "float32": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "bf16",
    "float16": "bf16",
}
"""``model_dtype`` -> the training options' ``param_dtype`` (fp16 counted as bf16: the same bytes)."""


def fsdp_view(o: TrainingOptions, f: FsdpOptions) -> TrainingOptions:
    """The training options as verl's FSDP worker runs them: sharded (``optimizer=fsdp2``), parameters in
    ``model_dtype``, none of the Megatron offload flags (the FSDP flags are :class:`FsdpOptions`'s)."""
    from dataclasses import replace

    return replace(
        o,
        optimizer="fsdp2",
        param_dtype=_PARAM_DTYPES[f.model_dtype],
        param_offload=False,
        optimizer_offload=False,
        grad_offload=False,
    )


def check_fsdp_plan(plan, f: FsdpOptions) -> None:
    """verl's FSDP workers have no Megatron mesh: TP, PP, CP and EP must be 1 (SP is Ulysses,
    ``ulysses_sequence_parallel_size``)."""
    p = plan.parallel
    for name, flag in (("tp", "--tp"), ("pp", "--pp"), ("cp", "--cp"), ("ep", "--ep")):
        if getattr(p, name) != 1:
            raise MliteError(
                f"{flag} {getattr(p, name)} with actor.strategy={f.strategy}: verl's FSDP workers shard over "
                "fsdp_config.fsdp_size only (verl/workers/fsdp_workers.py @ v0.7.0); drop the flag, or use "
                "--ulysses-sp for sequence parallelism"
            )


def fsdp_step(spec, plan, o: TrainingOptions, r: RolloutOptions, f: FsdpOptions, critic_idle: float = 0.0) -> Step:
    """What the phases share, for an FSDP actor and reference (see the module docstring)."""
    check_fsdp_plan(plan, f)
    world = plan.ngpu
    share = r.response_length / r.seq_tokens
    act = fsdp_actor(spec, world, o, f, r.seq_tokens, share, r.verl_version)
    device = o.gpu_memory_gib * GIB
    framework = sum(act.other.values())
    ref_gpu_fwd, ref_host = fsdp_ref(spec, world, f) if r.ref == "colocated" else (0.0, 0.0)
    siblings = r.sibling_contexts * r.sibling_context_gib * GIB  # other processes' contexts on the first GPU
    moments = moments_idle(act, f.offload_policy or f.optimizer_offload)  # AdamW's, from the first step()
    eng = start_engine(spec, r, device, at_engine_start(act.idle_gpu, moments) + framework + siblings + critic_idle)
    awake = {
        "engine_weights": eng.weights,
        "kv_cache": max(0.0, eng.kv),
        "engine_activations": eng.activations,
        "engine_overhead": eng.overhead,
        "cuda_graphs": eng.cuda_graphs,
    }
    if eng.kv <= 0:
        awake = {"engine_share": eng.share, "cuda_graphs": eng.cuda_graphs}
    stays = {"engine_overhead": eng.overhead, "cuda_graphs": eng.cuda_graphs}
    if r.sleep_residue_gib is not None and r.name == "vllm":  # the measured flat residue instead of the parts
        stays = {"engine_sleep_residue": r.sleep_residue_gib * GIB}
    notes = []
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
    base_host = {"process": r.host_process_gib * GIB}
    base_host.update({f"actor_{k}": v for k, v in act.host.items()})
    if ref_host:
        base_host["ref_offloaded_params"] = ref_host
    view = fsdp_view(o, f)
    shard = trained_params(spec) * DTYPE_BYTES[f.model_dtype] / fsdp_group(f, world)
    sync_every, sync_phase = sync_host(spec, shard, view, r)
    base_host.update(sync_every)
    tok = passes(f, o, r.seq_tokens)
    units = gathered_units(spec, f)
    on_host_p = f.offload_policy or f.param_offload
    idle_other = act.idle_gpu - (0.0 if on_host_p else act.params)
    return Step(
        spec=spec,
        plan=plan,
        training=view,
        rollout=r,
        actor=act,
        engine=eng,
        framework=framework,
        ref_weights=ref_gpu_fwd,
        ref_gpu=0.0,
        idle_other=idle_other,
        awake=awake,
        stays=stays,
        kept=kept,
        base_host=base_host,
        sleeping_host={"engine_weights_offloaded": engine_host} if engine_host else {},
        forward=units
        + forward_only(spec, f, tok.old_log_prob, entropy=True, response_share=share, verl_version=r.verl_version),
        notes=notes,
        ref_forward=forward_only(spec, f, tok.ref, entropy=False, response_share=share, verl_version=r.verl_version),
        strategy=f.strategy,
        always={"sibling_contexts": siblings} if siblings else {},
        extra_host=sync_phase,
        resync=export_peak(spec, plan, view, r),
        actor_moments=moments,
    )


__all__ = ["check_fsdp_plan", "fsdp_step", "fsdp_view"]
