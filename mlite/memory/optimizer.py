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

mfsdp (Megatron-FSDP, Megatron Lite's standalone M-FSDP, ``optim_grads_params``), per padded local shard element
  (N = shard, O = the offloaded part, G = N - O, C = ``mfsdp_bucket_size``; :func:`mfsdp_bytes`):
  offload_fraction 0:       GPU 4 fp32 param (the master) + 4 fp32 main_grad + 8 moments = 16N; host nothing (no
                            ring, no streams are built)
  offload_fraction 1:       GPU 2 bf16 shard mirror (the compute dtype: 4 with fp32 params) + 4 fp32 main_grad = 6N;
                            host 4 master + 8 moments = 12N, plus the gradient staging: today 4N (``_cpu_grad_bufs``,
                            ``mfsdp_grad_staging="persistent"``, the default: 16N in all) or the design's pinned ring
                            4 x min(N, 2C) <= 8C (``"ring"``)
  0 < offload_fraction < 1: GPU 4N fp32 param + 4N main_grad + 8G moments (no mirror saving); host 12O + staging
                            (4O persistent, 4 x min(O, 2C) ring)
  Transients at the full-step peak: the bounded all-gather scratch, min(C, largest unit) elements in the compute dtype
  per bucket in flight (2 with the parameter-gather prefetch, 1 under full offload, which turns it off), and the fp32
  fused-wgrad scratch of one bucket, 4 x min(C, largest unit). The optimizer step adds no CUDA allocation. Three CUDA
  peaks are reported apart: steady (the state after a step), full step (+ activations and scratch) and optimizer only
  (= steady). Sources (ISEEKYAN/Megatron-LM, experimental/lite): ``docs/mfsdp-fsdp2-style-cpu-offload-design.md`` @
  adcd21d0 (§Byte accounting, §Transient phases), ``megatron/lite/primitive/optimizers/mfsdp/config.py`` @ 0d14590c
  (bucket_size 40,000,000, fp32 main params and grads), ``docs/fsdp2-param-offload-overlap.md`` @ 4b19e6bd (full
  offload disables the parameter-gather prefetch).

Precision profiles (``precision``, :mod:`mlite.options.precision`): the Hopper blockwise and MXFP8 profiles fix an
fp32 master, fp32 main gradients and fp32 moments (their parameter contract): fsdp2's gradients are then 4 bytes,
-> 18/d per BF16 parameter; with FP8 compute weights (fsdp2 only) a quantized GEMM weight's 2 bytes become its FP8
data (1) + block scales + the columnwise copy (1 + its scales; :mod:`mlite.memory.fp8`): 18/d + scales/d per
quantized parameter on Hopper, the BF16 rest 18/d.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from ..options.optimizers import ALGORITHMS, BACKENDS, DTYPE_BYTES, UPDATE_CHUNK, mfsdp_split_sizes
from ..options.precision import profile

# the one value: mlite.options.optimizers.UPDATE_CHUNK (re-exported here for the memory model)

__all__ = [
    "DTYPE_BYTES",
    "UPDATE_CHUNK",
    "MfsdpBytes",
    "StateBytes",
    "mfsdp_bytes",
    "mfsdp_offloaded",
    "mfsdp_split_sizes",
    "state_bytes",
]


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
    if b.fp32_main_buffers:  # M-FSDP: fp32 param shard (the master), or the compute-dtype mirror under full offload
        mb = mfsdp_bytes(1.0, 1.0 if o.offload_fraction >= 1.0 else 0.0, o.mfsdp_bucket_size, o.mfsdp_grad_staging, pb)
        m, v = algo.state_bytes(o)
        hm, hv = algo.state_bytes(_FP32_STATE)  # the host update (CpuAdamGroup) keeps fp32 state
        return StateBytes(round(mb.params), round(mb.grads), 0, m, v, 4 + hm + hv, True, True)
    if b.grad_buffer:
        grad = DTYPE_BYTES[o.main_grads_dtype]
        lite = o.activation_model == "lite"  # the lite runtime's dist_opt widens the bf16 grads chunk by chunk
        copy = 4 if grad == 2 and not pao and not offload and pb != 4 and not lite else 0
    else:  # gradients in the parameter dtype, the state always sharded
        grad, copy = pb, 0
        if profile(getattr(o, "precision", "bf16")).fp32_state:  # the profile's contract: fp32 main gradients
            grad = 4
    # host per offloaded parameter: HybridDeviceOptimizer's fp32 param copy and pinned fp32 grad, then the state;
    # else the state as it is on the device
    host = 8 + m + v if b.hybrid_offload else master + m + v
    sharded = o.use_distributed_optimizer if b.grad_buffer else True
    return StateBytes(pb, grad, master, m, v, host, b.shards_params, sharded, copy)


_FP32_STATE = SimpleNamespace(exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32")
"""The state dtypes of Megatron-Core's HybridDeviceOptimizer (offload: fp32 whatever the options say)."""


@dataclass(frozen=True, slots=True)
class MfsdpBytes:
    """Megatron-FSDP bytes of one rank (see the module docstring): GPU parts and host parts."""

    params: float
    """GPU: the fp32 local parameter shard (4N), or the compute-dtype shard mirror under full offload (2N for bf16)."""
    grads: float
    """GPU: the fp32 ``main_grad`` shard (4N), held for the whole run."""
    exp_avg: float
    """GPU: Adam's first moment of the device-updated part (4G)."""
    exp_avg_sq: float
    """GPU: Adam's second moment of the device-updated part (4G)."""
    host_master: float
    """Host: the authoritative fp32 master of the offloaded part (4O)."""
    host_exp_avg: float
    """Host: first moment of the offloaded part (4O)."""
    host_exp_avg_sq: float
    """Host: second moment of the offloaded part (4O)."""
    host_grad_staging: float
    """Host (pinned): gradient staging, 4O (``persistent``) or 4 x min(O, 2C) (``ring``)."""

    @property
    def gpu(self) -> float:
        """GPU bytes of the state (steady; the optimizer-only peak too)."""
        return self.params + self.grads + self.exp_avg + self.exp_avg_sq

    @property
    def host_state(self) -> float:
        """Host bytes of the optimizer state (12O)."""
        return self.host_master + self.host_exp_avg + self.host_exp_avg_sq

    @property
    def host(self) -> float:
        """Host bytes in all (12O + staging)."""
        return self.host_state + self.host_grad_staging


MFSDP_RING_SLOTS = 2
"""Pipeline depth P of the design's pinned gradient ring (two slots of at most C elements)."""


def mfsdp_staging_elements(offloaded: float, bucket: int, staging: str) -> float:
    """Elements of the host gradient staging for ``offloaded`` elements: all of them (``persistent``,
    ``_cpu_grad_bufs``) or ``min(O, P x C)`` (``ring``)."""
    if staging == "ring":
        return min(offloaded, MFSDP_RING_SLOTS * bucket)
    return offloaded


def mfsdp_bytes(
    n: float, offloaded: float, bucket: int, staging: str, compute_bytes: int = 2, moments: tuple[int, int] = (4, 4)
) -> MfsdpBytes:
    """Megatron-FSDP bytes for ``n`` local shard elements of which ``offloaded`` (O) are offloaded: O = 0 is
    offload_fraction 0, O = n full offload (the compute-dtype mirror replaces the fp32 shard), anything between a
    partial offload (fp32 shard kept); ``moments``: bytes per element of the algorithm's two state tensors (Adam: 4,
    4; SGD: 4, 0). The one formula the estimator and the lite runtime's tests read."""
    full = n > 0 and offloaded >= n
    g = n - offloaded
    return MfsdpBytes(
        params=(compute_bytes if full else 4) * n,
        grads=4 * n,
        exp_avg=moments[0] * g,
        exp_avg_sq=moments[1] * g,
        host_master=4 * offloaded,
        host_exp_avg=moments[0] * offloaded,
        host_exp_avg_sq=moments[1] * offloaded,
        host_grad_staging=4 * mfsdp_staging_elements(offloaded, bucket, staging),
    )


def mfsdp_offloaded(n: float, fraction: float) -> float:
    """O for ``offload_fraction`` over ``n`` shard elements when the tensors are not known (f x N: Megatron-Core
    launches; the lite runtime's estimate takes the whole-tensor O of :func:`mfsdp_split_sizes` instead)."""
    return n if fraction >= 1.0 else fraction * n
