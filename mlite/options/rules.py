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
