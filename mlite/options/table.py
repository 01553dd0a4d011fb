"""The options table: every training and run option once, with its flag, help, widget label and verl keys.

:data:`TRAINING` holds the :class:`~mlite.options.TrainingOptions` fields (``mlite memory``, ``mlite export``, the
memory widget, the launchers ``mlite export`` writes and ``mlite import-launcher`` reads); :data:`RUN` holds the
:class:`~mlite.launch.RunConfig` fields (``mlite run``, ``config.json`` of a run); :data:`EXPORT` the :class:`~mlite.export.ExportPlan` fields
``mlite export`` takes as flags. Everything that spells an
option derives from here (:mod:`.cli` for argparse and printed command lines, :mod:`.verl` for Hydra overrides
in both directions), as torchtitan's ``from_hf_map`` does for checkpoint keys.

To add an option: add the dataclass field, then a row here: its flag, help, label, and for launcher options what
each target does with it (``mlite=`` / ``megatron=``: a :class:`Key`, a :class:`Codec` from :mod:`.codecs`, a
:class:`ByMode` for SFT vs GRPO keys, or :class:`NotExpressible` with the reason). ``tests/test_options_table.py``
then round-trips it through every spelling without further edits (and fails until the row exists).
"""

from __future__ import annotations

from ..mesh.axes import RUN_AXES
from ..mesh.config import DEFAULT_GPUS_PER_NODE, DEFAULT_SEQ_LEN
from .optimizers import BACKENDS
from .rules import MUON_COEFFICIENTS, MUON_MATMUL_PREC
from .schema import DEFAULT, KEEP, ByMode, Codec, Key, NotExpressible, Option, Via
from .training import (
    ACTIVATION_MODELS,
    ATTENTION,
    DTYPES,
    GPU_MEMORY_GIB,
    LITE_DEVICES,
    OPTIMIZER_ALGORITHMS,
    OPTIMIZERS,
    PARAM_DTYPES,
    PRECISIONS,
    RECOMPUTE,
)

__all__ = ["EXPORT", "GPU_MEMORY_GIB", "NOT_OPTIONS", "OPTIMIZERS", "ROOTS", "RUN", "TARGETS", "TRAINING"]

# ---------------------------------------------------------------------------------------------- vocabularies
# OPTIMIZERS, DTYPES, PARAM_DTYPES, ATTENTION, ACTIVATION_MODELS, LITE_DEVICES: mlite/options/training.py, beside the
# TrainingOptions fields they are the values of (its validation reads them too)
TORCH_DTYPE_NAMES = (("bf16", "bfloat16"), ("fp16", "float16"), ("fp32", "float32"))
"""mlite dtype name <-> verl's ``dtype`` value."""
MEGATRON_RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe")
"""Megatron-Core ``recompute_modules`` choices (verl's engine/megatron.yaml)."""

RUN_DEBUG_MODELS = ("tiny-dense", "tiny-moe", "tiny-hybrid")
"""The tiny configs in ``data/models`` that train on a CPU in seconds (one per model kind)."""
RUN_DEVICES = ("cpu", "cuda")
"""Where the workers of ``mlite run`` compute."""
RUN_LAUNCHERS = ("torchrun", "ray")
"""How the worker processes are started (same worker code either way)."""
RUN_OPTIMIZERS = BACKENDS.names
"""``mlite run --optimizer`` choices (the registered backends; the lite runtime implements each)."""
RUN_GRAD_DTYPES = DTYPES
"""``mlite run --grad-dtype`` choices (dist_opt's gradient buffer)."""
RUN_MOMENT_DTYPES = DTYPES
TRAINERS = ("lite", "verl-sft")
"""``mlite run --trainer``: the kit's own loop (``lite``) or verl's SFT trainer on the lite engine (``verl-sft``)."""
RUN_RECOMPUTE = RECOMPUTE
RUN_PARAM_DTYPES = ("auto", "fp32", "bf16")
"""Parameter storage dtypes of a run (auto: bf16 on CUDA or with PAO, else fp32)."""

# ---------------------------------------------------------------------------------------------- verl targets
TARGETS = {
    "verl-mlite-sft": ("mlite", True),
    "verl-mlite-grpo": ("mlite", False),
    "verl-megatron-grpo": ("megatron", False),
}
"""Export target -> ``(backend, is_sft)``: which row mapping (``mlite`` / ``megatron``) and which :class:`ByMode`
branch applies."""

LITE_ENGINE = "lite"
"""The verl engine name the lite runtime registers (``engine=lite``, EngineRegistry backend ``lite``)."""

LITE_SEARCHPATH = "pkg://mlite.verl_engine.conf"
"""Hydra search path holding ``engine/lite.yaml``."""

ENGINE_SWITCH = {
    "verl-lite-sft": (
        "verl-mlite-sft",
        (("engine", "mlite", LITE_ENGINE), ("hydra.searchpath", "[pkg://verl_mlite.config]", f"[{LITE_SEARCHPATH}]")),
    )
}
"""Local export target -> ``(cluster target, ((key, cluster value, local value), ...))``: the only keys that differ
between a ``verl-mlite-sft`` launcher and its local ``verl-lite-sft`` variant (every other key is the same)."""

_ACTOR = "actor_rollout_ref.actor"
ROOTS = {
    ("mlite", True): {"engine": "engine", "optim": "optim", "actor": _ACTOR, "megatron": "engine"},
    ("mlite", False): {
        "engine": f"{_ACTOR}.engine",
        "optim": f"{_ACTOR}.optim",
        "actor": _ACTOR,
        "megatron": f"{_ACTOR}.megatron",
    },
    ("megatron", True): {"engine": "engine", "optim": "optim", "actor": _ACTOR, "megatron": "engine"},
    ("megatron", False): {
        "engine": f"{_ACTOR}.engine",
        "optim": f"{_ACTOR}.optim",
        "actor": _ACTOR,
        "megatron": f"{_ACTOR}.megatron",
    },
    ("fsdp", True): {"engine": "engine", "optim": "optim", "actor": _ACTOR, "megatron": "engine"},
    ("fsdp", False): {
        "engine": f"{_ACTOR}.fsdp_config",
        "optim": f"{_ACTOR}.optim",
        "actor": _ACTOR,
        "megatron": f"{_ACTOR}.megatron",
    },
}
"""``(backend, is_sft)`` -> the values of the key templates' ``{engine}``, ``{optim}``, ``{actor}``, ``{megatron}``."""

