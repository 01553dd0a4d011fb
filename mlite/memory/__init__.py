"""Memory estimator: per-GPU and host memory for dist_opt and fsdp2, precision-aware optimizer, offload, activations.

``estimate(spec, plan, TrainingOptions(...))`` -> :class:`MemoryEstimate`; ``sweep(...)`` -> pandas DataFrame.
The rules are in :mod:`mlite.memory.optimizer` (bytes per parameter) and :mod:`mlite.memory.activations`.
"""

from ..options.training import GPU_MEMORY_GIB, RECOMPUTE, TrainingOptions
from .estimate import GIB, MemoryEstimate, RankMemory, estimate
from .optimizer import StateBytes, state_bytes
from .sweep import fits_callback, mesh_table, sweep

__all__ = [
    "GIB",
    "GPU_MEMORY_GIB",
    "RECOMPUTE",
    "MemoryEstimate",
    "RankMemory",
    "StateBytes",
    "TrainingOptions",
    "estimate",
    "fits_callback",
    "mesh_table",
    "state_bytes",
    "sweep",
]
