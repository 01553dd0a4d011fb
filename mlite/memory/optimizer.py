"""Bytes of parameters, gradients and optimizer state per local parameter (``memory.md`` is the specification).

d = optimizer shard size: DP x CP for dense parameters, EDP for routed experts.

dist_opt (Megatron-Core DDP + distributed optimizer), bytes per local parameter:
  param 2 (bf16 buffer, not sharded) + main grad 4 (fp32) or 2 (bf16) + (master + exp_avg + exp_avg_sq) / d
  bf16 main grads without PAO (``grad_reduce_in_fp32=False``): the optimizer copies its shard of the bf16 grad
  buffer to fp32 at the step (``shard_main_param.grad = shard_model_grad.float()``; non-distributed:
  ``main_param.grad = model_param.main_grad.float()``) and frees the copies at the next ``zero_grad``: +4/d after
  the step; PAO hands the bf16 shard to the optimizer as ``decoupled_grad`` (no copy). Sources (megatron/core):
  ``optimizer/distrib_optimizer.py`` and ``optimizer/optimizer.py``, ``_copy_model_grads_to_main_grads``. The lite
  runtime's dist_opt (``activation_model="lite"``) makes no copies: its update (``mlite/runtime/optim/distributed.py``)
  reads the bf16 buffer and widens it chunk by chunk.
  master 4 (fp32), or 2 with PAO + store_param_remainders (int16 low half; the bf16 param is the high half)
  exp_avg, exp_avg_sq 4 each, or 2 each in bf16 (PAO). No distributed optimizer: d = 1.
  -> 18; 6 + 12/d; PAO: 16 (fp32 grads, remainders) ... 14 (bf16 grads, remainders); 10 (+ bf16 moments).
  offload_fraction f (HybridDeviceOptimizer): the GPU keeps 12 bytes per resident shard parameter (PAO dtypes are
  not applied under offload), the host 16 per offloaded one (fp32 param copy, pinned fp32 grad, m, v).
  chunked_optimizer_state_offload, fraction p (Megatron-Core dev's ChunkedOptimizerStateOffloader; exclusive of
  offload_fraction): the bytes above, of which (master + exp_avg + exp_avg_sq) x p per shard parameter live in
  pinned host memory between steps, in their dtypes (PAO remainders and bf16 moments kept); a Megatron Lite build
  without offload_for_forward() keeps those masters on the GPU; the update's windows: :mod:`mlite.memory.chunked`.
fsdp2 (PyTorch fully_shard, mlite's fsdp2 and the kit's lite runtime): everything sharded over d:
  param 2 + grad 2 (sharded grads in the param dtype) + master 4 (2 with PAO remainders) + exp_avg + exp_avg_sq
  -> 16/d, 14/d with PAO, 10/d with bf16 moments too; offload_fraction f moves f of (master, m, v) to the host
  (dtypes kept) and runs their update on the CPU.
With fp32 parameters there is no separate master copy (the parameters are the master weights).
N-gram memory tables (DeepSeek-V4.1's Engram, split kind ``rows``) are not local parameters in this sense and have
none of these figures: their rows are sharded over the DP x CP owners, frozen (fp8 + E8M0 scales) or trainable
(+ fp32 master, main grad, momentum), never offloaded; :mod:`mlite.memory.ngram` holds their bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from ..options.optimizers import ALGORITHMS, BACKENDS, DTYPE_BYTES

__all__ = ["DTYPE_BYTES", "StateBytes", "state_bytes"]


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Bytes per parameter of each kind of state, and what is sharded."""

    param: int
    """Model parameter bytes per local parameter (per shard parameter for fsdp2)."""
    grad: int
    """Gradient bytes per local parameter (per shard parameter for fsdp2)."""
    master: int
    """Master weight bytes per shard parameter (fp32 4, int16 remainder 2, none 0)."""
    exp_avg: int
    """First state tensor bytes per shard parameter (Adam's first moment; the algorithm's entry declares it)."""
    exp_avg_sq: int
    """Second state tensor bytes per shard parameter (Adam's second moment; 0 when the algorithm keeps one)."""
    host_per_offloaded: int
    """Host bytes per offloaded shard parameter."""
    params_sharded: bool
    """Parameters and gradients are sharded too (fsdp2)."""
    shard_optimizer: bool
    """Optimizer state is sharded over d (distributed optimizer or fsdp2)."""
    step_grad_copy: int = 0
    """Bytes per shard parameter of the fp32 main-grad copy the optimizer makes at the step from a bf16 gradient
    buffer (Megatron-Core without PAO, ``grad_reduce_in_fp32=False``); ``zero_grad`` frees it. 0 for the lite
    runtime's dist_opt."""


def state_bytes(o) -> StateBytes:
    """Per-parameter bytes for a :class:`~mlite.options.TrainingOptions`; the optimizer state is what the
    algorithm's entry declares (:attr:`mlite.options.optimizers.Algorithm.state_bytes`: Adam's two moments)."""
    pb = DTYPE_BYTES[o.param_dtype]
    pao = o.use_precision_aware_optimizer
    offload = o.offload_fraction > 0
    algo = ALGORITHMS.entry(o.optimizer_algorithm)
    b = BACKENDS.entry(o.optimizer)
    if pb == 4:
        master = 0
    elif pao and o.store_param_remainders and o.param_dtype == "bf16" and not (offload and b.hybrid_offload):
        master = 2
    else:
        master = 4
    if offload and b.hybrid_offload:  # HybridDeviceOptimizer: fp32 state, PAO dtypes not applied
        master = 4 if pb != 4 else 0
        m, v = algo.state_bytes(_FP32_STATE)
    else:  # bf16 moments need PAO (mlite.options.rules): without it the algorithm's state is fp32 here
        m, v = algo.state_bytes(o)
    if b.grad_buffer:
        grad = DTYPE_BYTES[o.main_grads_dtype]
        lite = o.activation_model == "lite"  # the lite runtime's dist_opt widens the bf16 grads chunk by chunk
        copy = 4 if grad == 2 and not pao and not offload and pb != 4 and not lite else 0
    else:  # gradients in the parameter dtype, the state always sharded
        grad, copy = pb, 0
    # host per offloaded parameter: HybridDeviceOptimizer's fp32 param copy and pinned fp32 grad, then the state;
    # else the state as it is on the device
    host = 8 + m + v if b.hybrid_offload else master + m + v
    sharded = o.use_distributed_optimizer if b.grad_buffer else True
    return StateBytes(pb, grad, master, m, v, host, b.shards_params, sharded, copy)


_FP32_STATE = SimpleNamespace(exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32")
"""The state dtypes of Megatron-Core's HybridDeviceOptimizer (offload: fp32 whatever the options say)."""