_OC = "{optim}.override_optimizer_config"
_TC = "{megatron}.override_transformer_config"

ESTIMATOR = NotExpressible("an assumption of the memory estimator, not a training setting", KEEP)
"""Estimator-only options: no launcher key on any target."""
_MLITE_OPTIM = (
    "verl's mlite engine passes only offload_fraction, use_precision_aware_optimizer, "
    "decoupled_weight_decay and adam_eps to the mlite optimizer"
)
_NO_MFSDP = "verl's Megatron backend has no Megatron-FSDP (mfsdp) key"
_BATCH = NotExpressible(
    "verl sizes a step with data.train_batch_size and packs micro-batches by token budget (use_dynamic_bsz)", KEEP
)
_SEQ = ByMode(
    sft=Key("data.max_length", write="launcher", verl_default=1024),
    grpo=Codec("grpo_seq_len", ("data.max_prompt_length", "data.max_response_length")),
)
_MICRO = ByMode(
    sft=Key("data.micro_batch_size_per_gpu", write="launcher", verl_default=4),
    grpo=Key("{actor}.ppo_micro_batch_size_per_gpu", write="launcher", verl_default=1),
)
_MLITE_RECOMPUTE = Codec("mlite_recompute", ("{engine}.impl_cfg.recompute",))
_MEGATRON_RECOMPUTE = Codec(
    "megatron_recompute",
    (
        f"{_TC}.recompute_granularity",
        f"{_TC}.recompute_method",
        f"{_TC}.recompute_num_layers",
        f"{_TC}.recompute_modules",
    ),
)
_CHUNKED_KEYS = (f"{_OC}.chunked_optimizer_state_offload", f"{_OC}.offload_optimizer_states")
_CHUNKED_MLITE = NotExpressible(
    "verl's mlite engine builds Megatron Lite's optimizer config from offload_fraction, use_precision_aware_optimizer, "
    "decoupled_weight_decay and adam_eps of override_optimizer_config only (MegatronLiteEngine."
    "_build_mlite_optimizer_config, experimental/lite/examples/verl/verl_mlite/engine/mlite_engine.py @ d48bd6be)",
    DEFAULT,
)
_CHUNKED_MEGATRON = Codec("megatron_chunked_state_offload", _CHUNKED_KEYS)
"""Megatron-Core's chunked optimizer-state offload flag (``OptimizerConfig.chunked_optimizer_state_offload``, dev @
d48bd6be) and its deprecated alias ``offload_optimizer_states`` (read, never written): verl's Megatron engine hands
``optim.override_optimizer_config`` to Megatron-Core's ``OptimizerConfig`` (verl ``init_megatron_optim_config``:
``optim_args[k] = v`` before ``OptimizerConfig(**optim_args)``, so ``__post_init__`` maps the alias); verl's mlite
engine does not pass these keys on (:data:`_CHUNKED_MLITE`)."""
_CHUNK_MB = Key(f"{_OC}.optimizer_state_offload_chunk_size_mb", add=True, requires="chunked_optimizer_state_offload")
_CHUNK_FRACTION = Key(f"{_OC}.optimizer_state_offload_fraction", add=True, requires="chunked_optimizer_state_offload")
_BUILD = NotExpressible("a property of the Megatron Lite build (ISEEKYAN/Megatron-LM#232), not a launcher key", KEEP)
_G = "training / memory"


def _MUON(name: str, default: object) -> Key:
    """The ``{optim}.<name>`` key of a Muon option (in verl's packaged optim config: written without ``+``)."""
    return Key(f"{{optim}}.{name}", verl_default=default)


_ALGORITHM_HELP = "optimizer algorithm (Megatron-Core's optimizer; registered in mlite.options.optimizers)"

