"""What verl's offload of a Megatron model leaves on the GPU between its calls (the actor and the PPO critic).

verl ``main`` = 1dda039b9c6311889a9c9a26040677e1254814f9 (file names relative to the verl repository):

- ``offload_megatron_model_to_cpu`` (``verl/utils/megatron_utils.py``) walks every DDP buffer (dense and expert):
  it copies ``param_data`` into a pinned host buffer and frees it (``storage().resize_(0)``), and frees
  ``grad_data`` too (``resize_(0)``, no host copy: the gradient is zeroed when it comes back).
  ``load_megatron_model_to_gpu(models, load_grad=...)`` restores the parameters from the host and, with
  ``load_grad``, re-allocates and zeroes the gradient buffer.
- ``BaseEngineCtx._context_switch`` (``verl/workers/engine/base.py``): ``eval`` mode (old_log_prob, the reference,
  the critic's ``infer_batch``) loads ``model=param_offload, grad=False``; ``train`` mode (the update) loads
  ``grad=param_offload`` and the optimizer with ``optimizer_offload``; both offload the same way on exit. The
  weight sync loads ``load_grad=False`` (``MegatronEngine``, ``verl/workers/engine/megatron/transformer_impl.py``).
  v0.7.0 (f9c855f7) did the same in ``verl/workers/megatron_workers.py`` (``compute_log_prob`` loads
  ``load_grad=False``; the critic's ``compute_values`` there loaded with gradients).

So with ``param_offload`` the gradient buffer is on the GPU only in the update: the kit's Megatron estimate keeps
it in ``idle_gpu`` (the lite engine's context offload moves the parameters only) and the RL step takes it out here.
"""

from __future__ import annotations

from dataclasses import replace

from ..options import TrainingOptions
from ..options.optimizers import BACKENDS
from .estimate import RankMemory


def grads_idle(rank: RankMemory, o: TrainingOptions) -> float:
    """Gradient bytes the kit's estimate leaves in ``rank.idle_gpu`` (0 when ``grad_offload`` moved them to the host
    or the backend frees them after the step)."""
    backend = BACKENDS.entry(o.optimizer)
    if (o.grad_offload and backend.grad_buffer) or backend.frees_grads:
        return 0.0
    return rank.grads


def verl_offloaded(rank: RankMemory, o: TrainingOptions) -> RankMemory:
    """``rank`` as verl's Megatron offload leaves it: with ``param_offload`` the DDP gradient buffer is freed outside
    the update (``offload_megatron_model_to_cpu``), so ``idle_gpu`` drops the gradients still counted there."""
    if not o.param_offload:
        return rank
    return replace(rank, idle_gpu=rank.idle_gpu - grads_idle(rank, o))


__all__ = ["grads_idle", "verl_offloaded"]
