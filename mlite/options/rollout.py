"""The rollout options as rows of the options table: one :class:`~mlite.options.schema.Option` per field of
:class:`~mlite.memory.rl_options.RolloutOptions` (a test holds the two equal), with its ``mlite rl-memory`` flag,
help, RL-view label and verl key.

The verl keys are verl ``main``'s (``verl/trainer/config/rollout/rollout.yaml``, ``ppo_trainer.yaml``); a
:class:`~mlite.options.schema.Key` row is written and read (its ``aliases``: older spellings read, never written),
a :class:`~mlite.options.schema.Codec` row is read from several keys (:mod:`mlite.memory.rl_keys` holds the
readers). The same mapping serves every GRPO target (``mlite``, ``megatron``): the rollout keys do not depend on
the actor's backend. Derived from these rows: the flags of ``mlite rl-memory`` (:mod:`mlite.cli.rl_memory`), the
RL view's controls and command line (``widgets/rl_view.py``), the launcher overrides and their reading back
(:mod:`mlite.memory.rl_keys`).
"""

from __future__ import annotations

from .schema import Codec, Key, NotExpressible, Option

ROLLOUT_NAMES = ("vllm", "sglang")
"""Rollout engines (``actor_rollout_ref.rollout.name``)."""
ROLLOUT_MODES = ("hybrid", "colocated")
"""verl rollout modes."""
REF_MODES = ("colocated", "none")
"""Where the reference model is."""
RESYNC_GATHERS = ("mesh", "largest")
"""What the weight resync gathers (:mod:`mlite.memory.rl_resync`)."""
EXPERT_GATHERS = ("dense", "per_expert")
"""How expert weights are gathered at the resync."""
CHECKPOINT_BACKENDS = ("naive", "nccl", "hccl", "nixl", "kimi_ckpt_engine", "mooncake", "delta", "delta_sharded")
"""``rollout.checkpoint_engine.backend`` values (verl ``verl/checkpoint_engine/README.md`` @ 9fd7610a and
``docs/advance/delta_weight_sync.md`` @ fb5624af)."""
TRAINER_MODES = ("sync", "colocate_async", "separate_async")
"""``trainer.v1.trainer_mode`` values (verl ``docs/advance/v1_async_trainer.md`` @ b89c3b34)."""
VERL_VERSIONS = ("0.3", "0.4", "0.5", "0.6", "0.7.0", "0.7.1", "0.8", "0.9", "main")
"""verl releases whose memory-metric rules the kit knows (:mod:`mlite.memory.rl_metrics`; a patch release reads as
its minor, except 0.7.0 / 0.7.1, which differ); ``main``: verl-project/verl ``1dda039b`` (August 2026)."""
DEFAULT_VERL_VERSION = "0.9.0"
"""The newest verl release the kit knows (tag ``v0.9.0``, ``483b8a00``): ``--verl-version``'s default."""
ENGINE_PLACEMENTS = ("in_process_cumem", "in_process_freed", "separate")
"""Where the rollout engine's memory shows in the actor process's PyTorch statistics: its model runner in that
process with vLLM's CuMem sleep pool (kept counted asleep), in that process freeing through PyTorch (verl's vLLM
0.5.4 / 0.6.3 fork), or in processes of its own (:mod:`mlite.memory.rl_metrics`)."""

GROUP = "rollout (verl actor_rollout_ref.rollout.*)"
"""Argparse group of the rollout flags."""
SHARE = "rollout memory share"
"""Group of the two spellings of the engine's memory share (mutually exclusive)."""
CACHE = "rollout free_cache_engine"
"""Group of ``--free-cache-engine`` / ``--no-free-cache-engine`` (mutually exclusive)."""

_R = "actor_rollout_ref.rollout"
REF_KL_KEYS = ("actor_rollout_ref.actor.use_kl_loss", "algorithm.use_kl_in_reward")
"""verl builds a reference when either is true (``need_reference_policy`` in ``verl/trainer/ppo/utils.py``)."""
REF_OFFLOAD_KEYS = ("actor_rollout_ref.ref.megatron.param_offload", "actor_rollout_ref.ref.fsdp_config.param_offload")
"""Where verl's reference-model weight offload lives (Megatron and FSDP backends)."""


