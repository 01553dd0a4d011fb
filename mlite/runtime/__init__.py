"""The lite runtime: Megatron Lite's vocabulary on FSDP2, for single-node debug runs (CPU, one GPU, one node).

Submodules (imported lazily, so ``import mlite.runtime`` stays cheap): ``batch`` (:class:`PackedBatch`),
``models`` (:func:`build_lite_model`), ``gdn`` (Gated DeltaNet ops), ``data`` (tokenizer, SFT dataset, packing),
and the runtime core (config, optimizer, FSDP2, ``create_runtime``).
"""

from __future__ import annotations

import importlib

_LAZY = {
    "PackedBatch": "mlite.runtime.batch",
    "build_lite_model": "mlite.runtime.models",
    "LiteModel": "mlite.runtime.models",
    "RuntimeConfig": "mlite.runtime.config",
    "MegatronLiteConfig": "mlite.runtime.config",
    "OptimizerConfig": "mlite.runtime.config",
    "ParallelConfig": "mlite.runtime.config",
    **{
        name: "mlite.runtime.runtime"
        for name in (
            "create_runtime",
            "forward_backward",
            "train_step",
            "zero_grad",
            "optimizer_step",
            "lr_scheduler_step",
            "to",
            "save_checkpoint",
            "load_checkpoint",
            "train_mode",
            "eval_mode",
            "export_weights",
            "memory_stats",
        )
    },
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mlite.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
