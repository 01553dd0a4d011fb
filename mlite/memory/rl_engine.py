"""A rollout engine's start-up on one GPU: weights at its TP, reserves, the share it claims, the KV cache left.

vLLM (``vllm/v1/worker/gpu_worker.py``; today's rule, the older ones by ``vllm_version`` in :mod:`.rl_vllm`):
``init_device`` takes ``requested_memory = total x gpu_memory_utilization`` and refuses to start when the free
memory is smaller ("Free memory on device ... is less than desired GPU memory utilization"); ``determine_available_memory`` runs the profiling forward at
``max_num_batched_tokens`` and gives the KV cache ``total x gpu_memory_utilization - peak`` (peak = weights +
profile activations + memory outside torch); CUDA graphs are captured afterwards (``compile_or_warm_up_model``), so
they come on top of the share. ``vllm/v1/core/kv_cache_utils.py`` (``check_enough_kv_cache_memory``) refuses a KV
cache <= 0 ("No available memory for the cache blocks") or one that cannot hold one ``max_model_len`` request.

SGLang (``python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py``, ``profile_max_num_token``): the KV
pool is ``available_after_weights - free_at_start x (1 - mem_fraction_static)``, i.e. ``mem_fraction_static x
free_at_start - weights``: the fraction is of the memory free when the engine starts, and covers weights + KV;
the rest of the free memory is left for activations and CUDA graphs. A pool <= 0 stops it ("Not enough memory.
Please try to increase --mem-fraction-static").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..units import GIB
from .rl_kv import KVLayout, dtype_bytes, kv_layout
from .rl_options import RolloutOptions
from .rl_vllm import kv_rule


@dataclass(kw_only=True)
class EngineMemory:
    """One GPU of a rollout engine instance after start-up."""

    weights: float
    """Engine weights on this GPU (its TP shard)."""
    activations: float
    """Peak of the profiling forward (max_num_batched_tokens tokens) and the sampler at max_num_seqs."""
    overhead: float
    """Memory outside torch counted by the engine (NCCL, all-reduce buffers)."""
    cuda_graphs: float
    """CUDA-graph pool (0 with enforce_eager)."""
    share: float
    """What the engine claims: vLLM total x util; SGLang mem_fraction_static x free at start."""
    kv: float
    """KV-cache bytes on this GPU (negative: the engine would not start)."""
    layout: KVLayout
    """Bytes per token / per sequence."""
    free_at_start: float
    """Device memory free when the engine starts (after the actor and reference left their resident state)."""
    errors: list = field(default_factory=list)
    """Why the engine would not start (empty: it starts)."""
    warnings: list = field(default_factory=list)
    """What would hurt without stopping it."""

    @property
    def held(self) -> float:
        """GPU bytes the awake engine holds during generation."""
        if self.kv <= 0:
            return self.share
        return self.weights + self.kv + self.activations + self.overhead + self.cuda_graphs


def rollout_weights(spec, r: RolloutOptions) -> float:
    """Engine weight bytes on one GPU: the main model (and a vision tower if the config has one; MTP layers only
    with MTP rollout) in ``r.dtype``, split over the rollout TP (vocab-parallel embedding and head, column/row
    parallel layers) except the MoE router and the residual norms, which every rank holds whole (vLLM's
    ``ReplicatedLinear`` gate, ``RMSNorm``). The routed experts are split over TP x DP: vLLM's
    ``FusedMoEParallelConfig.make`` (``vllm/model_executor/layers/fused_moe/config.py``) flattens TP across DP for
    the MoE layers, tensor-split without expert parallelism and one expert group per rank with it."""
    c = spec.components
    replicated = c.get("router", 0) + c.get("norms", 0)
    experts = c.get("routed_experts", 0)
    params = spec.total - (0 if r.mtp_rollout else spec.mtp) + (spec.vision_params or 0)
    tp = r.tensor_model_parallel_size
    split = (params - replicated - experts) / tp + experts / (tp * r.data_parallel_size)
    return (split + replicated) * dtype_bytes(r.dtype)


def profile_activations(spec, r: RolloutOptions) -> float:
    """Estimated peak of vLLM's profiling run: the activations of one layer for ``max_num_batched_tokens`` tokens
    (hidden states, QKV, MLP / fused-MoE intermediate, split over TP) plus the sampler's fp32 logits, probs and
    log-probs for ``max_num_seqs`` rows (``_dummy_sampler_run``). An estimate: vLLM measures this at start-up."""
    tp = r.tensor_model_parallel_size
    t = r.max_num_batched_tokens
    ab = dtype_bytes(r.dtype)
    h = spec.hidden_size
    q = spec.num_attention_heads * spec.head_dim
    kv = 2 * spec.num_key_value_heads * spec.head_dim
    ffn = max(
        spec.ffn_hidden_size, spec.moe_router_topk * spec.moe_ffn_hidden_size + spec.shared_expert_ffn_hidden_size
    )
    layer = t * ab * (4 * h + (q + kv) / tp + 3 * ffn / tp)
    sampler = min(r.max_num_seqs, t) * spec.vocab_size * 4 * 3
    return layer + sampler


def start_engine(spec, r: RolloutOptions, device: float, resident: float) -> EngineMemory:
    """The engine on one GPU of ``device`` bytes where ``resident`` bytes are already held (actor, reference,
    the training process's CUDA context) when it starts."""
    layout = kv_layout(spec, r.tensor_model_parallel_size, r.kv_cache_dtype, r.dtype)
    weights = rollout_weights(spec, r)
    acts = profile_activations(spec, r)
    over = r.engine_overhead_gib * GIB
    graphs = 0.0 if r.enforce_eager else r.cuda_graph_gib * GIB
    free = device - resident
    u = float(r.gpu_memory_utilization)
    errors, warnings = [], []
    g = lambda x: f"{x / GIB:.1f} GiB"
    if r.name == "vllm":
        rule = kv_rule(r.vllm_version)
        share = u * device
        kv = share - weights - acts - over
        if rule.counts_other_processes:  # util x total is a cap on the whole device: what others hold counts
            kv -= resident
        elif share > free and rule.refuses_start:
            errors.append(
                f"vLLM would not start: gpu_memory_utilization {u} asks {g(share)} of {g(device)} but "
                f"only {g(free)} are free when the rollout starts (actor/ref leave {g(resident)} "
                f"resident); lower gpu_memory_utilization or offload the actor (param_offload, "
                f"optimizer_offload)"
            )
        elif share > free:
            errors.append(
                f"vLLM {r.vllm_version} ({rule.name} rule, {rule.source}) does not check the free memory at start: "
                f"its KV cache fills gpu_memory_utilization {u} x {g(device)} = {g(share)} but only {g(free)} are "
                f"free (actor/ref leave {g(resident)} resident), so allocating the KV cache runs out of memory; "
                f"lower gpu_memory_utilization or offload the actor"
            )
        # what is left after the KV cache: the global rule's budget already took the others' memory off the share
        left = device - share if rule.counts_other_processes else free - min(share, free)
        if left < graphs:
            warnings.append(
                f"CUDA graphs ({g(graphs)}) are captured after the KV cache, outside "
                f"gpu_memory_utilization; only {g(max(0.0, left))} are left for them"
            )
    else:
        share = u * max(free, 0.0)
        kv = share - weights
        reserve = max(free, 0.0) - share
        if reserve < acts + graphs + over:
            warnings.append(
                f"SGLang leaves (1 - mem_fraction_static) x free = {g(reserve)} for activations and "
                f"CUDA graphs, the estimate needs {g(acts + graphs + over)}: OOM risk while decoding"
            )
    if kv <= 0:
        what = "gpu_memory_utilization" if r.name == "vllm" else "mem_fraction_static"
        errors.append(
            f"{r.name} would not start: its share {g(share)} is smaller than its weights {g(weights)}"
            + (f" plus profile activations {g(acts)} and overhead {g(over)}" if r.name == "vllm" else "")
            + f" (no KV cache left); raise {what}, raise the rollout TP or lower max_num_batched_tokens"
        )
    else:
        mml = r.max_model_len or spec.max_position_embeddings or r.seq_tokens
        need = layout.seq_bytes(mml)
        if need > kv:
            msg = (
                f"the KV cache ({g(kv)}) cannot hold one max_model_len={mml} request ({g(need)}); lower "
                f"max_model_len (P + R = {r.seq_tokens}) or raise {'gpu_memory_utilization' if r.name == 'vllm' else 'mem_fraction_static'}"
            )
            (errors if r.name == "vllm" else warnings).append(
                ("vLLM would not start: " if r.name == "vllm" else "SGLang: ") + msg
            )
    return EngineMemory(
        weights=weights,
        activations=acts,
        overhead=over,
        cuda_graphs=graphs,
        share=share,
        kv=kv,
        layout=layout,
        free_at_start=free,
        errors=errors,
        warnings=warnings,
    )
