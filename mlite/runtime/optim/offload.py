"""Two kinds of offload, as mlite has them.

1. Update-state offload (``OptimizerConfig.offload_fraction``, mlite's fsdp2 ``offload_fraction=1.0``): the fp32
   master (or the PAO int16 remainders) and both Adam moments of the chosen parameters live on CPU for the whole run,
   and their AdamW update runs on CPU: the local gradient shard is copied to CPU, the update runs there, the new
   parameter shard is copied back into the (device) FSDP2 shard. The parameters and gradients themselves stay on the
   device. Fractions strictly between 0 and 1 follow Megatron-Core's ``HybridDeviceOptimizer`` split: parameters in
   model order, whole tensors, a tensor goes to CPU while the count already sent is below ``fraction * total``
   (so the last tensor may overshoot; the share is approximate). Counts are global tensor sizes, so every rank picks
   the same tensors. On a CPU run the moves are no-ops but the same code path runs.
   Difference from Megatron-Core: there, PAO dtypes are ignored under offload; here they apply (remainders and bf16
   moments are also stored on CPU).

2. Runtime context offload (``to(handle, device, model=, optimizer=, grad=)``; verl's param/optimizer offload between
   training and rollout): module-level moves only. ``model.to(device)`` goes through FSDP2's ``_apply`` override,
   which re-registers the sharded DTensor parameters (``param.data = ...`` would break FSDP2's storage); gradients are
   attached to their parameters, so they move with them. Optimizer state tensors are plain tensors owned by the
   optimizer and are replaced by moved copies. State of update-offloaded parameters stays on CPU in any case.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def offload_split(numels: Sequence[int], fraction: float) -> list[bool]:
    """Which tensors (in order) are updated on CPU for ``offload_fraction = fraction`` (Megatron's rule)."""
    if fraction <= 0.0:
        return [False] * len(numels)
    if fraction >= 1.0:
        return [True] * len(numels)
    threshold = sum(numels) * fraction
    sent, out = 0, []
    for n in numels:
        take = sent < threshold
        out.append(take)
        sent += n if take else 0
    return out


def release_device_cache(device) -> None:
    """Give freed blocks back to the driver after a move off the GPU (no-op on CPU)."""
    if torch.device(device).type == "cuda" or (torch.cuda.is_available() and torch.cuda.is_initialized()):
        torch.cuda.empty_cache()


def move_model(model: torch.nn.Module, device) -> None:
    """Move an FSDP2 model's sharded parameters (and their gradients) with a module-level ``.to``."""
    model.to(device)
