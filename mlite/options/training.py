"""``TrainingOptions``: the one training vocabulary (what decides memory and what a run trains with), named as
Megatron-Core / mlite / verl name them, with its value lists. The estimator, ``mlite memory`` / ``export``, the
export plan and (composed) ``RunConfig`` use it; its optimizer rules are :mod:`.rules`, called through
:mod:`.optimizers`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import MliteError
from ..mesh.config import DEFAULT_GPUS_PER_NODE, DEFAULT_SEQ_LEN
from . import rules
from .optimizers import ALGORITHMS, BACKENDS, check_optimizer, inapplicable
from .precision import PRECISIONS

__all__ = [
    "ACTIVATION_MODELS",
    "ATTENTION",
    "DTYPES",
    "GPU_MEMORY_GIB",
    "LITE_DEVICES",
    "OPTIMIZERS",
    "OPTIMIZER_ALGORITHMS",
    "PARAM_DTYPES",
    "PRECISIONS",
    "RECOMPUTE",
    "RECOMPUTE_MODULES",
    "TrainingOptions",
    "inapplicable",
]

GPU_MEMORY_GIB = {
    "H100": 80.0,
    "H200": 141.0,
    "B200": 180.0,
    "B300": 288.0,
    "A100": 80.0,
    "A100-40": 40.0,
    "GB200": 186.0,
    "MI300X": 192.0,
    "L40S": 48.0,
}
"""Nominal device memory (GiB, as vendors state them) of common training GPUs."""

RECOMPUTE = ("none", "selective", "full")
"""Recompute granularities (Megatron's ``--recompute-granularity``)."""

OPTIMIZERS: tuple[str, ...] = tuple(BACKENDS)
"""mlite's optimizer backends registered at import (:data:`mlite.options.optimizers.BACKENDS`; its ``names`` are the
live list, which the table's choices read)."""
OPTIMIZER_ALGORITHMS = ALGORITHMS.names
"""Optimizer algorithms (live names of :data:`mlite.options.optimizers.ALGORITHMS`)."""
DTYPES = ("fp32", "bf16")
"""Storage dtypes of main grads and Adam moments."""
PARAM_DTYPES = ("bf16", "fp16", "fp32")
"""Parameter (compute) dtypes of the estimator."""
ATTENTION = ("flash", "unfused")
"""Attention kernels the estimator knows."""
ACTIVATION_MODELS = ("megatron", "lite")
"""Activation accounting: Megatron layers or the lite runtime's modules."""
LITE_DEVICES = ("cuda", "cpu")
"""Devices of a lite-runtime run (the estimator's view)."""


def _one_of(values) -> str:
    """``a, b or c``."""
    return ", ".join(values[:-1]) + " or " + values[-1]


RECOMPUTE_MODULES = (
    "core_attn",
    "attention",
    "mlp",
    "moe",
    "moe_act",
    "shared_experts",
    "layernorm",
    "mla_up_proj",
    "gdn",
)
"""Module names ``recompute_modules`` may hold: Megatron-Core's (``core_attn``, ``moe_act``, ``layernorm``,
``mla_up_proj``, ``mlp``, ``moe``, ``shared_experts``) and mlite's (``attention``, ``gdn``)."""


@dataclass(kw_only=True)
class TrainingOptions:
    """Everything besides the model and the mesh that decides per-GPU and host memory."""

    optimizer: str = "dist_opt"
    """Sharding backend: ``dist_opt`` (Megatron-Core DDP + distributed optimizer) or ``fsdp2`` (PyTorch
    fully_shard); see :data:`mlite.options.optimizers.BACKENDS`."""
    optimizer_algorithm: str = "adam"
    """Update algorithm (Megatron-Core's ``OptimizerConfig.optimizer``): ``adam``; see
    :data:`mlite.options.optimizers.ALGORITHMS`."""
    use_distributed_optimizer: bool = True
    """dist_opt only: shard optimizer state over DP x CP (dense) and EDP (experts); False keeps it whole."""
    use_precision_aware_optimizer: bool = False
    """Megatron's precision-aware optimizer (PAO): allows bf16 main grads, bf16 moments and param remainders."""
    main_grads_dtype: str = "fp32"
    """dist_opt's gradient buffer dtype (``fp32`` or ``bf16``; bf16 without PAO is Megatron's
    ``grad_reduce_in_fp32=False``); fsdp2 keeps gradients in the parameter dtype (only fp32, the default, passes)."""
    exp_avg_dtype: str = "fp32"
    """Adam first moment dtype (``fp32`` or ``bf16``; bf16 needs PAO)."""
    exp_avg_sq_dtype: str = "fp32"
    """Adam second moment dtype (``fp32`` or ``bf16``; bf16 needs PAO)."""
    store_param_remainders: bool = True
    """With PAO and bf16 params: keep only the low 16 bits of the fp32 master (int16), lossless; Megatron's default."""
    offload_fraction: float = 0.0
    """Share of the optimizer state moved to host RAM (Megatron ``optimizer_offload_fraction``; fsdp2 uses 1.0)."""
    # mfsdp (Megatron-FSDP) options: mlite.options.rules (mfsdp block) and mlite.memory.optimizer.mfsdp_bytes
    mfsdp_bucket_size: int = 40_000_000
    """mfsdp ``bucket_size`` (elements, C): bounds the all-gather / fp32 wgrad scratch and the host gradient ring."""
    mfsdp_grad_staging: str = "persistent"
    """mfsdp host gradient staging: ``persistent`` (today's ``_cpu_grad_bufs``, 4 B per offloaded element) or
    ``ring`` (the design's two-slot pinned ring, 4 x min(O, 2C) bytes)."""
    param_offload: bool = False
    """Runtime context offload: parameters move to CPU between training phases (verl ``param_offload``)."""
    optimizer_offload: bool = False
    """Runtime context offload: optimizer state moves to CPU between training phases (verl ``optimizer_offload``)."""
    grad_offload: bool = False
    """Runtime context offload: gradients move to CPU between training phases (verl ``grad_offload``)."""
    chunked_optimizer_state_offload: bool = False
    """dist_opt: Megatron-Core's chunked optimizer-state offload (``ChunkedOptimizerStateOffloader``): the selected
    bundles' moments and masters live in pinned host memory between steps and come back for the update, masters in
    one window, moments chunk by chunk (deprecated alias ``offload_optimizer_states``)."""
    optimizer_state_offload_chunk_size_mb: int = 0
    """MiB of moments restored per chunk (Megatron-Core's ``optimizer_state_offload_chunk_size_mb``; 0 restores all
    of the selected moments at once; the masters' window is never bounded by it)."""
    optimizer_state_offload_fraction: float = 1.0
    """Share of the parameter bundles (moments + master) chunked offload keeps on the host (Megatron-Core's
    ``optimizer_state_offload_fraction``; 0 disables it)."""
    offload_master_for_forward: bool = True
    """The Megatron Lite build moves the offloaded masters / PAO remainders to the host before forward and rollout
    (``offload_for_forward()``, ISEEKYAN/Megatron-LM#232, merged 2026-09-20); False models an older build, where
    they stay on the GPU through rollout and forward/backward."""
    muon_momentum: float = 0.95
    """muon: momentum (EMA) coefficient of the matrices' buffer (Megatron-Core ``muon_momentum``)."""
    muon_nesterov: bool = False
    """muon: Nesterov-style momentum (Megatron Lite ``muon_nesterov``, Megatron-Core ``muon_use_nesterov``)."""
    muon_num_ns_steps: int = 5
    """muon: Newton-Schulz iterations per step (``muon_num_ns_steps``)."""
    muon_coefficient_type: str = "quintic"
    """muon: Newton-Schulz coefficients, ``quintic`` (Megatron Lite's default, five tuned sets) or ``simple``
    (Keller Jordan's (3.4445, -4.7750, 2.0315) every step)."""
    muon_fp32_matmul_prec: str = "medium"
    """muon: ``medium`` runs the Newton-Schulz matmuls in bf16, ``high`` in fp32 (``muon_fp32_matmul_prec``)."""
    muon_extra_scale_factor: float = 1.0
    """muon: multiplies the spectral scale sqrt(max(rows, cols)); the effective step is lr x this factor (Megatron-Core's
    1.0 is ~4.4x AdamW's step: see ``muon_match_adamw_update_rms``)."""
    muon_match_adamw_update_rms: bool = False
    """muon: derive ``muon_extra_scale_factor`` = sqrt((1 - beta1) / (1 + beta1)) from AdamW's beta1 (0.229 at 0.9;
    Megatron Lite ``muon_match_adamw_update_rms``)."""
    engram_trainable: bool = False
    """N-gram memory tables (DeepSeek-V4.1's Engram) trained: FP32 master + main grad + momentum beside the FP8 rows
    (Megatron Lite's ``ImplConfig.trainable_engram``); False keeps them frozen (FP8 + scales only)."""
    param_dtype: str = "bf16"
    """Parameter (and compute) dtype: ``bf16``, ``fp16`` or ``fp32``."""
    precision: str = "bf16"
    """Megatron Lite's precision profile (``MegatronLiteConfig.precision``): ``bf16``,
    ``hopper_blockwise_bf16_weight``, ``hopper_blockwise_fp8_weight`` (FP8 GEMM weights, fsdp2 only) or
    ``mxfp8_fp8_weight`` (Blackwell); see :mod:`mlite.options.precision`."""
    seq_len: int = DEFAULT_SEQ_LEN
    """Tokens per sequence (per micro-batch row)."""
    micro_batch_size: int = 1
    """Sequences per micro-batch."""
    num_microbatches: int = 8
    """Micro-batches per optimizer step (gradient accumulation / pipeline depth)."""
    recompute: str = "none"
    """``none``, ``selective`` (attention core recomputed), ``full`` (each layer's input kept only)."""
    recompute_modules: tuple[str, ...] = ()
    """mlite module names recomputed in addition (e.g. ``("mlp",)``, ``("moe",)``, ``("core_attn",)``, ``("gdn",)``)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism (activations split over TP); forced on for MoE with TP > 1."""
    attention: str = "flash"
    """``flash`` (TE / flash-attn kernels: no score matrix) or ``unfused`` (Megatron's local spec: scores kept)."""
    dropout: bool = False
    """Hidden/attention dropout masks stored (Korthikanti's GPT cases); LLM fine-tuning runs without."""
    fused_cross_entropy: bool = False
    """Cross-entropy fused with the output layer (no fp32 copy of the logits kept)."""
    activation_model: str = "megatron"
    """``megatron`` (Korthikanti/Megatron layers) or ``lite`` (the kit's lite runtime: what its modules save)."""
    lite_device: str = "cuda"
    """Device of the run: ``cuda`` (fused RMSNorm) or ``cpu`` (composite RMSNorm keeps fp32 copies; CPU oracles)."""
    gpu_memory_gib: float = 80.0
    """Device memory in GiB (H100 80, H200 141, B200 180; see GPU_MEMORY_GIB)."""
    gpu: str = ""
    """The GPU model when known (a name of GPU_MEMORY_GIB; ``--gpu-mem H100`` sets it, and a ``gpu_memory_gib``
    only one GPU of the table has: 141 is an H200); empty: unknown (80 GiB is an H100 or an A100), and the hardware
    rules of the precision profiles are then not checked."""
    headroom: float = 0.05
    """Share of device memory kept free (allocator fragmentation, spikes) in the fits verdict."""
    framework_overhead_gib: float = 2.0
    """CUDA context, NCCL buffers and workspace outside PyTorch's allocator (documented guess, GiB)."""
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    """GPU processes per node (host memory per node)."""
    extra: dict = field(default_factory=dict)
    """Free-form notes carried along (not used by the estimate)."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise :class:`MliteError` naming the first inconsistent option."""
        for name in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            if getattr(self, name) not in DTYPES:
                raise MliteError(f"{name} must be {_one_of(DTYPES)}, got {getattr(self, name)!r}")
        if self.param_dtype not in PARAM_DTYPES:
            raise MliteError(f"param_dtype must be {_one_of(PARAM_DTYPES)}, got {self.param_dtype!r}")
        rules.mfsdp_grad_staging_known(self)  # a vocabulary (its value list is rules.MFSDP_GRAD_STAGING)
        if self.precision not in PRECISIONS:
            raise MliteError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        self.gpu = str(self.gpu or "").upper()
        if not self.gpu:  # a device memory only one GPU of the table has names it (141 GiB: H200)
            same = [g for g, gib in GPU_MEMORY_GIB.items() if gib == float(self.gpu_memory_gib)]
            self.gpu = same[0] if len(same) == 1 else ""
        if self.gpu and self.gpu not in GPU_MEMORY_GIB:
            raise MliteError(f"gpu must be one of {', '.join(GPU_MEMORY_GIB)} (or empty: unknown), got {self.gpu!r}")
        check_optimizer(self)  # backend, algorithm, offload range, what each refuses (mlite.options.rules)
        rules.check_precision(self)  # the precision profile's state dtypes and GPU (mlite.options.precision)
        if self.recompute not in RECOMPUTE:
            raise MliteError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        if self.attention not in ATTENTION:
            raise MliteError(f"attention must be {_one_of(ATTENTION)}, got {self.attention!r}")
        if self.lite_device not in LITE_DEVICES:
            raise MliteError(f"lite_device must be {_one_of(LITE_DEVICES)}, got {self.lite_device!r}")
        if self.activation_model not in ACTIVATION_MODELS:
            raise MliteError(f"activation_model must be {_one_of(ACTIVATION_MODELS)}, got {self.activation_model!r}")
        for name in ("seq_len", "micro_batch_size", "num_microbatches", "gpus_per_node"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise MliteError(f"{name} must be a positive integer, got {v!r}")
        if not 0.0 < float(self.gpu_memory_gib) < float("inf"):
            raise MliteError(f"gpu_memory_gib must be a finite positive number, got {self.gpu_memory_gib}")
        if not 0.0 <= float(self.headroom) < 1.0:
            raise MliteError(f"headroom must be in [0, 1) (a share of device memory kept free), got {self.headroom}")
        if not 0.0 <= float(self.framework_overhead_gib) < float("inf"):
            raise MliteError(f"framework_overhead_gib must be a finite number >= 0, got {self.framework_overhead_gib}")
        if isinstance(self.recompute_modules, str):
            self.recompute_modules = tuple(m for m in self.recompute_modules.split(",") if m)
        unknown = [m for m in self.recompute_modules if m not in RECOMPUTE_MODULES]
        if unknown:
            raise MliteError(
                f"recompute_modules: {', '.join(map(repr, unknown))} is not a module name; use "
                f"{', '.join(RECOMPUTE_MODULES)}"
            )

    @property
    def pao(self) -> bool:
        return self.use_precision_aware_optimizer

    def to_dict(self) -> dict:
        return asdict(self)