# ---------------------------------------------------------------------------------------------- TrainingOptions
TRAINING: tuple[Option, ...] = (
    Option(
        "optimizer",
        str,
        "dist_opt",
        "--optimizer",
        "dist_opt (Megatron-Core DDP + distributed optimizer), fsdp2 (PyTorch fully_shard) or mfsdp (Megatron-FSDP)",
        label="optimizer",
        choices=BACKENDS.names,
        group=_G,
        mlite=Key("{engine}.impl_cfg.optimizer", add=True, knob="OPTIMIZER", write="always"),
        megatron=NotExpressible(
            "fsdp2 has no counterpart in verl's Megatron backend (nor has mfsdp): Megatron-Core's "
            "distributed optimizer (dist_opt) is written",
            "dist_opt",
        ),
    ),
    Option(
        "optimizer_algorithm",
        str,
        "adam",
        "--optimizer-algorithm",
        _ALGORITHM_HELP,
        label="algorithm",
        choices=OPTIMIZER_ALGORITHMS,
        group=_G,
        mlite=Key("{optim}.optimizer", verl_default="adam"),
        megatron=Key("{optim}.optimizer", verl_default="adam"),
    ),
    Option(
        "use_distributed_optimizer",
        bool,
        True,
        "--no-distributed-optimizer",
        "dist_opt without state sharding",
        label="distributed optimizer",
        cli="negate",
        group=_G,
        mlite=NotExpressible("mlite's dist_opt always shards the state", DEFAULT),
        megatron=Key("{megatron}.use_distributed_optimizer", verl_default=True),
    ),
    Option(
        "use_precision_aware_optimizer",
        bool,
        False,
        "--pao",
        "use_precision_aware_optimizer (PAO): bf16 main grads and moments allowed, param remainders",
        label="precision-aware optimizer (PAO)",
        cli="switch",
        group=_G,
        mlite=Key(f"{_OC}.use_precision_aware_optimizer", add=True),
        megatron=Key("{optim}.use_precision_aware_optimizer", aliases=(f"{_OC}.use_precision_aware_optimizer",)),
    ),
    Option(
        "main_grads_dtype",
        str,
        "fp32",
        "--grad-dtype",
        "main_grads_dtype: the gradient buffer (bf16 with "
        "--pao: PAO's bf16 main grads; without: Megatron-Core's grad_reduce_in_fp32=False, fp32 copies in the "
        "optimizer)",
        label="grads",
        choices=DTYPES,
        group=_G,
        mlite=NotExpressible(_MLITE_OPTIM, DEFAULT),
        megatron=Codec(
            "megatron_grads_dtype", ("{optim}.main_grads_dtype", "{megatron}.override_ddp_config.grad_reduce_in_fp32")
        ),
    ),
    Option(
        "exp_avg_dtype",
        str,
        "fp32",
        "--moment-dtype",
        "exp_avg(_sq)_dtype: both Adam moments (bf16 needs --pao)",
        label="moments",
        choices=DTYPES,
        group=_G,
        mlite=NotExpressible(_MLITE_OPTIM, DEFAULT),
        megatron=Key("{optim}.exp_avg_dtype", requires="use_precision_aware_optimizer"),
    ),
    Option(
        "exp_avg_sq_dtype",
        str,
        "fp32",
        "--moment-dtype",
        "exp_avg(_sq)_dtype: both Adam moments (bf16 needs --pao)",
        choices=DTYPES,
        group=_G,
        mlite=NotExpressible(_MLITE_OPTIM, DEFAULT),
        megatron=Key("{optim}.exp_avg_sq_dtype", requires="use_precision_aware_optimizer"),
    ),
    Option(
        "store_param_remainders",
        bool,
        True,
        "--no-param-remainders",
        "store_param_remainders=False (PAO keeps a full fp32 master)",
        label="param remainders",
        cli="negate",
        group=_G,
        mlite=NotExpressible("the mlite engine has no such key", DEFAULT),
        megatron=Key(
            f"{_OC}.store_param_remainders", add=True, verl_default=True, requires="use_precision_aware_optimizer"
        ),
    ),
    Option(
        "offload_fraction",
        float,
        0.0,
        "--offload-fraction",
        "optimizer offload_fraction (0..1): share of the optimizer state kept and updated on the CPU",
        label="offload_fraction",
        group=_G,
        metavar="F",
        mlite=Codec(
            "mlite_offload_fraction",
            (f"{_OC}.offload_fraction", f"{_OC}.optimizer_offload_fraction", f"{_OC}.optimizer_cpu_offload"),
            knob="OFFLOAD_FRACTION",
        ),
        megatron=Codec(
            "megatron_cpu_offload",
            (
                f"{_OC}.optimizer_cpu_offload",
                f"{_OC}.optimizer_offload_fraction",
                f"{_OC}.overlap_cpu_optimizer_d2h_h2d",
            ),
            knob="OFFLOAD_FRACTION",
        ),
    ),
    # mfsdp (Megatron-FSDP): the fork's build_mfsdp_config reads these from optim.override_optimizer_config
    # (primitive/optimizers/mfsdp/config.py @ 0d14590c); verl's Megatron backend has no M-FSDP
    Option(
        "mfsdp_bucket_size",
        int,
        40_000_000,
        "--mfsdp-bucket-size",
        "mfsdp bucket_size C (elements): bounds the all-gather / fp32 wgrad scratch and the host gradient ring",
        label="mfsdp bucket",
        group=_G,
        metavar="N",
        mlite=Key(f"{_OC}.bucket_size", add=True, verl_default=40_000_000),
        megatron=NotExpressible(_NO_MFSDP, DEFAULT),
    ),
    Option(
        "mfsdp_grad_staging",
        str,
        "persistent",
        "--mfsdp-grad-staging",
        "mfsdp host gradient staging: persistent (today's _cpu_grad_bufs, 4 B per offloaded element) or ring "
        "(the design's two-slot ring, at most 2 x bucket_size elements)",
        label="mfsdp grad staging",
        choices=("persistent", "ring"),
        group=_G,
        mlite=ESTIMATOR,
        megatron=ESTIMATOR,
    ),
    Option(
        "param_offload",
        bool,
        False,
        "--param-offload",
        "runtime context offload of parameters",
        label="param_offload",
        cli="switch",
        group=_G,
        mlite=Key("{engine}.param_offload", knob="PARAM_OFFLOAD", write="always"),
        megatron=Key("{megatron}.param_offload", knob="PARAM_OFFLOAD", write="always"),
    ),
    Option(
        "optimizer_offload",
        bool,
        False,
        "--optimizer-offload",
        "runtime context offload of optimizer state",
        label="optimizer_offload",
        cli="switch",
        group=_G,
        mlite=Key("{engine}.optimizer_offload", knob="OPTIMIZER_OFFLOAD", write="always"),
        megatron=Key("{megatron}.optimizer_offload", knob="OPTIMIZER_OFFLOAD", write="always"),
    ),
    Option(
        "grad_offload",
        bool,
        False,
        "--grad-offload",
        "runtime context offload of gradients",
        cli="switch",
        group=_G,
        mlite=Key("{engine}.grad_offload", knob="GRAD_OFFLOAD", write="always"),
        megatron=NotExpressible(
            "verl's Megatron backend has no grad_offload key; param_offload=True (which "
            "also releases the gradient buffers) is written instead",
            DEFAULT,
            folds=(("param_offload", True),),
        ),
    ),
    Option(
        "chunked_optimizer_state_offload",
        bool,
        False,
        "--chunked-optimizer-state-offload",
        "dist_opt: Megatron-Core's chunked optimizer-state offload (moments and masters on the host between steps, "
        "restored for the update: masters in one window, moments chunk by chunk)",
        label="chunked state offload",
        cli="switch",
        group=_G,
        mlite=_CHUNKED_MLITE,
        megatron=_CHUNKED_MEGATRON,
    ),
    Option(
        "optimizer_state_offload_chunk_size_mb",
        int,
        0,
        "--optimizer-state-offload-chunk-size-mb",
        "MiB of moments restored per chunk (0: all at once; the masters' window is not bounded by it)",
        label="chunk MiB",
        group=_G,
        metavar="MIB",
        mlite=_CHUNKED_MLITE,
        megatron=_CHUNK_MB,
    ),
    Option(
        "optimizer_state_offload_fraction",
        float,
        1.0,
        "--optimizer-state-offload-fraction",
        "share of the parameter bundles (moments + master) chunked offload keeps on the host (0..1)",
        label="chunked fraction",
        group=_G,
        metavar="F",
        mlite=_CHUNKED_MLITE,
        megatron=_CHUNK_FRACTION,
    ),
    Option(
        "offload_master_for_forward",
        bool,
        True,
        "--masters-resident-in-rollout",
        "model a Megatron Lite build before ISEEKYAN/Megatron-LM#232 (2026-09-20): the chunked offload's masters / "
        "PAO remainders stay on the GPU through rollout and forward/backward",
        label="masters offloaded for forward",
        cli="negate",
        group=_G,
        mlite=_BUILD,
        megatron=_BUILD,
    ),
    Option(
        "engram_trainable",
        bool,
        False,
        "--engram-trainable",
        "train the n-gram memory tables (DeepSeek-V4.1 Engram: + fp32 master, main grad, momentum); "
        "default frozen (fp8 + scales)",
        label="Engram trainable",
        cli="switch",
        group=_G,
        # Megatron Lite's DeepSeek-V4.1 ImplConfig.trainable_engram (experimental/lite/megatron/lite/model/
        # deepseek_v41/lite/protocol.py, ISEEKYAN/Megatron-LM; docs/deepseek_v41.md @ 04baccf4) has no verl key
        mlite=NotExpressible(
            "verl's mlite engine passes no Engram switch: Megatron Lite's DeepSeek-V4.1 ImplConfig.trainable_engram "
            "is not among the impl_cfg keys it accepts (mlite.export.mlite_keys); the tables stay frozen",
            DEFAULT,
        ),
        megatron=NotExpressible(
            "verl's Megatron backend has no DeepSeek-V4.1 model (Engram tables are a Megatron Lite model's)", DEFAULT
        ),
    ),
    # Muon: verl's optim group has the muon_* keys (verl 0.9.1 verl/trainer/config/optim/megatron.yaml, also composed
    # into the mlite SFT config; verl derives muon_extra_scale_factor itself with muon_match_adamw_update_rms); Megatron
    # Lite maps the same fields from its OptimizerConfig (ISEEKYAN/Megatron-LM examples/muon/README.md @ 045fc78a)
    Option(
        "muon_momentum",
        float,
        0.95,
        "--muon-momentum",
        "muon: momentum coefficient of the matrices' buffer",
        label="muon momentum",
        group=_G,
        mlite=_MUON("muon_momentum", 0.95),
        megatron=_MUON("muon_momentum", 0.95),
    ),
    Option(
        "muon_nesterov",
        bool,
        False,
        "--muon-nesterov",
        "muon: Nesterov-style momentum",
        label="muon nesterov",
        cli="switch",
        group=_G,
        mlite=_MUON("muon_nesterov", False),
        megatron=_MUON("muon_nesterov", False),
    ),
    Option(
        "muon_num_ns_steps",
        int,
        5,
        "--muon-ns-steps",
        "muon: Newton-Schulz iterations per step",
        label="muon NS steps",
        group=_G,
        metavar="N",
        mlite=_MUON("muon_num_ns_steps", 5),
        megatron=_MUON("muon_num_ns_steps", 5),
    ),
    Option(
        "muon_coefficient_type",
        str,
        "quintic",
        "--muon-coefficients",
        "muon: Newton-Schulz coefficients, quintic (five tuned sets) or simple (3.4445, -4.7750, 2.0315)",
        choices=MUON_COEFFICIENTS,
        group=_G,
        mlite=_MUON("muon_coefficient_type", "quintic"),
        megatron=_MUON("muon_coefficient_type", "quintic"),
    ),
    Option(
        "muon_fp32_matmul_prec",
        str,
        "medium",
        "--muon-matmul-prec",
        "muon: Newton-Schulz matmuls in bf16 (medium) or fp32 (high)",
        label="muon NS matmuls",
        choices=MUON_MATMUL_PREC,
        group=_G,
        mlite=_MUON("muon_fp32_matmul_prec", "medium"),
        megatron=_MUON("muon_fp32_matmul_prec", "medium"),
    ),
    Option(
        "muon_extra_scale_factor",
        float,
        1.0,
        "--muon-extra-scale",
        "muon: extra update scale (effective step = lr x it; 1.0 is ~4.4x AdamW's step at beta1 0.9)",
        label="muon extra scale",
        group=_G,
        metavar="S",
        mlite=_MUON("muon_extra_scale_factor", 1.0),
        megatron=_MUON("muon_extra_scale_factor", 1.0),
    ),
    Option(
        "muon_match_adamw_update_rms",
        bool,
        False,
        "--muon-match-adamw",
        "muon: extra scale = sqrt((1 - beta1) / (1 + beta1)), AdamW's update RMS (verl and Megatron Lite derive it)",
        label="muon matches AdamW",
        cli="switch",
        group=_G,
        mlite=_MUON("muon_match_adamw_update_rms", False),
        megatron=_MUON("muon_match_adamw_update_rms", False),
    ),
    Option(
        "param_dtype",
        str,
        "bf16",
        "--param-dtype",
        "parameter (compute) dtype",
        choices=PARAM_DTYPES,
        group=_G,
        mlite=Key("{engine}.dtype", values=TORCH_DTYPE_NAMES, verl_default="bf16"),
        megatron=Key("{megatron}.dtype", values=TORCH_DTYPE_NAMES, verl_default="bf16"),
    ),
    Option(
        "precision",
        str,
        "bf16",
        "--precision",
        "Megatron Lite precision profile (MegatronLiteConfig.precision): bf16, hopper_blockwise_bf16_weight, "
        "hopper_blockwise_fp8_weight (FP8 GEMM weights + scales, fsdp2, cp=pp=1) or mxfp8_fp8_weight (Blackwell)",
        label="precision",
        choices=PRECISIONS,
        group=_G,
        mlite=Key("{engine}.precision", add=True, verl_default="bf16"),
        megatron=NotExpressible(
            "verl's Megatron backend runs Megatron-Core's own FP8 recipes (override_transformer_config.fp8 / "
            "fp8_recipe), not Megatron Lite's precision profiles: bf16 is written",
            DEFAULT,
        ),
    ),
    Option(
        "seq_len",
        int,
        DEFAULT_SEQ_LEN,
        "--seq-len",
        f"sequence length (default {DEFAULT_SEQ_LEN})",
        group="mesh",
        mlite=_SEQ,
        megatron=_SEQ,
    ),
    Option(
        "micro_batch_size",
        int,
        1,
        "--micro-batch",
        "micro_batch_size",
        label="micro-batch",
        group=_G,
        metavar="N",
        mlite=_MICRO,
        megatron=_MICRO,
    ),
    Option(
        "num_microbatches",
        int,
        8,
        "--num-microbatches",
        "micro-batches per optimizer step",
        label="micro-batches",
        group=_G,
        metavar="N",
        mlite=_BATCH,
        megatron=_BATCH,
    ),
    Option(
        "recompute",
        str,
        "none",
        "--recompute",
        "activation recompute granularity",
        label="recompute",
        choices=RECOMPUTE,
        group=_G,
        mlite=_MLITE_RECOMPUTE,
        megatron=_MEGATRON_RECOMPUTE,
    ),
    Option(
        "recompute_modules",
        tuple,
        (),
        "--recompute-modules",
        "comma-separated mlite modules, e.g. mlp,core_attn",
        group=_G,
        metavar="LIST",
        mlite=_MLITE_RECOMPUTE,
        megatron=_MEGATRON_RECOMPUTE,
    ),
    Option(
        "sequence_parallel",
        bool,
        False,
        "--sequence-parallel",
        "Megatron sequence parallelism (forced on for MoE with TP > 1)",
        label="sequence_parallel",
        cli="switch",
        group=_G,
        mlite=NotExpressible("verl's mlite engine config has no sequence_parallel key (Megatron Lite decides)", KEEP),
        megatron=Codec(
            "megatron_sequence_parallel", ("{megatron}.sequence_parallel", "{megatron}.tensor_model_parallel_size")
        ),
    ),
    Option(
        "attention",
        str,
        "flash",
        "--attention",
        "attention whose memory is counted: unfused = Megatron-Core's local spec (DotProductAttention, scores kept); "
        "flash = Transformer Engine / flash-attn kernels (no score matrix)",
        label="attention",
        choices=ATTENTION,
        group=_G,
        mlite=ESTIMATOR,
        megatron=ESTIMATOR,
    ),
    Option(
        "dropout",
        bool,
        False,
        "--dropout",
        "count dropout masks (LLM fine-tuning runs without)",
        cli="switch",
        group=_G,
        mlite=ESTIMATOR,
        megatron=ESTIMATOR,
    ),
    Option(
        "fused_cross_entropy",
        bool,
        False,
        "--fused-cross-entropy",
        "cross-entropy fused with the output layer (no fp32 logits kept)",
        cli="switch",
        group=_G,
        mlite=ESTIMATOR,
        megatron=ESTIMATOR,
    ),
    Option(
        "activation_model",
        str,
        "megatron",
        "--activation-model",
        "activation accounting: megatron layers or the lite runtime's modules",
        choices=ACTIVATION_MODELS,
        group=_G,
        mlite=ESTIMATOR,
        megatron=ESTIMATOR,
    ),
    Option(
        "lite_device",
        str,
        "cuda",
        "--lite-device",
        "device of a lite-runtime run (with --activation-model lite)",
        choices=LITE_DEVICES,
        group=_G,
        mlite=ESTIMATOR,
        megatron=ESTIMATOR,
    ),
    Option(
        "gpu_memory_gib",
        float,
        80.0,
        "--gpu-mem",
        "device memory in GiB, or a GPU name (H100, H200, B200)",
        label="GiB",
        cli="gpu",
        group=_G,
        metavar="GIB|GPU",
        mlite=ESTIMATOR,
        megatron=ESTIMATOR,
    ),
    Option(
        "gpu",
        str,
        "",
        "--gpu",
        "GPU model for the precision profiles' hardware rules (default: the --gpu-mem name, if it is one)",
        choices=("", *GPU_MEMORY_GIB),
        group=_G,
        metavar="GPU",
        mlite=ESTIMATOR,
        megatron=ESTIMATOR,
    ),
    Option(
        "headroom",
        float,
        0.05,
        "--headroom",
        "share of device memory kept free in the fits verdict",
        group=_G,
        metavar="F",
        mlite=ESTIMATOR,
        megatron=ESTIMATOR,
    ),
    Option(
        "framework_overhead_gib",
        float,
        2.0,
        "--framework-overhead-gib",
        "CUDA context, NCCL buffers and workspace outside PyTorch's allocator (GiB)",
        group=_G,
        metavar="GIB",
        mlite=ESTIMATOR,
        megatron=ESTIMATOR,
    ),
    Option(
        "gpus_per_node",
        int,
        DEFAULT_GPUS_PER_NODE,
        "--gpus-per-node",
        f"GPUs per node (default {DEFAULT_GPUS_PER_NODE})",
        group="mesh",
        mlite=Key("trainer.n_gpus_per_node", write="cluster"),
        megatron=Key("trainer.n_gpus_per_node", write="cluster"),
    ),
)
"""The :class:`~mlite.options.TrainingOptions` rows, in the order flags are listed."""

