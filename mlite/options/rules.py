"""The training-option rules, each written once: a small function that raises :class:`~mlite.errors.MliteError` with
the one message of its rule. :class:`~mlite.options.training.TrainingOptions` (the estimator, ``mlite memory``,
``mlite export``), :class:`~mlite.launch.RunConfig` (``mlite run``) and the runtime's
:class:`~mlite.runtime.config.OptimizerConfig` call them (through :func:`mlite.options.optimizers.check_optimizer`),
so every layer refuses the same input with the same line.

A rule reads the settings by their Megatron-Core names from any object that has them (``TrainingOptions``,
``OptimizerConfig``): ``use_precision_aware_optimizer`` (None reads as False), ``use_distributed_optimizer``,
``main_grads_dtype``, ``exp_avg_dtype``, ``exp_avg_sq_dtype``, ``offload_fraction`` (None reads as 0). Which
backend or algorithm refuses what is declared on its entry in :mod:`mlite.options.optimizers`.

Sources (Megatron-Core, ``megatron/core/optimizer/optimizer_config.py`` at core_v0.16.1): bf16 ``exp_avg_dtype`` /
``exp_avg_sq_dtype`` and ``store_param_remainders`` act only with ``use_precision_aware_optimizer``; the
precision-aware optimizer is implemented by the distributed optimizer only.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import MliteError

MOMENTS = ("exp_avg_dtype", "exp_avg_sq_dtype")
"""The moment-dtype fields (``--moment-dtype`` sets both)."""


def _pao(o: Any) -> bool:
    return bool(o.use_precision_aware_optimizer)


def offload_fraction_in_range(o: Any) -> None:
    """``offload_fraction`` is a number in [0, 1] (None: 0)."""
    f = o.offload_fraction
    if f is None:
        return
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not (math.isfinite(f) and 0.0 <= f <= 1.0):
        raise MliteError(
            f"offload_fraction: {f!r} must be a number in [0, 1] (the share of the optimizer state on the host; "
            "mlite's fsdp2 uses 1.0)"
        )


def bf16_moments_need_pao(o: Any) -> None:
    """bf16 Adam moments need the precision-aware optimizer (Megatron-Core's rule)."""
    if _pao(o):
        return
    for name in MOMENTS:
        if getattr(o, name) == "bf16":
            raise MliteError(
                f"{name}: bf16 needs use_precision_aware_optimizer (the precision-aware optimizer), as in "
                "Megatron-Core; add --pao or keep fp32"
            )


def pao_needs_distributed_optimizer(o: Any) -> None:
    """dist_opt: the precision-aware optimizer needs the distributed optimizer (Megatron-Core's rule)."""
    if _pao(o) and not o.use_distributed_optimizer:
        raise MliteError(
            "use_distributed_optimizer: the precision-aware optimizer needs the distributed optimizer (as in "
            "Megatron-Core); drop --no-distributed-optimizer or --pao"
        )


def grads_in_param_dtype(o: Any) -> None:
    """fsdp2: gradients stay in the parameter dtype, so a ``main_grads_dtype`` other than fp32 is refused."""
    if o.main_grads_dtype != "fp32":
        raise MliteError(
            f"main_grads_dtype: {o.main_grads_dtype} is dist_opt's gradient buffer; fsdp2 keeps its gradients in the "
            "parameter dtype; use --optimizer dist_opt or drop --grad-dtype"
        )


def always_sharded(o: Any) -> None:
    """fsdp2: the state is always sharded, so ``use_distributed_optimizer=False`` (plain DDP) is refused."""
    if not o.use_distributed_optimizer:
        raise MliteError(
            "use_distributed_optimizer: --no-distributed-optimizer is a dist_opt setting (plain DDP); "
            "use --optimizer dist_opt or drop it"
        )


def state_on_device(o: Any) -> None:
    """The lite runtime's dist_opt keeps its state on the device: ``offload_fraction`` > 0 is refused there."""
    if o.offload_fraction:
        raise MliteError(
            f"offload_fraction: {o.offload_fraction} is not run by the lite runtime's dist_opt (its state stays on "
            "the device); use --optimizer fsdp2 for an offloaded optimizer, or offload_fraction 0"
        )


def no_pao(o: Any) -> None:
    """An algorithm the precision-aware optimizer does not run (Megatron-Core: PAO runs Adam only)."""
    if _pao(o):
        raise MliteError(
            f"use_precision_aware_optimizer: the precision-aware optimizer does not run {o.optimizer_algorithm} (as "
            "in Megatron-Core, it runs adam only); drop --pao or choose --optimizer-algorithm adam"
        )


# ------------------------------------------------------------------------ chunked optimizer-state offload
CHUNKED_SOURCE = (
    "Megatron-Core dev OptimizerConfig.__post_init__, NVIDIA/Megatron-LM megatron/core/optimizer/optimizer_config.py "
    "@ d48bd6be (#6244, 9050d4c5fb)"
)
"""Where the chunked optimizer-state offload rules come from (named in each refusal)."""

CHUNKED_ALGORITHMS = ("adam",)
"""Algorithms the kit runs under chunked offload: Megatron-Core's Adam on ``DistributedOptimizer``. Megatron-Core
also offloads BF16 Muon on ``LayerWiseDistributedOptimizer``, a layout the kit does not model, and Megatron Lite's
Muon refuses CPU offload (ISEEKYAN/Megatron-LM ``examples/muon/README.md`` @ 045fc78a)."""


def chunked_offload_on(o: Any) -> bool:
    """Chunked offload is in effect: ``chunked_optimizer_state_offload`` with ``optimizer_state_offload_fraction``
    > 0 (a fraction of 0 is a full disable even with the flag on: "no manager ... is installed",
    megatron/core/optimizer/cpu_offloading/README.md @ d48bd6be). Absent fields read as off."""
    if not getattr(o, "chunked_optimizer_state_offload", False):
        return False
    f = getattr(o, "optimizer_state_offload_fraction", 1.0)
    return isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0


def chunked_offload(o: Any, backend: Any) -> None:
    """Every rule of Megatron-Core's chunked optimizer-state offload (``ChunkedOptimizerStateOffloader``) for the
    settings ``o`` on ``backend`` (a :class:`~mlite.options.optimizers.Backend`): the chunk size is an integer >= 0
    (MiB; 0 restores all selected state at once), the fraction is in [0, 1]; when it is on (:func:`chunked_offload_on`)
    the backend has it (Megatron-Core's distributed optimizer: ``Backend.chunked_state_offload``), the algorithm is
    Adam, the distributed optimizer shards the state ("Adam optimizer state offload requires
    use_distributed_optimizer") and ``offload_fraction`` (HybridDeviceOptimizer, ``optimizer_cpu_offload``) is 0
    ("chunked_optimizer_state_offload and optimizer_cpu_offload are mutually exclusive"). Source:
    :data:`CHUNKED_SOURCE`."""
    size = getattr(o, "optimizer_state_offload_chunk_size_mb", 0)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise MliteError(
            f"optimizer_state_offload_chunk_size_mb: {size!r} must be an integer >= 0 (MiB of optimizer state "
            f"restored per chunk; 0 restores all of it at once), as in {CHUNKED_SOURCE}"
        )
    f = getattr(o, "optimizer_state_offload_fraction", 1.0)
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not (math.isfinite(f) and 0.0 <= f <= 1.0):
        raise MliteError(
            f"optimizer_state_offload_fraction: {f!r} must be a number in [0, 1] (the share of the parameter bundles "
            f"whose state and masters live on the host), as in {CHUNKED_SOURCE}"
        )
    if not chunked_offload_on(o):
        return
    if not getattr(backend, "chunked_state_offload", False):
        raise MliteError(
            f"chunked_optimizer_state_offload: {backend.name} has no chunked optimizer-state offload, so "
            "optimizer_state_offload_chunk_size_mb and optimizer_state_offload_fraction do not apply either (it is "
            f"Megatron-Core's distributed-optimizer feature, {CHUNKED_SOURCE}); use --optimizer dist_opt or drop "
            "--chunked-optimizer-state-offload"
        )
    if o.optimizer_algorithm not in CHUNKED_ALGORITHMS:
        raise MliteError(
            f"chunked_optimizer_state_offload: {o.optimizer_algorithm} is not offloaded in chunks here (the kit runs "
            f"it for {', '.join(CHUNKED_ALGORITHMS)} on the distributed optimizer, {CHUNKED_SOURCE}); choose "
            "--optimizer-algorithm adam or drop --chunked-optimizer-state-offload"
        )
    if not o.use_distributed_optimizer:
        raise MliteError(
            "use_distributed_optimizer: chunked optimizer-state offload of Adam needs the distributed optimizer "
            f'("Adam optimizer state offload requires use_distributed_optimizer", {CHUNKED_SOURCE}); drop '
            "--no-distributed-optimizer or --chunked-optimizer-state-offload"
        )
    if o.offload_fraction:
        raise MliteError(
            f"offload_fraction: {o.offload_fraction} runs Megatron-Core's HybridDeviceOptimizer "
            '(optimizer_cpu_offload), and "chunked_optimizer_state_offload and optimizer_cpu_offload are mutually '
            f'exclusive" ({CHUNKED_SOURCE}); set the chunked share with --optimizer-state-offload-fraction and drop '
            "--offload-fraction, or drop --chunked-optimizer-state-offload"
        )


# ---------------------------------------------------------------------------------------------- mfsdp (Megatron-FSDP)
# Sources (ISEEKYAN/Megatron-LM, experimental/lite/megatron/lite/primitive/optimizers/mfsdp/config.py @ 0d14590c):
# ``build_mfsdp_config`` accepts only ``sharding_strategy="optim_grads_params"`` and fp32 main params / grads without
# PAO; ``validate_optimization_knobs`` rejects the HSDP aliases and ``num_distributed_optimizer_instances > 1`` and
# requires ``use_distributed_optimizer=True``; ``validate_mfsdp_config`` raises on ``CUDA_DEVICE_MAX_CONNECTIONS=1``.
# Resuming with another ``offload_fraction`` is out of scope (docs/mfsdp-fsdp2-style-cpu-offload-design.md @ adcd21d0,
# §Checkpoint and resume).

MFSDP_CONFIG_SOURCE = (
    "ISEEKYAN/Megatron-LM experimental/lite/megatron/lite/primitive/optimizers/mfsdp/config.py @ 0d14590c"
)
"""Where the mfsdp rules come from (named in their messages)."""
MFSDP_DESIGN_SOURCE = "ISEEKYAN/Megatron-LM experimental/lite/docs/mfsdp-fsdp2-style-cpu-offload-design.md @ adcd21d0"
"""The M-FSDP offload design document (byte accounting, checkpoint contract)."""
MFSDP_SHARDING = "optim_grads_params"
"""The one ``sharding_strategy`` M-FSDP in Megatron Lite supports."""


MFSDP_HSDP_KEYS = ("use_hsdp", "hsdp")
"""HSDP aliases M-FSDP rejects (``_UNSUPPORTED_OPTIMIZATION_KNOBS``)."""
MFSDP_UNSHIPPED_KEYS = (
    "nccl_ub",
    "fsdp_double_buffer",
    "megatron_fsdp_max_pool_double_buffer",
    "maxpool_double_buffer",
    "fsdp_manual_registration",
    "disable_symmetric_registration",
)
"""Buffer knobs M-FSDP "does not ship" (``_UNSHIPPED_BUFFER_KNOBS``)."""
MFSDP_STRATEGY_KEYS = ("mfsdp_sharding_strategy", "data_parallel_sharding_strategy", "megatron_fsdp_sharding_strategy")
"""Keys ``build_mfsdp_config`` reads the sharding strategy from (first found wins)."""


def _truthy(v: Any) -> bool:
    if v is None or v is False:
        return False
    if isinstance(v, (int, float)) and v == 0:
        return False
    return not (isinstance(v, str) and v.strip().lower() in ("", "0", "false", "none", "null", "off"))


def mfsdp_overrides(values: Any) -> None:
    """mfsdp: the ``optim.override_optimizer_config`` keys M-FSDP refuses (``build_mfsdp_config`` and
    ``validate_optimization_knobs``): a sharding strategy other than ``optim_grads_params``, the HSDP aliases,
    ``num_distributed_optimizer_instances > 1`` and the unshipped buffer knobs."""
    for key in MFSDP_STRATEGY_KEYS:
        if key in values:
            s = str(values[key])
            if s != MFSDP_SHARDING:
                raise MliteError(
                    f"{key}: {s!r} is not supported by Megatron Lite's M-FSDP (only {MFSDP_SHARDING}; "
                    f"{MFSDP_CONFIG_SOURCE}, build_mfsdp_config); set it to {MFSDP_SHARDING} or drop it"
                )
            break
    for key in MFSDP_HSDP_KEYS:
        if _truthy(values.get(key)):
            raise MliteError(
                f"{key}: HSDP is refused by Megatron Lite's M-FSDP ({MFSDP_CONFIG_SOURCE}, "
                "validate_optimization_knobs); drop it (num_distributed_optimizer_instances stays 1)"
            )
    n = values.get("num_distributed_optimizer_instances")
    if n is not None and str(n).strip().lower() not in ("", "none", "null"):
        try:
            k = int(str(n))
        except ValueError:
            k = 0
        if k != 1:
            raise MliteError(
                f"num_distributed_optimizer_instances: {n!r} is refused by Megatron Lite's M-FSDP (only 1: "
                f"num_distributed_optimizer_instances>1 is not supported; {MFSDP_CONFIG_SOURCE}, "
                "validate_optimization_knobs); set it to 1"
            )
    for key in MFSDP_UNSHIPPED_KEYS:
        if _truthy(values.get(key)):
            raise MliteError(
                f"{key}: Megatron Lite's M-FSDP does not ship it ({MFSDP_CONFIG_SOURCE}, "
                "_reject_unshipped_buffer_knobs); drop it (the default allocator path)"
            )


def mfsdp_fp32_main_grads(o: Any) -> None:
    """mfsdp: the main gradients are fp32 (``megatron_fsdp_main_grads_dtype``; bf16 only with PAO's decoupled grads,
    which mlite does not model), so ``main_grads_dtype`` other than fp32 is refused."""
    if o.main_grads_dtype != "fp32":
        raise MliteError(
            f"main_grads_dtype: {o.main_grads_dtype} is dist_opt's gradient buffer; M-FSDP keeps fp32 main grads "
            f"({MFSDP_CONFIG_SOURCE}, build_mfsdp_config); drop --grad-dtype or use --optimizer dist_opt"
        )


def mfsdp_sharded(o: Any) -> None:
    """mfsdp: ``use_distributed_optimizer=True`` is required (the state is always sharded)."""
    if not o.use_distributed_optimizer:
        raise MliteError(
            "use_distributed_optimizer: M-FSDP requires use_distributed_optimizer=True "
            f"({MFSDP_CONFIG_SOURCE}, validate_optimization_knobs); drop --no-distributed-optimizer"
        )


def mfsdp_bucket_size_positive(o: Any) -> None:
    """mfsdp: ``bucket_size`` (elements, the bound of the gather scratch and of the host gradient ring) is positive."""
    c = getattr(o, "mfsdp_bucket_size", 40_000_000)
    if isinstance(c, bool) or not isinstance(c, int) or c <= 0:
        raise MliteError(
            f"mfsdp_bucket_size: {c!r} must be a positive element count (M-FSDP bucket_size, default 40000000; "
            f"{MFSDP_CONFIG_SOURCE}, build_mfsdp_config)"
        )


MFSDP_GRAD_STAGING = ("persistent", "ring")
"""Host gradient staging of the offloaded part: ``persistent`` (today's ``_cpu_grad_bufs``: one pinned fp32 buffer
per offloaded element, 4 bytes each) or ``ring`` (the design's two-slot pinned ring, at most 2 x bucket_size)."""


def mfsdp_grad_staging_known(o: Any) -> None:
    """mfsdp: the host gradient staging is ``persistent`` or ``ring``."""
    s = getattr(o, "mfsdp_grad_staging", "persistent")
    if s not in MFSDP_GRAD_STAGING:
        raise MliteError(
            f"mfsdp_grad_staging: {s!r} must be persistent (today's _cpu_grad_bufs, 4 B per offloaded element) or "
            f"ring (the bounded two-slot ring of {MFSDP_DESIGN_SOURCE})"
        )


def no_single_device_connection(env) -> None:
    """mfsdp: the launch environment must not set ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (``validate_mfsdp_config``
    raises on it; the Megatron launchers and mlite's exported SFT / GRPO launchers set it for dist_opt)."""
    if str(env.get("CUDA_DEVICE_MAX_CONNECTIONS", "")).strip() == "1":
        raise MliteError(
            "CUDA_DEVICE_MAX_CONNECTIONS: 1 is refused by Megatron-FSDP (it requires > 1 or unset; "
            f"{MFSDP_CONFIG_SOURCE}, validate_mfsdp_config); unset it or set it to 8 for --optimizer mfsdp"
        )


def mfsdp_no_pao_lite(o: Any) -> None:
    """The lite runtime's mfsdp keeps fp32 main params and grads and fp32 moments: PAO is refused there."""
    if _pao(o):
        raise MliteError(
            "use_precision_aware_optimizer: the lite runtime's mfsdp keeps fp32 main params, grads and moments (PAO's "
            "decoupled grads are not built); drop --pao or use --optimizer fsdp2"
        )


def mfsdp_resume_rule(old_options: Any, new_options: Any) -> None:
    """Resuming an mfsdp checkpoint with another ``offload_fraction`` is unsupported: the checkpoint envelope
    ``{"gpu": ..., "cpu": ...}`` records the offload partition and loading validates it (design doc §Checkpoint and
    resume: "Changing the fraction at load is out of scope"). ``old_options`` / ``new_options``: the options of the
    saved and of the resuming run (anything with ``optimizer`` and ``offload_fraction``); no-op unless both are
    mfsdp."""
    if getattr(old_options, "optimizer", None) != "mfsdp" or getattr(new_options, "optimizer", None) != "mfsdp":
        return
    old, new = float(old_options.offload_fraction or 0.0), float(new_options.offload_fraction or 0.0)
    if old != new:
        raise MliteError(
            f"offload_fraction: resuming an mfsdp checkpoint saved with offload_fraction {old:g} at {new:g} is "
            f"unsupported (the checkpoint holds the offload partition; {MFSDP_DESIGN_SOURCE}, §Checkpoint and "
            f"resume); resume with --offload-fraction {old:g}"
        )


def mfsdp_lite_mesh(optimizer: str, tp: int, ep: int) -> None:
    """The lite runtime's mfsdp runs DP x CP only: TP > 1 and EP > 1 are refused (its fp32 ``main_grad`` bypasses the
    TP partial-gradient sum and the EP divide factors, which act on FSDP2's ``.grad``). ``mlite run`` checks it
    before anything starts, the runtime's backend again."""
    if optimizer == "mfsdp" and (tp > 1 or ep > 1):
        raise MliteError(
            f"optimizer: the lite runtime's mfsdp runs data and context parallelism only (tp {tp}, ep {ep}); use "
            "--tp 1 --ep 1, or --optimizer fsdp2 for a TP / EP run"
        )


# ---------------------------------------------------------------------------------------------- precision profiles
# The profiles and their sources: mlite.options.precision. A rule reads ``precision`` (absent: bf16, as on the
# runtime's OptimizerConfig) and, for the hardware rule, ``gpu`` (empty: not known).


def _profile(o: Any):
    from .precision import profile

    return profile(getattr(o, "precision", "bf16") or "bf16")


def fp8_weights_need_fsdp2(o: Any) -> None:
    """dist_opt: FP8 compute weights are not trained by the distributed optimizer (the fork's
    ``require_optimizer_supports_precision``: ``FP8_WEIGHT_SUPPORTED_OPTIMIZERS = {"fsdp2"}``; its FP8 write-back
    needs Megatron's ``fp8_param_gather``, so the FP8 weights would stay stale)."""
    p = _profile(o)
    if p.fp8_weights:
        raise MliteError(
            f"precision: {p.name} stores FP8 compute weights, which {o.optimizer} would train stale "
            "(require_optimizer_supports_precision allows fsdp2 only: ISEEKYAN/Megatron-LM experimental/lite/"
            "docs/runs/hopper-blockwise-fp8-weight-fsdp2.md @ 2e50cb4a); use --optimizer fsdp2 or --precision "
            "hopper_blockwise_bf16_weight"
        )


def precision_fp32_state(o: Any) -> None:
    """A precision profile's parameter contract fixes FP32 master, main gradients and optimizer state (and BF16
    public parameters): PAO, bf16 gradients or moments and other parameter dtypes are refused."""
    p = _profile(o)
    if not p.fp32_state:
        return
    bad = []
    if o.use_precision_aware_optimizer:
        bad.append("--pao")
    if getattr(o, "main_grads_dtype", "fp32") != "fp32":
        bad.append("--grad-dtype bf16")
    if any(getattr(o, m, "fp32") != "fp32" for m in MOMENTS):
        bad.append("--moment-dtype bf16")
    if getattr(o, "param_dtype", "bf16") != "bf16":
        bad.append(f"--param-dtype {o.param_dtype}")
    if bad:
        raise MliteError(
            f"precision: {p.name} keeps BF16 parameters with an FP32 master, FP32 main grads and FP32 optimizer "
            f"state (lower precision is an unsupported combination: {p.source}); drop {', '.join(bad)}"
        )


def precision_gpu(o: Any) -> None:
    """A profile runs on the GPUs its recipe supports: Hopper blockwise on SM90 or later (TE's
    ``check_fp8_block_scaling_support``), MXFP8 on Blackwell (SM100+); checked when the GPU is known."""
    from .precision import GPU_SM

    p = _profile(o)
    gpu = (getattr(o, "gpu", "") or "").upper()
    if not p.min_sm or not gpu or gpu not in GPU_SM:
        return
    sm = GPU_SM[gpu]
    if sm < p.min_sm:
        fit = ", ".join(g for g, s in GPU_SM.items() if s >= p.min_sm)
        has = f"is SM{sm}" if sm else "is not an NVIDIA GPU (no Transformer Engine FP8 recipe)"
        raise MliteError(
            f"precision: {p.name} needs SM{p.min_sm} or later and {gpu} {has} ({p.source}); "
            f"use a GPU such as {fit} (--gpu) or another --precision"
        )


PRECISION_MESH_AXES = ("cp", "pp")
"""The mesh sizes :func:`precision_mesh` reads (its verdict is a function of these and the options)."""


def precision_mesh(o: Any, parallel: Any) -> None:
    """A profile's validated topology: the first Hopper blockwise profiles run with ``cp=1`` and ``pp=1``
    (contract: "``pp>1``, ``cp>1`` ... unsupported-combination error"; feature-composability.md @ 3565ae5c: the
    first Hopper FP8 strategies require ``cp=1``)."""
    p = _profile(o)
    for axis, limit in zip(PRECISION_MESH_AXES, (p.max_cp, p.max_pp)):
        v = getattr(parallel, axis, 1)
        if limit is not None and v > limit:
            raise MliteError(
                f"{axis}: {v} is not validated with precision {p.name} (its first profile runs {axis}={limit}: "
                f"{p.source}; ISEEKYAN/Megatron-LM experimental/lite/docs/feature-composability.md @ 3565ae5c); "
                f"use --{axis} {limit} or --precision bf16"
            )


def check_precision(o: Any) -> None:
    """The precision rules that need no mesh (the profile exists, its FP32 state, its GPU)."""
    _profile(o)
    precision_fp32_state(o)
    precision_gpu(o)


# ---------------------------------------------------------------------------------------------- Muon
# Sources (ISEEKYAN/Megatron-LM, experimental/lite): ``examples/muon/README.md`` @ 045fc78a (Muon runs on the DistOpt
# path only; not supported: padded LayerWise layout, overlapped grad reduce / param gather, FP8/FP4 param gather,
# the precision-aware optimizer, optimizer CPU offload; the AdamW-matching ``muon_extra_scale_factor``);
# ``docs/muon_post_training.md`` @ a0ff8077 (DAPO/GRPO with Muon is "research-only", AdamW for production RL).

MUON_SOURCE = "ISEEKYAN/Megatron-LM experimental/lite/examples/muon/README.md @ 045fc78a"
"""Where the Muon refusals come from (named in each message)."""
MUON_RL_SOURCE = "ISEEKYAN/Megatron-LM experimental/lite/docs/muon_post_training.md @ a0ff8077"
"""Where the research-only label of Muon in RL comes from."""
MUON_FIELDS = (
    "muon_momentum",
    "muon_nesterov",
    "muon_num_ns_steps",
    "muon_coefficient_type",
    "muon_fp32_matmul_prec",
    "muon_extra_scale_factor",
    "muon_match_adamw_update_rms",
)
"""The Muon settings (the same names on TrainingOptions and the runtime's OptimizerConfig)."""
MUON_BACKENDS = ("dist_opt",)
"""Backends Megatron Lite runs Muon on."""
MUON_COEFFICIENTS = ("quintic", "simple")
"""Newton-Schulz coefficient sets (Emerging-Optimizers ``muon_utils._COEFFICIENT_SETS``): ``quintic`` (five tuned
steps, Megatron Lite's default ``muon_coefficient_type``) and ``simple`` (Keller Jordan's (3.4445, -4.7750, 2.0315)
every step)."""
MUON_MATMUL_PREC = ("medium", "high")
"""``muon_fp32_matmul_prec``: ``medium`` runs the Newton-Schulz matmuls in bf16 (Megatron's default), ``high`` in
fp32."""


def muon_needs_dist_opt(o: Any) -> None:
    """muon: only Megatron Lite's DistOpt path runs it (fsdp2 and mfsdp are refused)."""
    if o.optimizer not in MUON_BACKENDS:
        raise MliteError(
            f"optimizer: muon runs on dist_opt only, not {o.optimizer} (Megatron Lite supports Muon through the "
            f"DistOpt path only: {MUON_SOURCE}); use --optimizer dist_opt or --optimizer-algorithm adam"
        )


def muon_no_pao(o: Any) -> None:
    """muon: the precision-aware optimizer is not supported."""
    if _pao(o):
        raise MliteError(
            "use_precision_aware_optimizer: muon does not run with the precision-aware optimizer (a current "
            f"limitation of Megatron Lite's Muon: {MUON_SOURCE}); drop --pao"
        )


def muon_no_cpu_offload(o: Any) -> None:
    """muon: no optimizer CPU offload (``offload_fraction`` > 0 or chunked optimizer-state offload)."""
    if o.offload_fraction:
        raise MliteError(
            f"offload_fraction: {o.offload_fraction} offloads the optimizer to the CPU, which Megatron Lite's Muon "
            f"does not support ({MUON_SOURCE}); set --offload-fraction 0"
        )
    if chunked_offload_on(o):
        raise MliteError(
            "chunked_optimizer_state_offload: Megatron Lite's Muon does not support optimizer CPU offload "
            f"({MUON_SOURCE}); drop --chunked-optimizer-state-offload"
        )


def muon_settings(o: Any) -> None:
    """muon: momentum in [0, 1), at least one Newton-Schulz step (a multiple of the coefficient set's length),
    a known coefficient set and matmul precision, a positive finite extra scale factor, and the AdamW-matching
    factor asked for without an explicit one (Megatron Lite raises on both)."""
    m = getattr(o, "muon_momentum", 0.95)
    if isinstance(m, bool) or not isinstance(m, (int, float)) or not (math.isfinite(m) and 0.0 <= m < 1.0):
        raise MliteError(f"muon_momentum: {m!r} must be a number in [0, 1) (default 0.95)")
    coeff = getattr(o, "muon_coefficient_type", "quintic")
    if coeff not in MUON_COEFFICIENTS:
        raise MliteError(f"muon_coefficient_type: {coeff!r} must be one of {', '.join(MUON_COEFFICIENTS)}")
    steps = getattr(o, "muon_num_ns_steps", 5)
    per = 5 if coeff == "quintic" else 1
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1 or steps % per:
        raise MliteError(
            f"muon_num_ns_steps: {steps!r} must be a positive integer"
            + (" and a multiple of 5 for the quintic coefficient sets" if per > 1 else "")
            + " (Emerging-Optimizers newton_schulz; default 5)"
        )
    prec = getattr(o, "muon_fp32_matmul_prec", "medium")
    if prec not in MUON_MATMUL_PREC:
        raise MliteError(f"muon_fp32_matmul_prec: {prec!r} must be one of {', '.join(MUON_MATMUL_PREC)}")
    s = getattr(o, "muon_extra_scale_factor", 1.0)
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not (math.isfinite(s) and s > 0):
        raise MliteError(f"muon_extra_scale_factor: {s!r} must be a finite number > 0 (Megatron-Core's default 1.0)")
    if getattr(o, "muon_match_adamw_update_rms", False) and s != 1.0:
        raise MliteError(
            "muon_match_adamw_update_rms: it derives muon_extra_scale_factor from adam_beta1, and setting it "
            f"together with an explicit muon_extra_scale_factor ({s!r}) raises in Megatron Lite ({MUON_SOURCE}); "
            "drop one of them"
        )


def adamw_matching_scale(beta1: float) -> float:
    """The ``muon_extra_scale_factor`` that matches AdamW's update RMS: sqrt((1 - beta1) / (1 + beta1)) (0.229416 at
    beta1 = 0.9; :data:`MUON_SOURCE`)."""
    return math.sqrt((1.0 - beta1) / (1.0 + beta1))


def muon_rl_research_only(algorithm: str, rl: bool) -> str | None:
    """The warning for Muon in an RL (GRPO / DAPO / PPO) run: research-only upstream (not a refusal); None when it
    does not apply."""
    if algorithm != "muon" or not rl:
        return None
    return (
        "optimizer_algorithm: muon in RL post-training is research-only in Megatron Lite (DAPO/GRPO recipe lr 1e-6, "
        f"10-step warmup; AdamW recommended for production RL: {MUON_RL_SOURCE})"
    )
