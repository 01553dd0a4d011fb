"""The time of one colocated verl GRPO / PPO step, phase by phase (the phases of ``mlite rl-memory``).

* ``generate`` (verl ``timing_s/gen``): the rollout engines, one per ``rollout TP`` GPUs, each with ``B x K /
  replicas`` sequences. At once an engine runs ``min(max_num_seqs, KV capacity / (P + R), its sequences)`` of them
  (the KV capacity is ``mlite rl-memory``'s); each wave is a prefill of ``P`` tokens per sequence (compute-bound,
  at the GEMM rate) and ``R`` decode steps. A decode step reads the GPU's weight shard (of the routed experts only
  those the batch touches: ``E x (1 - (1 - k/E)^b)``) and the batch's KV at the mean context ``P + R/2``, at the HBM
  rate, or computes ``2 x active params x b``, whichever is longer, plus two all-reduces per layer at TP > 1 and the
  step's launches (one CUDA graph, or every kernel with ``enforce_eager``). Every response is assumed to run to
  ``R`` tokens (the upper bound: verl stops at EOS).
* ``old_log_prob`` and ``ref`` (``timing_s/old_log_prob``, ``timing_s/ref``): forward-only passes of the actor's
  mesh over the ``B x K`` sequences of ``P + R`` tokens (:func:`mlite.time.model.forward_time`); the reference's
  offloaded weights come up over PCIe first.
* ``update_actor`` (``timing_s/update_actor``): optimizer steps of ``micro_batch_size x num_microbatches x DP``
  sequences (the PPO mini-batch) until the ``B x K`` sequences are used, each :func:`mlite.time.predict`'s step.
* ``update_weights``: each GPU's engine shard in ``update_weights_bucket_megabytes`` buckets over NVLink.
* ``context_offload``: the actor state verl moves to the host and back around the rollout (``param_offload``,
  ``optimizer_offload``, ``grad_offload``), over PCIe both ways.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

VERL_TIMING = {
    "generate": "timing_s/gen",
    "old_log_prob": "timing_s/old_log_prob",
    "ref": "timing_s/ref",
    "update_actor": "timing_s/update_actor",
    "update_weights": "timing_s/update_weights",
    "context_offload": None,
}
"""Phase -> the verl ``timing_s`` key that measures it (None: verl folds it into other phases)."""


@dataclass
class RLStepTime:
    """The predicted RL step, phase by phase."""

    phases: dict
    """Phase (:data:`VERL_TIMING`) -> seconds."""
    step_s: float
    """Seconds of the whole RL step (the phases run one after another)."""
    generation: dict
    """How generation was sized: replicas, concurrent sequences, waves, decode step seconds, prefill seconds."""
    update_steps: int
    """Optimizer steps of the actor update."""
    assumptions: list = field(default_factory=list)
    """What the prediction assumes."""

    def to_dict(self) -> dict:
        return {
            "rl_step_s": self.step_s,
            "rl_phases": dict(self.phases),
            "verl_timing_keys": {k: v for k, v in VERL_TIMING.items() if k in self.phases},
            "generation": dict(self.generation),
            "update_steps": self.update_steps,
            "rl_assumptions": list(self.assumptions),
        }


def _touched_experts(spec, batch: float) -> float:
    """Share of a layer's routed experts a decode batch of ``batch`` tokens touches (uniform routing)."""
    e, k = spec.num_experts, spec.moe_router_topk
    if not e:
        return 1.0
    return 1.0 - (1.0 - k / e) ** max(batch, 1.0)


def _decode_step_s(hw, spec, r, batch: float, context: float, kv_bytes_per_token: float) -> float:
    """One decode step of ``batch`` sequences at ``context`` tokens on one GPU of a TP group."""
    from ..memory.rl_engine import rollout_weights
    from ..models.flops import flops_per_token

    tp = r.tensor_model_parallel_size
    weights = rollout_weights(spec, r)
    experts = spec.components.get("routed_experts", 0) * 2 / (tp * r.data_parallel_size)
    read = weights - experts * (1.0 - _touched_experts(spec, batch)) + batch * context * kv_bytes_per_token
    mem_s = read / (hw.hbm_bytes_per_s * hw.elementwise_efficiency)
    comp_s = (
        flops_per_token(spec, int(context), training=False) * batch / tp / (hw.peak_bf16_flops * hw.gemm_efficiency)
    )
    layers = spec.num_layers
    comm = 0.0
    if tp > 1:
        from .comm import ranks_per_node, ring_s

        crosses = tp > hw.gpus_per_node
        loc = ranks_per_node(tp, 1, hw.gpus_per_node)
        comm = 2 * layers * ring_s(hw, batch * spec.hidden_size * 2, tp, crosses, "all_reduce", loc)
    launches = (layers * 20 if r.enforce_eager else 4) * hw.kernel_launch_s
    return max(mem_s, comp_s) + comm + launches