NOT_OPTIONS = ("extra",)
"""TrainingOptions fields that are not options (free-form notes)."""

# ---------------------------------------------------------------------------------------------- RunConfig
_D = "training details"
RUN: tuple[Option, ...] = (
    Option(
        "model",
        str,
        "tiny-moe",
        "--model",
        f"data/models name ({', '.join(RUN_DEBUG_MODELS)}) or a config.json path",
        required=True,
        metavar="CONFIG",
        verl_sft=Via("model.path: hf_model_from_tiny_config/ in the run directory (config.json + the kit's tokenizer)"),
    ),
    Option(
        "layers",
        int,
        None,
        "--layers",
        "cut the model to N decoder layers (one of each layer kind first)",
        metavar="N",
        verl_sft=NotExpressible(
            "the model folder verl reads holds the whole config; cut the config.json itself", DEFAULT
        ),
    ),
    Option(
        "experts",
        int,
        None,
        "--experts",
        "cut every MoE layer to its first E routed experts",
        metavar="E",
        verl_sft=NotExpressible(
            "the model folder verl reads holds the whole config; cut the config.json itself", DEFAULT
        ),
    ),
    Option(
        "vocab",
        int,
        None,
        "--vocab",
        "cut the vocabulary to V tokens (random init only)",
        metavar="V",
        verl_sft=NotExpressible(
            "verl tokenizes with the kit's tokenizer, whose ids need the whole vocabulary", DEFAULT
        ),
    ),
    Option(
        "hf_checkpoint",
        str,
        None,
        "--hf-checkpoint",
        "start from the weights of this local Hugging Face safetensors directory",
        metavar="DIR",
        verl_sft=NotExpressible("the lite engine initialises the weights from engine.seed", DEFAULT),
    ),
    Option("steps", int, 30, "--steps", "optimizer steps", required=True, verl_sft=Key("trainer.total_training_steps")),
    Option(
        "nproc",
        int,
        2,
        "--nproc",
        "worker processes: TP*CP*DP (= EP*EDP)",
        required=True,
        verl_sft=Via("torchrun --nproc-per-node and trainer.n_gpus_per_node"),
    ),
    *(
        Option(a.name, int, 1, a.flag, a.run_help, path=(f"parallel.{a.name}",), verl_sft=Key(f"engine.{a.engine_key}"))
        for a in RUN_AXES
    ),
    Option(
        "device",
        str,
        "cpu",
        "--device",
        "cpu (gloo) or cuda (nccl, one GPU per process)",
        choices=RUN_DEVICES,
        required=True,
        verl_sft=Via("trainer.device"),
    ),
    Option(
        "optimizer",
        str,
        "fsdp2",
        "--optimizer",
        "mlite optimizer backend (default fsdp2)",
        choices=RUN_OPTIMIZERS,
        path=("training.optimizer",),
        verl_sft=Key("engine.impl_cfg.optimizer", add=True),
    ),
    Option(
        "optimizer_algorithm",
        str,
        "adam",
        "--optimizer-algorithm",
        _ALGORITHM_HELP,
        choices=OPTIMIZER_ALGORITHMS,
        path=("training.optimizer_algorithm",),
        verl_sft=NotExpressible("the lite engine builds Megatron Lite's AdamW (it reads no optim.optimizer)", DEFAULT),
    ),
    Option(
        "use_distributed_optimizer",
        bool,
        True,
        "--no-distributed-optimizer",
        "dist_opt as plain DDP: all-reduced grads, the whole optimizer state on every rank",
        cli="negate",
        path=("training.use_distributed_optimizer",),
        verl_sft=Via("a dist_opt setting (refused without dist_opt)"),
    ),
    Option(
        "grad_dtype",
        str,
        "fp32",
        "--grad-dtype",
        "dist_opt gradient buffer (main_grads_dtype; bf16 with --pao: PAO's bf16 main grads)",
        choices=RUN_GRAD_DTYPES,
        path=("training.main_grads_dtype",),
        verl_sft=Via("a dist_opt setting (refused without dist_opt)"),
    ),
    Option(
        "pao",
        bool,
        False,
        "--pao",
        "use_precision_aware_optimizer (bf16 params + int16 remainders)",
        cli="switch",
        path=("training.use_precision_aware_optimizer",),
        verl_sft=Key("optim.override_optimizer_config.use_precision_aware_optimizer", add=True),
    ),
    Option(
        "moment_dtype",
        str,
        "fp32",
        "--moment-dtype",
        "Adam moment dtype (bf16 needs --pao)",
        choices=RUN_MOMENT_DTYPES,
        path=(
            "training.exp_avg_dtype",
            "training.exp_avg_sq_dtype",
        ),
        verl_sft=Key("optim.exp_avg_dtype"),
    ),
    Option(
        "offload_fraction",
        float,
        0.0,
        "--offload-fraction",
        "share of optimizer state kept and updated on the CPU (mlite's fsdp2 uses 1.0)",
        metavar="F",
        path=("training.offload_fraction",),
        verl_sft=Key("optim.override_optimizer_config.offload_fraction", add=True),
    ),
    Option(
        "mfsdp_bucket_size",
        int,
        40_000_000,
        "--mfsdp-bucket-size",
        "mfsdp bucket_size C (elements): the host gradient ring's slot capacity",
        metavar="N",
        path=("training.mfsdp_bucket_size",),
        verl_sft=NotExpressible("verl's lite engine runs fsdp2 only (mfsdp is refused there)", DEFAULT),
    ),
    Option(
        "mfsdp_grad_staging",
        str,
        "persistent",
        "--mfsdp-grad-staging",
        "mfsdp host gradient staging: persistent (4 B per offloaded element) or ring (two slots of C elements)",
        choices=("persistent", "ring"),
        path=("training.mfsdp_grad_staging",),
        verl_sft=NotExpressible("verl's lite engine runs fsdp2 only (mfsdp is refused there)", DEFAULT),
    ),
    Option(
        "param_offload",
        bool,
        False,
        "--param-offload",
        "move parameters to the CPU between steps",
        cli="switch",
        path=("training.param_offload",),
        verl_sft=Key("engine.param_offload"),
    ),
    Option(
        "optimizer_offload",
        bool,
        False,
        "--optimizer-offload",
        "move optimizer state to the CPU between steps",
        cli="switch",
        path=("training.optimizer_offload",),
        verl_sft=Key("engine.optimizer_offload"),
    ),
    Option(
        "launcher",
        str,
        "torchrun",
        "--launcher",
        "torchrun (default) or ray actors",
        choices=RUN_LAUNCHERS,
        verl_sft=Via("torchrun only (ray refused)"),
    ),
    Option("seed", int, 0, "--seed", "weight init and data order seed", verl_sft=Key("engine.seed")),
    Option(
        "out",
        str,
        None,
        "--out",
        "run directory to create",
        required=True,
        metavar="DIR",
        verl_sft=Via("the run directory (trainer.default_local_dir, hydra.run.dir, trainer.experiment_name)"),
    ),
    Option("lr", float, 3e-3, "--lr", "peak learning rate (cosine decay to lr/10)", group=_D, verl_sft=Key("optim.lr")),
    Option(
        "lr_warmup_steps",
        int,
        2,
        "--lr-warmup-steps",
        "linear warmup steps",
        group=_D,
        verl_sft=Key("optim.lr_warmup_steps"),
    ),
    Option(
        "clip_grad",
        float,
        1.0,
        "--clip-grad",
        "global grad-norm clip (0: off)",
        group=_D,
        verl_sft=Key("optim.clip_grad"),
    ),
    Option(
        "tokens_per_microbatch",
        int,
        512,
        "--tokens-per-microbatch",
        "packed tokens per micro-batch and process",
        group=_D,
        verl_sft=Key("data.max_token_len_per_gpu"),
    ),
    Option(
        "num_microbatches",
        int,
        1,
        "--num-microbatches",
        "micro-batches per step",
        group=_D,
        path=("training.num_microbatches",),
        verl_sft=NotExpressible(
            "verl packs micro-batches by token budget (data.max_token_len_per_gpu: --tokens-per-microbatch)", DEFAULT
        ),
    ),
    Option(
        "recompute",
        str,
        "none",
        "--recompute",
        "activation recompute",
        choices=RUN_RECOMPUTE,
        group=_D,
        path=("training.recompute",),
        verl_sft=Key("engine.impl_cfg.recompute", add=True),
    ),
    Option(
        "param_dtype",
        str,
        "auto",
        "--param-dtype",
        "parameter dtype (auto: bf16 on CUDA or with --pao, else fp32)",
        choices=RUN_PARAM_DTYPES,
        group=_D,
        verl_sft=Key("engine.dtype"),
    ),
    Option(
        "dataset",
        str,
        "tiny_sft",
        "--dataset",
        "data/datasets name or verl-format parquet path",
        group=_D,
        verl_sft=Key("data.train_files"),
    ),
    Option(
        "threads",
        int,
        None,
        "--threads",
        "CPU threads per worker (default cores // nproc)",
        group=_D,
        verl_sft=Via("OMP_NUM_THREADS of each worker"),
    ),
    Option(
        "crash_at_step",
        int,
        None,
        "--crash-at-step",
        "testing: the last worker raises at step N (the run ends failed)",
        group=_D,
        metavar="N",
        verl_sft=NotExpressible("the failure hook is the kit's trainer's", DEFAULT),
    ),
    Option(
        "compile",
        bool,
        False,
        "--compile",
        "torch.compile each decoder block",
        cli="switch",
        group=_D,
        verl_sft=NotExpressible("the lite engine builds its model without torch.compile", DEFAULT),
    ),
    Option(
        "trainer",
        str,
        "lite",
        "--trainer",
        "lite (the kit's loop) or verl-sft (verl's SFT trainer, engine=lite)",
        choices=TRAINERS,
        label="trainer",
        verl_sft=Via("verl-sft: this table"),
    ),
    Option(
        "train_batch_size",
        int,
        8,
        "--train-batch-size",
        "verl-sft: data.train_batch_size (sequences per step)",
        group=_D,
        verl_sft=Key("data.train_batch_size"),
    ),
    Option(
        "verl_overrides",
        tuple,
        (),
        "--verl-overrides",
        "verl-sft: extra Hydra overrides, comma-separated (engine.* keys checked)",
        group=_D,
        metavar="K=V,...",
        verl_sft=Via("appended to the Hydra overrides (engine.* and optim.override_optimizer_config.* checked)"),
    ),
)
"""The :class:`~mlite.launch.RunConfig` rows (``mlite run``); they have no launcher mapping."""

