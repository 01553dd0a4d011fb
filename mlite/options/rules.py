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


def precision_mesh(o: Any, parallel: Any) -> None:
    """A profile's validated topology: the first Hopper blockwise profiles run with ``cp=1`` and ``pp=1``
    (contract: "``pp>1``, ``cp>1`` ... unsupported-combination error"; feature-composability.md @ 3565ae5c: the
    first Hopper FP8 strategies require ``cp=1``)."""
    p = _profile(o)
    for axis, limit in (("cp", p.max_cp), ("pp", p.max_pp)):
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