def _row(field: str, type_: type, default, key: str | None, help: str, *, control: bool = False, **kw) -> Option:
    """A rollout row; ``key``: its verl key (written and read, named first in the help); ``control``: the RL view
    shows it, labelled with the key less ``actor_rollout_ref.`` (``label`` gives another label)."""
    m = Key(key, aliases=kw.pop("aliases", ())) if key else kw.pop("mapping", None)
    text = f"{key}: {help}" if key else help
    if control and key:
        kw.setdefault("label", key.removeprefix("actor_rollout_ref."))
    return Option(field=field, type=type_, default=default, help=text, mlite=m, megatron=m, **{"group": GROUP, **kw})


ROLLOUT: tuple[Option, ...] = (
    _row(
        "name",
        str,
        "vllm",
        f"{_R}.name",
        "the rollout engine",
        flag="--rollout",
        required=True,
        choices=ROLLOUT_NAMES,
        control=True,
    ),
    _row(
        "tensor_model_parallel_size",
        int,
        2,
        f"{_R}.tensor_model_parallel_size",
        "rollout TP, GPUs that split attention, dense layers and the KV heads",
        flag="--rollout-tp",
        required=True,
        control=True,
    ),
    _row(
        "data_parallel_size",
        int,
        1,
        f"{_R}.data_parallel_size",
        "DP ranks of one engine (routed experts split over TP x DP; default 1)",
        flag="--rollout-dp",
        control=True,
    ),
    _row("expert_parallel_size", int, 1, f"{_R}.expert_parallel_size", "1 or TP x DP (expert parallel)", flag=None),
    _row(
        "gpu_memory_utilization",
        float,
        0.5,
        f"{_R}.gpu_memory_utilization",
        "vLLM: share of total device memory (default 0.5, verl's); with sglang verl passes it as mem_fraction_static",
        flag="--gpu-memory-utilization",
        group=SHARE,
        control=True,
    ),
    _row(
        "free_cache_engine",
        bool,
        True,
        f"{_R}.free_cache_engine",
        "False: keep weights and KV cache on the GPU through training (default True: sleep the engine after "
        "generation)",
        flag="--no-free-cache-engine",
        cli="negate",
        group=CACHE,
        control=True,
    ),
    _row(
        "sleep_level",
        int,
        None,
        None,
        "1: weights to host RAM, KV freed; 2: both freed (default: verl's choice, 2 in hybrid mode)",
        flag="--sleep-level",
        choices=(1, 2),
        choice_labels=("weights to host", "discard both"),
        label="sleep level",
    ),
    _row("mode", str, "hybrid", None, "verl rollout mode: hybrid (sleep level 2) or colocated (1)", flag=None),
    _row("lora_as_adapter", bool, False, None, "a LoRA adapter is synced (verl then sleeps at level 1)", flag=None),
    _row("mtp_rollout", bool, False, None, "MTP speculative decoding (verl then sleeps at level 1)", flag=None),
    _row(
        "prompt_length",
        int,
        512,
        "data.max_prompt_length",
        "P",
        flag="--prompt-len",
        required=True,
        control=True,
    ),
    _row(
        "response_length",
        int,
        512,
        "data.max_response_length",
        "R",
        flag="--response-len",
        required=True,
        control=True,
    ),
    _row("n", int, 1, f"{_R}.n", "K responses per prompt", flag="--rollout-n", required=True, control=True),
    _row(
        "train_batch_size",
        int,
        256,
        "data.train_batch_size",
        "B prompts per step",
        flag="--rollout-batch",
        required=True,
        control=True,
    ),
    _row(
        "max_model_len",
        int,
        None,
        f"{_R}.max_model_len",
        "default: the model's max_position_embeddings, as verl sets it",
        flag="--max-model-len",
        label="rollout.max_model_len (0: the model's)",
    ),
    _row("max_num_batched_tokens", int, 8192, f"{_R}.max_num_batched_tokens", "vLLM's profiling forward", flag=None),
    _row("max_num_seqs", int, 256, f"{_R}.max_num_seqs", "sequences one engine runs at once", flag=None),
    _row("dtype", str, "bfloat16", f"{_R}.dtype", "weight dtype of the engine", flag=None),
    _row("kv_cache_dtype", str, "bfloat16", None, "KV-cache dtype (vLLM kv_cache_dtype)", flag=None),
    _row("enforce_eager", bool, False, f"{_R}.enforce_eager", "no CUDA graphs", flag=None),
    _row("cuda_graph_gib", float, 1.0, None, "CUDA-graph memory per GPU (documented guess)", flag=None),
    _row("engine_overhead_gib", float, 1.0, None, "engine memory outside weights, KV, activations", flag=None),
    _row(
        "update_weights_bucket_megabytes",
        int,
        2048,
        f"{_R}.checkpoint_engine.update_weights_bucket_megabytes",
        "one bucket of the weight sync",
        flag=None,
        aliases=(f"{_R}.update_weights_bucket_megabytes",),
    ),
    _row(
        "ref",
        str,
        "colocated",
        None,
        "reference model (verl builds one with actor.use_kl_loss or algorithm.use_kl_in_reward)",
        flag="--ref",
        choices=REF_MODES,
        label="reference",
        mapping=Codec("rollout_reference", REF_KL_KEYS),
    ),
    _row(
        "ref_param_offload",
        bool,
        False,
        None,
        " / ".join(REF_OFFLOAD_KEYS),
        flag="--ref-offload",
        cli="switch",
        label="ref.param_offload",
        mapping=Codec("rollout_ref_offload", REF_OFFLOAD_KEYS),
    ),
    _row("host_process_gib", float, 4.0, None, "host RAM of one worker process (documented guess)", flag=None),
    _row(
        "host_mem_gib",
        float,
        None,
        None,
        "host RAM per node in GiB to check against",
        flag="--host-mem",
        label="host RAM per node, GiB (0: unchecked)",
    ),
    _row(
        "vllm_version",
        str,
        "latest",
        None,
        "vLLM release whose KV-budget rule applies (0.9.1+: util x total less this instance's own use, refused "
        "when less is free; 0.8.0-0.9.0: less everything on the device; V0: per instance, unchecked), or a rule "
        "name: v1_per_instance, global, v0_per_instance (default latest)",
        flag="--vllm-version",
        mapping=NotExpressible("verl has no key for it: the installed vllm package decides the rule"),
    ),
    _row(
        "sibling_contexts",
        int,
        0,
        None,
        "CUDA contexts of other processes on the engine's first GPU (the DeepSeek-V4 TP16 job: 7), in every phase",
        flag="--sibling-contexts",
        mapping=NotExpressible("a property of how the engine's processes start, not a verl setting"),
    ),
    _row(
        "sibling_context_gib",
        float,
        2.51,
        None,
        "GiB of one sibling context (2.51, measured on the DeepSeek-V4 job)",
        flag="--sibling-context-gib",
        mapping=NotExpressible("measured, not a verl setting"),
    ),
    _row(
        "sleep_residue_gib",
        float,
        None,
        None,
        "GPU GiB a sleeping vLLM keeps (measured 2,001 MiB = 1.954); default: engine overhead + CUDA graphs",
        flag="--sleep-residue",
        mapping=NotExpressible("what the sleeping engine keeps is the engine's, not a verl setting"),
    ),
    _row(
        "resync_gather",
        str,
        "mesh",
        None,
        "mesh: the resync gathers the largest tensor the actor mesh splits (TP matrix, EP experts); largest: the "
        "model's largest tensor whatever the mesh",
        flag="--resync-gather",
        choices=RESYNC_GATHERS,
        mapping=NotExpressible("how the exporter gathers is the actor engine's code, not a verl setting"),
    ),
    _row(
        "resync_gather_copies",
        int,
        2,
        None,
        "full copies of the gathered tensor alive at once (2: all-gathered shards + their concatenation)",
        flag="--resync-gather-copies",
        mapping=NotExpressible("how the exporter gathers is the actor engine's code, not a verl setting"),
    ),
    _row(
        "resync_expert_gather",
        str,
        "dense",
        None,
        "dense: all experts of a layer's weight at once (Megatron Lite); per_expert: one local expert over EP",
        flag="--resync-expert-gather",
        choices=EXPERT_GATHERS,
        mapping=NotExpressible("how the exporter gathers is the actor engine's code, not a verl setting"),
    ),
    _row(
        "checkpoint_backend",
        str,
        "naive",
        f"{_R}.checkpoint_engine.backend",
        "weight-sync backend: naive (colocated, one bucket), nccl and the others two buckets, delta / "
        "delta_sharded also a pinned host snapshot",
        flag="--checkpoint-backend",
        choices=CHECKPOINT_BACKENDS,
    ),
    _row(
        "trainer_mode",
        str,
        "sync",
        "trainer.v1.trainer_mode",
        "sync, colocate_async, or separate_async (pi_old and the current weights copied to host RAM)",
        flag="--trainer-mode",
        choices=TRAINER_MODES,
    ),
    _row(
        "weight_block_size",
        int,
        None,
        None,
        "block edge of the rollout checkpoint's FP8 weights (0: not block-quantized; default: the config's "
        "quantization_config.weight_block_size, 128 for DeepSeek-V4); the rollout TP must keep whole blocks",
        flag="--rollout-weight-block",
        metavar="N",
    ),
    _row(
        "verl_version",
        str,
        DEFAULT_VERL_VERSION,
        None,
        f"the verl release the logged perf/* memory metrics come from ({', '.join(VERL_VERSIONS)}; default "
        f"{DEFAULT_VERL_VERSION}, the newest the kit knows): what predicted_metrics covers",
        flag="--verl-version",
        mapping=NotExpressible("verl has no key for it: the installed verl package is the release"),
    ),
    _row(
        "engine_placement",
        str,
        None,
        None,
        "where the engine's memory shows in the actor process (default: from --verl-version, --rollout and the "
        "mode; in_process_freed: verl <= 0.4 with its vLLM 0.5.4/0.6.3 fork)",
        flag="--engine-placement",
        choices=ENGINE_PLACEMENTS,
        mapping=NotExpressible("where verl runs the engine follows from its release, engine and mode, not a key"),
    ),
)
"""The rollout options, in :class:`~mlite.memory.rl_options.RolloutOptions` field order."""