# ---------------------------------------------------------------------------------------------- ExportPlan
_E = "export"
EXPORT: tuple[Option, ...] = (
    Option(
        "target",
        str,
        "verl-mlite-grpo",
        "--target",
        "verl-mlite-sft (torchrun, engine=mlite), verl-mlite-grpo "
        "(the mlite actor), verl-megatron-grpo (verl's Megatron backend) or verl-lite-sft (the local variant of "
        "verl-mlite-sft, engine=lite)",
        choices=(*TARGETS, *ENGINE_SWITCH),
        group=_E,
        required=True,
    ),
    Option("nodes", int, 1, "--nodes", "Slurm nodes", required=True),
    Option(
        "model_path",
        str,
        None,
        "--model-path",
        "checkpoint directory on the cluster (default: the model name)",
        group=_E,
    ),
    Option(
        "train_files",
        str,
        "~/data/gsm8k/train.parquet",
        "--train-files",
        "training parquet (default ~/data/gsm8k/train.parquet)",
        group=_E,
    ),
    Option(
        "val_files",
        str,
        "~/data/gsm8k/test.parquet",
        "--val-files",
        "validation parquet (default ~/data/gsm8k/test.parquet)",
        group=_E,
    ),
    Option("log_dir", str, "runs/slurm", "--log-dir", "Slurm output and JSONL metrics (default runs/slurm)", group=_E),
    Option("project_name", str, "mlite-lab", "--project", "trainer.project_name", group=_E),
    Option("experiment_name", str, None, "--experiment", "trainer.experiment_name and Slurm job name", group=_E),
    Option("partition", str, None, "--partition", "#SBATCH --partition", group=_E),
    Option("account", str, None, "--account", "#SBATCH --account", group=_E),
    Option("time_limit", str, None, "--time", "Slurm time limit, e.g. 24:00:00", group=_E),
    Option("cpus_per_task", int, 64, "--cpus-per-task", "CPUs of the one task per node (Ray --num-cpus)", group=_E),
    Option(
        "rollout_tp",
        int,
        None,
        "--rollout-tp",
        "GRPO: rollout TP, the launcher's ROLLOUT_TP (default: GPUs per node, at most 8); refused when it cuts a "
        "block of the rollout checkpoint's FP8 weights",
        group=_E,
        metavar="N",
    ),
)
"""The :class:`~mlite.export.ExportPlan` fields ``mlite export`` takes as flags (the launchers' batch and
rollout knobs read the plan; to expose another plan field, add its row here)."""