def rl_step_time(spec, plan, training, rollout, hardware="H200", knobs=None) -> RLStepTime:
    """The predicted colocated RL step of ``spec`` with the actor on ``plan`` and ``rollout``'s engines."""
    from ..memory.rl import rl_estimate
    from ..memory.rl_engine import rollout_weights
    from ..models.flops import flops_per_token
    from ..units import GIB
    from .hardware import load_hardware
    from .model import forward_time, predict

    hw = load_hardware(hardware)
    o, r = training, rollout
    est = rl_estimate(spec, plan, o, r)
    kv = est.kv_cache()
    P, R = r.prompt_length, r.response_length
    seqs = r.train_batch_size * r.n
    tp = r.tensor_model_parallel_size
    replicas = max(1, plan.ngpu // tp)
    per_replica = math.ceil(seqs / replicas)
    capacity = kv["max_concurrent_seqs"] or 1
    conc = max(1, min(r.max_num_seqs, capacity, per_replica))
    waves = math.ceil(per_replica / conc)
    prefill = flops_per_token(spec, P, training=False) * conc * P / tp / (hw.peak_bf16_flops * hw.gemm_efficiency)
    step = _decode_step_s(hw, spec, r, conc, P + R / 2, kv["bytes_per_token"])
    gen = waves * (prefill + R * step)
    # the log-prob forwards and the update run on the actor's mesh over B x K sequences of P + R tokens
    per_dp = math.ceil(seqs / plan.dp)
    fwd_o = replace(o, num_microbatches=max(1, math.ceil(per_dp / o.micro_batch_size)))
    fwd = sum(forward_time(spec, plan, fwd_o, hw, knobs).values())
    from ..memory import estimate

    w = estimate(spec, plan, o, explain=False).worst
    phases = {"generate": gen, "old_log_prob": fwd}
    if r.ref != "none":
        # an offloaded reference's bf16 shard comes up over PCIe before its forward
        phases["ref"] = fwd + (w.local_params * 2 / hw.pcie_bytes_per_s if r.ref_param_offload else 0.0)
    mini = o.micro_batch_size * o.num_microbatches * plan.dp
    steps = max(1, math.ceil(seqs / mini))
    phases["update_actor"] = steps * predict(spec, plan, o, hw, knobs).step_s
    shard = rollout_weights(spec, r)
    buckets = math.ceil(shard * tp / (r.update_weights_bucket_megabytes * 2**20))
    phases["update_weights"] = shard / (hw.nvlink_bytes_per_s * hw.comm_efficiency) + buckets * hw.comm_latency_s
    moved = (w.params if o.param_offload else 0.0) + (w.grads if o.grad_offload else 0.0)
    moved += (w.master + w.exp_avg + w.exp_avg_sq) if o.optimizer_offload else 0.0
    if moved:
        phases["context_offload"] = 2 * moved / hw.pcie_bytes_per_s
    assumptions = [
        f"generation: {replicas} engine replicas of TP {tp}, {conc} sequences at once ({waves} wave(s)), every "
        f"response {R} tokens; decode steps at the mean context {P + R // 2} tokens",
        "decode reads the weight shard and the batch's KV at the HBM rate (routed experts: those the batch touches)",
        "the phases run one after another (verl's synchronous colocated trainer); reward and advantage time not counted",
        f"update: {steps} optimizer step(s) of {mini} sequences (micro_batch_size x num_microbatches x DP)",
    ]
    gen_info = {
        "replicas": replicas,
        "sequences_per_replica": per_replica,
        "concurrent_sequences": conc,
        "waves": waves,
        "prefill_s": prefill,
        "decode_step_s": step,
        "kv_capacity_seqs": kv["max_concurrent_seqs"],
        "weights_gib_per_gpu": shard / GIB,
    }
    return RLStepTime(phases, sum(phases.values()), gen_info, steps, assumptions)