MEM_FRACTION_STATIC = Option(
    field="gpu_memory_utilization",
    type=float,
    default=None,
    flag="--mem-fraction-static",
    help=f"SGLang's mem_fraction_static ({_R}.gpu_memory_utilization with sglang): share of the memory free at start "
    "for weights + KV",
    group=SHARE,
)
"""SGLang's spelling of the memory share: the same field and key as ``--gpu-memory-utilization`` (refused with
vllm); the command line of an sglang rollout prints it."""

FREE_CACHE_ENGINE = Option(
    field="free_cache_engine",
    type=bool,
    default=True,
    flag="--free-cache-engine",
    help=f"{_R}.free_cache_engine=True: sleep the engine after generation (verl's default)",
    cli="switch",
    group=CACHE,
)
"""The explicit spelling of ``free_cache_engine``'s default (accepted, never printed)."""

SPELLINGS: tuple[Option, ...] = (MEM_FRACTION_STATIC, FREE_CACHE_ENGINE)
"""Second flags of a :data:`ROLLOUT` field (argparse only; each in a mutually exclusive group with the row's)."""

__all__ = [
    "CACHE",
    "CHECKPOINT_BACKENDS",
    "DEFAULT_VERL_VERSION",
    "ENGINE_PLACEMENTS",
    "EXPERT_GATHERS",
    "FREE_CACHE_ENGINE",
    "GROUP",
    "MEM_FRACTION_STATIC",
    "REF_KL_KEYS",
    "REF_MODES",
    "REF_OFFLOAD_KEYS",
    "RESYNC_GATHERS",
    "ROLLOUT",
    "ROLLOUT_MODES",
    "ROLLOUT_NAMES",
    "SHARE",
    "SPELLINGS",
    "TRAINER_MODES",
    "VERL_VERSIONS",
]