def rows_by_field(rows: tuple[Option, ...]) -> dict[str, Option]:
    """``field -> row``."""
    return {r.field: r for r in rows}


# ---------------------------------------------------------------------------------------------- the lite engine

LITE_ENGINE_KEYS: dict[str, str] = {
    "tp": "ParallelConfig.tp",
    "cp": "ParallelConfig.cp",
    "ep": "ParallelConfig.ep",
    "etp": "ParallelConfig.etp (1 only)",
    "pp": "ParallelConfig.pp (1 only)",
    "vpp": "ParallelConfig.vpp (1 only)",
    "dtype": "RuntimeConfig.param_dtype (auto, bfloat16, float32)",
    "seed": "RuntimeConfig.seed (weight init)",
    "param_offload": "verl's mode switch -> to(device, model=True)",
    "optimizer_offload": "verl's mode switch -> to(device, optimizer=True)",
    "grad_offload": "gradients move with their parameters (needs param_offload)",
    "impl": "MegatronLiteConfig.impl (lite)",
    "model_name": "MegatronLiteConfig.model_name (auto)",
    "impl_cfg.optimizer": "MegatronLiteConfig.impl_cfg.optimizer (fsdp2; dist_opt refused)",
    "impl_cfg.recompute": "MegatronLiteConfig.impl_cfg.recompute",
    "impl_cfg.use_thd": "always THD (packed)",
    "router_aux_loss_coef": "impl_cfg.moe_aux_loss_coeff",
    "forward_only": "verl's flag (no optimizer)",
    "full_determinism": "read, ignored (CPU runs are deterministic)",
    "attention_backend_override": "read, ignored (SDPA)",
    "export_dtype": "read, ignored by SFT",
    "strategy": "verl's engine backend (lite)",
    "use_dynamic_bsz": "verl's packing",
    "max_token_len_per_gpu": "verl's packing",
    "micro_batch_size_per_gpu": "verl's packing",
}
"""verl engine key (relative to ``engine.``) -> what the lite engine does with it; any other ``engine.*`` key is
refused before a run starts."""

