"""``RolloutOptions``: the rollout engine, its memory knobs and the RL batch of one verl GRPO/PPO step.

Field names follow verl's ``actor_rollout_ref.rollout.*`` / ``data.*`` keys (their rows, flags and keys:
:data:`mlite.options.rollout.ROLLOUT`; :mod:`mlite.memory.rl_keys` reads and writes them);
the defaults are verl's (``verl/trainer/config/rollout/rollout.yaml``). The figures marked "documented guess" are
not in any engine's code: they are what the engines' start-up logs typically show, kept as fields so that a
measured figure can replace them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import MliteError
from ..options.rollout import (
    CHECKPOINT_BACKENDS,
    DEFAULT_VERL_VERSION,
    ENGINE_PLACEMENTS,
    EXPERT_GATHERS,
    REF_MODES,
    RESYNC_GATHERS,
    ROLLOUT_MODES,
    ROLLOUT_NAMES,
    TRAINER_MODES,
)


@dataclass(kw_only=True)
class RolloutOptions:
    """The rollout engine and the RL batch (verl names)."""

    name: str = "vllm"
    """Rollout engine (``actor_rollout_ref.rollout.name``): ``vllm`` or ``sglang``."""
    tensor_model_parallel_size: int = 2
    """Rollout TP (``rollout.tensor_model_parallel_size``): GPUs that split attention, dense layers and the KV heads."""
    data_parallel_size: int = 1
    """``rollout.data_parallel_size``: data-parallel ranks of one engine (each its own KV cache and requests at TP);
    vLLM splits the routed experts over TP x DP (``FusedMoEParallelConfig.make``)."""
    expert_parallel_size: int = 1
    """``rollout.expert_parallel_size``: 1 (experts tensor-split) or TP x DP (expert parallel); the same bytes."""
    gpu_memory_utilization: float = 0.5
    """vLLM: share of TOTAL device memory for the whole instance; SGLang: ``mem_fraction_static``, the share of
    the memory FREE at engine start for weights + KV (verl passes this one key to both)."""
    free_cache_engine: bool = True
    """``rollout.free_cache_engine``: sleep the engine after generation (False keeps weights and KV on the GPU)."""
    sleep_level: int | None = None
    """Sleep level (1: weights to host RAM, KV freed; 2: both freed); None: verl's choice for ``mode``."""
    mode: str = "hybrid"
    """verl rollout mode: ``hybrid`` (sync GRPO/PPO, sleep level 2) or ``colocated`` (level 1)."""
    lora_as_adapter: bool = False
    """A LoRA adapter is synced instead of full weights (verl then uses sleep level 1)."""
    mtp_rollout: bool = False
    """MTP speculative decoding in the rollout (verl then uses sleep level 1)."""
    prompt_length: int = 512
    """``data.max_prompt_length`` (P)."""
    response_length: int = 512
    """``data.max_response_length`` (R)."""
    n: int = 1
    """``rollout.n``: responses per prompt (K; GRPO group size)."""
    train_batch_size: int = 256
    """``data.train_batch_size``: prompts per step (B); B x K sequences are generated."""
    max_model_len: int | None = None
    """``rollout.max_model_len``; None: the model's ``max_position_embeddings`` (what verl's vLLM server sets)."""
    max_num_batched_tokens: int = 8192
    """``rollout.max_num_batched_tokens``: tokens of vLLM's profiling forward (and SGLang's chunked prefill)."""
    max_num_seqs: int = 256
    """``rollout.max_num_seqs``: sequences one engine runs at once (the sampler is profiled at this batch)."""
    dtype: str = "bfloat16"
    """``rollout.dtype``: weight dtype of the engine."""
    kv_cache_dtype: str = "bfloat16"
    """KV-cache dtype (vLLM ``kv_cache_dtype``; ``fp8`` halves the bytes per token)."""
    enforce_eager: bool = False
    """``rollout.enforce_eager``: no CUDA graphs (no graph reserve)."""
    cuda_graph_gib: float = 1.0
    """CUDA-graph memory per GPU when graphs are captured (documented guess; vLLM logs it as "took X GiB")."""
    engine_overhead_gib: float = 1.0
    """Engine memory outside its weights, KV and activations: NCCL / custom all-reduce buffers, CUDA context of
    the engine's worker (documented guess)."""
    update_weights_bucket_megabytes: int = 2048
    """``rollout.checkpoint_engine.update_weights_bucket_megabytes``: one bucket of the weight sync."""
    ref: str = "colocated"
    """Reference model: ``colocated`` (on the actor's GPUs, used for the KL term) or ``none``."""
    ref_param_offload: bool = False
    """``actor_rollout_ref.ref.megatron.param_offload`` (or ``fsdp_config``): reference weights on the host
    between its forward passes."""
    host_process_gib: float = 4.0
    """Host RAM of one GPU's worker process before any offload (Python, CUDA/NCCL host state, Ray worker;
    documented guess)."""
    host_mem_gib: float | None = None
    """Host RAM per node to check against (``--host-mem``); None: not checked."""
    vllm_version: str = "latest"
    """vLLM release whose KV-budget rule applies (``0.8.5``, ``latest``) or a rule name of
    :data:`mlite.memory.rl_vllm.VLLM_KV_RULES`; verl has no key (the installed package decides)."""
    sibling_contexts: int = 0
    """CUDA contexts of OTHER processes on the engine's first GPU (a sibling worker that made a CUDA call before
    selecting its device lands on device 0): the DeepSeek-V4 TP16 job had 7 there. Counted on that GPU in every
    phase and in what is free when the engine starts."""
    sibling_context_gib: float = 2.51
    """GiB of one sibling context (measured, 2.51 GiB each: ISEEKYAN/Megatron-LM
    ``docs/research/ds4_vllm_tp16_rollout_memory.md`` @ 017aa887)."""
    sleep_residue_gib: float | None = None
    """GPU GiB a sleeping vLLM keeps (measured flat at 2,001 MiB per GPU: ``examples/verl/cumem_cycle_probe/``
    results CSV @ 6159f6b5); None: the engine's parts outside the sleep pools (``engine_overhead_gib`` +
    ``cuda_graph_gib``, 2 GiB by default, within 2.4 % of the measured figure)."""
    resync_gather: str = "mesh"
    """``mesh``: the weight resync gathers the largest tensor the actor mesh splits (TP: the full matrix, EP: all
    experts of a layer's weight); ``largest``: the model's largest tensor whatever the mesh (the kit before)."""
    resync_gather_copies: int = 2
    """Full copies of the gathered tensor alive at once (2: verl's list of all-gathered shards and their
    ``torch.cat``; 1: the kit before)."""
    resync_expert_gather: str = "dense"
    """``dense``: all experts of a layer's weight gathered at once (Megatron Lite's export); ``per_expert``: one
    local expert over EP at a time (verl's Megatron ``per_tensor_generator``)."""
    checkpoint_backend: str = "naive"
    """``rollout.checkpoint_engine.backend``: ``naive`` (colocated, one bucket) or ``nccl`` / ``delta`` /
    ``delta_sharded`` / ... (two buckets; the delta backends pin a host snapshot)."""
    trainer_mode: str = "sync"
    """``trainer.v1.trainer_mode``: ``sync``, ``colocate_async`` or ``separate_async`` (pi_old kept on the host)."""
    weight_block_size: int | None = None
    """Block edge of the rollout checkpoint's FP8 weights (its ``quantization_config.weight_block_size``; the rollout
    TP block rule of :mod:`mlite.models.quantized` checks it); 0: not block-quantized; None: the model config's
    ``quantization_config``, else 128 for DeepSeek-V4 (the fork's block-FP8 rollout checkpoint), else 0."""
    verl_version: str = DEFAULT_VERL_VERSION
    """The verl release whose ``perf/*`` memory metrics the prediction is of (:mod:`mlite.memory.rl_metrics`)."""
    engine_placement: str | None = None
    """Where the engine's memory shows in the actor process (``ENGINE_PLACEMENTS``); None: derived
    (:func:`mlite.memory.rl_metrics.placement_for`)."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise :class:`MliteError` naming the first bad field."""
        if self.name not in ROLLOUT_NAMES:
            raise MliteError(f"rollout name must be vllm or sglang, got {self.name!r}")
        if self.mode not in ROLLOUT_MODES:
            raise MliteError(f"rollout mode must be hybrid or colocated, got {self.mode!r}")
        if self.ref not in REF_MODES:
            raise MliteError(f"ref must be colocated or none, got {self.ref!r}")
        for f in (
            "tensor_model_parallel_size",
            "data_parallel_size",
            "expert_parallel_size",
            "prompt_length",
            "response_length",
            "n",
            "train_batch_size",
            "max_num_batched_tokens",
            "max_num_seqs",
            "update_weights_bucket_megabytes",
        ):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise MliteError(f"{f} must be a positive integer, got {v!r}")
        if self.max_model_len is not None and (not isinstance(self.max_model_len, int) or self.max_model_len < 1):
            raise MliteError(f"max_model_len must be a positive integer, got {self.max_model_len!r}")
        ep, tp_dp = self.expert_parallel_size, self.tensor_model_parallel_size * self.data_parallel_size
        if ep not in (1, tp_dp):
            raise MliteError(
                f"expert_parallel_size {ep} must be 1 or tensor_model_parallel_size x data_parallel_size = {tp_dp} "
                "(verl's RolloutConfig asserts EP = TP x DP)"
            )
        u = self.gpu_memory_utilization
        if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0.0 < float(u) <= 1.0:
            raise MliteError(f"gpu_memory_utilization / mem_fraction_static must be in (0, 1], got {u!r}")
        if self.sleep_level not in (None, 1, 2):
            raise MliteError(f"sleep_level must be 1 or 2, got {self.sleep_level!r}")
        for f in ("cuda_graph_gib", "engine_overhead_gib", "host_process_gib"):
            if not 0.0 <= float(getattr(self, f)) < float("inf"):
                raise MliteError(f"{f} must be a finite number >= 0, got {getattr(self, f)}")
        b = self.weight_block_size
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 0):
            raise MliteError(f"weight_block_size (--rollout-weight-block) must be an integer >= 0, got {b!r}")
        if self.host_mem_gib is not None and not 0.0 < float(self.host_mem_gib) < float("inf"):
            raise MliteError(f"host_mem_gib (--host-mem) must be a finite positive number, got {self.host_mem_gib}")
        from .rl_metrics import verl_release

        verl_release(self.verl_version)
        if self.engine_placement is not None and self.engine_placement not in ENGINE_PLACEMENTS:
            raise MliteError(
                f"engine_placement (--engine-placement) must be one of {', '.join(ENGINE_PLACEMENTS)}, "
                f"got {self.engine_placement!r}"
            )
        self._validate_budget()

    def _validate_budget(self) -> None:
        """The colocated-budget fields (vLLM version, sibling contexts, sleep residue, resync, sync backend)."""
        from .rl_vllm import kv_rule

        kv_rule(self.vllm_version)
        n = self.sibling_contexts
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise MliteError(f"sibling_contexts (--sibling-contexts) must be an integer >= 0, got {n!r}")
        c = self.resync_gather_copies
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise MliteError(f"resync_gather_copies (--resync-gather-copies) must be a positive integer, got {c!r}")
        for f in ("sibling_context_gib", "sleep_residue_gib"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not 0.0 <= float(v) < float("inf")):
                raise MliteError(f"{f} must be a finite number of GiB >= 0, got {v!r}")
        for f, allowed in (
            ("resync_gather", RESYNC_GATHERS),
            ("resync_expert_gather", EXPERT_GATHERS),
            ("checkpoint_backend", CHECKPOINT_BACKENDS),
            ("trainer_mode", TRAINER_MODES),
        ):
            if getattr(self, f) not in allowed:
                raise MliteError(f"{f} must be one of {', '.join(allowed)}, got {getattr(self, f)!r}")

    @property
    def resolved_sleep_level(self) -> int:
        """The level verl sleeps the engine at: hybrid mode 2, or 1 with MTP rollout or a LoRA adapter
        (``vLLMHttpServer._resolve_sleep_level``); colocated mode 1; ``sleep_level`` overrides."""
        if self.sleep_level is not None:
            return self.sleep_level
        if self.mode == "colocated" or self.mtp_rollout or self.lora_as_adapter:
            return 1
        return 2

    @property
    def seq_tokens(self) -> int:
        """Tokens of one generated sequence (P + R)."""
        return self.prompt_length + self.response_length

    def to_dict(self) -> dict:
        return asdict(self)


__all__ = ["REF_MODES", "ROLLOUT_MODES", "ROLLOUT_NAMES", "RolloutOptions"]