LITE_OPTIM_OVERRIDES: dict[str, str] = {
    "use_precision_aware_optimizer": "OptimizerConfig.use_precision_aware_optimizer",
    "offload_fraction": "OptimizerConfig.offload_fraction",
    "optimizer_offload_fraction": "offload_fraction",
    "optimizer_cpu_offload": "offload_fraction=1.0",
    "decoupled_weight_decay": "OptimizerConfig.decoupled_weight_decay",
    "adam_eps": "OptimizerConfig.eps",
    "overlap_cpu_optimizer_d2h_h2d": "read, ignored",
}
"""``optim.override_optimizer_config`` children the lite engine reads (as verl_mlite's engine does)."""


def _sft_table(kind) -> dict[str, str]:
    """``field -> text`` of the RUN rows whose :attr:`~.schema.Option.verl_sft` is of ``kind``."""
    out = {}
    for r in RUN:
        m = r.verl_sft
        if isinstance(m, kind):
            out[r.field] = ("+" if m.add else "") + m.key if isinstance(m, Key) else getattr(m, "how", None) or m.reason
    return out


RUN_VERL_KEYS: dict[str, str] = _sft_table(Key)
"""``mlite run --trainer verl-sft``: RunConfig field -> the Hydra key it is written as (from the rows' ``verl_sft``;
values: see :mod:`mlite.launch.verl_sft`)."""

RUN_VERL_OTHER: dict[str, str] = _sft_table(Via)
"""``mlite run --trainer verl-sft``: RunConfig fields that reach verl another way than one Hydra key (the rows'
``verl_sft``)."""

RUN_VERL_NOT_RUN: dict[str, str] = _sft_table(NotExpressible)
"""``mlite run --trainer verl-sft``: RunConfig fields verl's SFT trainer does not run, and why (the rows'
``verl_sft``); a value other than the default is refused before anything starts."""
