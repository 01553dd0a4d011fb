"""``estimate(spec, mesh, training) -> MemoryEstimate``: per-GPU and host memory of one training configuration.

Per pipeline rank (the most loaded one is reported on top): parameters, gradients, optimizer state (master,
exp_avg, exp_avg_sq apart), activations by component, logits, transients (FSDP2 all-gather / reduce-scatter of
the largest unit, full-recompute rebuild, the fp32 logits gradient), and other (framework overhead outside
PyTorch's allocator, distributed-optimizer buffer padding). ``static`` is what the allocator holds after the
optimizer step (params + grads + optimizer state + persistent buffers such as Megatron's attention score buffer,
+ the fp32 main-grad copies of a bf16 grad buffer without PAO); ``peak`` is the larger of forward/backward (static
without those copies + activations + the largest transient) and the optimizer step (static + Adam's temporaries);
``total`` adds the framework overhead, and ``fits`` compares it with the device memory less the headroom.

Runtime context offload (verl ``param_offload`` / ``optimizer_offload`` / ``grad_offload``) is reported per phase:
``training`` (everything resident for the step) and ``idle`` (rollout or waiting: offloaded state on the host).
Chunked optimizer-state offload (:mod:`mlite.memory.chunked`): the resident share in ``master`` / ``exp_avg`` /
``exp_avg_sq``, the update's master window and moment slots in ``transients["optimizer_step"]``, the pinned copy in
``host["chunked_offloaded_state"]``, all of it under ``chunked_state_offload`` in the JSON.

N-gram memory tables (DeepSeek-V4.1's Engram, :mod:`mlite.memory.ngram`) are held apart in ``ngram``: rows sharded
over the rank's DP x CP owners, FP8 + scales (frozen) or + fp32 master, main grad and momentum (``engram_trainable``);
part of ``static`` and of the idle phase, never offloaded (no offload option moves them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from ..errors import MliteError
from ..mesh import MeshPlan, ParallelConfig, resolve
from ..mesh.axes import MESH_NAMES
from ..mesh.fsdp_units import experts_share_block_unit, largest_block_unit
from ..models.chunks import ce_chunk_rows
from ..options import TrainingOptions
from ..options.optimizers import ALGORITHMS, BACKENDS
from ..options.precision import profile
from ..options.rules import precision_mesh
from ..units import GIB, MIB
from .activations import (
    ActDims,
    attention_buffer,
    attention_transient,
    layer_bytes,
    layer_bytes_no_recompute,
    norm_bytes,
)
from .chunked import ChunkedOffload, chunked_offload, largest_shard
from .fp8 import check_shapes, fp8_param_bytes, fp8_stage
from .muon import lite_step_bytes, muon_share, ns_workspace_bytes
from .ngram import ngram_bytes, stage_tables
from .optimizer import DTYPE_BYTES, mfsdp_bytes, mfsdp_offloaded, mfsdp_split_sizes, state_bytes
from .params import StageParams, stage_params

_FP32 = SimpleNamespace(exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32")
"""State dtypes of M-FSDP's host update (fp32)."""

CUBLAS_WORKSPACE = 64 * MIB
"""cuBLAS + cuBLASLt workspaces PyTorch takes from its caching allocator on Hopper (32 MiB each; measured: every
Megatron-Core row on the H200 holds 64 MiB more after the step than its state and buffers)."""


def transient_peak(t: dict, lite: bool) -> float:
    """The largest set of transients ``t`` alive at one moment (the lite runtime's three moments, or Megatron's
    backward buffers against the logits gradient)."""
    if lite:
        return t.get("root_params_unsharded", 0) + max(
            t.get("ce_forward", 0), t.get("loss_backward", 0), t.get("fsdp2_unit", 0) + t.get("recompute_layer", 0)
        )
    backward = (
        t.get("fsdp2_all_gather", 0)
        + t.get("fsdp2_reduce_scatter", 0)
        + t.get("mfsdp_all_gather", 0)
        + t.get("mfsdp_wgrad", 0)
        + t.get("recompute_layer", 0)
        + t.get("attention_scores", 0)
    )
    return max(backward, t.get("logits_grad", 0))


def peak_bytes(static: float, step_grads: float, grads_off: float, acts: float, peak_t: float, t: dict) -> float:
    """The allocator peak: forward/backward (the step's fp32 grad copies are freed by then, and ``grads_off`` of the
    gradients may be), or the optimizer step itself (``t["optimizer_step"]``)."""
    return max(static - step_grads - grads_off + acts + peak_t, static + t.get("optimizer_step", 0))


@dataclass(kw_only=True)
class RankMemory:
    """Memory of one pipeline rank (any of its DP replicas; they are identical)."""

    pp_rank: int
    """Pipeline rank."""
    local_params: float
    """Parameters this GPU holds before optimizer sharding (TP/PP/EP-local)."""
    params: float
    """Parameter bytes on the GPU."""
    grads: float
    """Gradient bytes on the GPU."""
    master: float
    """Master weights (fp32 or int16 remainders) on the GPU."""
    exp_avg: float
    """Adam first moment on the GPU."""
    exp_avg_sq: float
    """Adam second moment on the GPU."""
    activations: dict
    """Activation bytes by component (all micro-batches in flight), logits included."""
    transients: dict
    """Short-lived buffers; the largest at any moment counts towards the peak."""
    other: dict
    """Framework overhead and buffer padding."""
    host: dict
    """Host bytes of this GPU's process, by item."""
    idle_gpu: float
    """GPU bytes between training steps with runtime context offload (rollout / idle phase)."""
    grads_at_peak: float | None = None
    """Gradient bytes alive at the peak (None: all of ``grads``; the lite runtime frees them between steps)."""
    lite: bool = False
    """Transients follow the lite runtime's three moments (see :mod:`mlite.memory.lite`)."""
    persistent: dict = field(default_factory=dict)
    """Buffers kept for the life of the process besides the model state (Megatron's attention score buffer, the
    cached RoPE table); part of ``static`` and of the peak."""
    step_grads: float = 0.0
    """fp32 copies of bf16 main grads that the optimizer makes at the step and ``zero_grad`` frees (Megatron-Core,
    bf16 gradient buffer without PAO): part of ``static`` after the step, absent during forward and backward."""
    chunked: ChunkedOffload | None = None
    """Megatron-Core's chunked optimizer-state offload on this rank (None: off); its resident masters are in
    ``master``, its update windows in ``transients["optimizer_step"]``, its host bytes in ``host``."""
    ngram: dict = field(default_factory=dict)
    """N-gram memory table bytes (Engram) by item (:data:`mlite.memory.ngram.ITEMS_TRAINABLE`): part of ``static``,
    resident in every phase (never offloaded)."""
    ngram_owners: int = 0
    """DP x CP owners the rank's n-gram table rows are sharded over (0: the rank holds no table)."""
    muon: dict | None = None
    """Muon's split of this rank's shard (:mod:`mlite.memory.muon`): ``matrix_params`` (one fp32 momentum buffer
    each, in ``exp_avg``), ``adamw_params`` (AdamW's two moments), ``largest_matrix`` and its ``newton_schulz``
    workspace bytes (in ``transients["optimizer_step"]``); None: not Muon."""
    params_detail: dict = field(default_factory=dict)
    """``params`` by part with FP8 compute weights (``fp8_data``, ``fp8_scales``, ``fp8_columnwise``,
    ``bf16_params``: :mod:`mlite.memory.fp8`); empty otherwise."""

    optimizer: float = field(init=False)
    """Optimizer state on the GPU (master + exp_avg + exp_avg_sq)."""
    static: float = field(init=False)
    """Allocator bytes after the optimizer step (params + grads + optimizer state)."""
    activation_total: float = field(init=False)
    """All activation bytes."""
    transient_peak: float = field(init=False)
    """The largest set of transients alive at one moment."""
    peak: float = field(init=False)
    """Allocator bytes at the peak of a steady-state step."""
    total: float = field(init=False)
    """Peak plus memory outside the allocator."""
    host_total: float = field(init=False)
    """Host bytes of this GPU's process."""

    def __post_init__(self) -> None:
        # computed once: the whole-mesh table builds tens of thousands of these
        self.optimizer = self.master + self.exp_avg + self.exp_avg_sq
        self.static = self.params + self.grads + self.optimizer + sum(self.persistent.values()) + self.step_grads
        self.static += sum(self.ngram.values())
        self.activation_total = sum(self.activations.values())
        self.transient_peak = transient_peak(self.transients, self.lite)
        grads_off = 0.0 if self.grads_at_peak is None else self.grads - self.grads_at_peak
        self.peak = peak_bytes(
            self.static, self.step_grads, grads_off, self.activation_total, self.transient_peak, self.transients
        )
        self.total = self.peak + sum(self.other.values())
        self.host_total = sum(self.host.values())


@dataclass(kw_only=True)
class MemoryEstimate:
    """The estimate for one model, mesh and option set."""

    model: str
    """Model name."""
    plan: MeshPlan
    """The mesh."""
    options: TrainingOptions
    """The training options."""
    ranks: list[RankMemory]
    """One entry per pipeline rank."""
    formulas: list[dict] = field(default_factory=list)
    """Why: each number with its formula and the values that went in."""
    _worst: RankMemory | None = field(default=None, repr=False, compare=False)

    @property
    def worst(self) -> RankMemory:
        """The most loaded rank (largest total)."""
        if self._worst is None:
            self._worst = max(self.ranks, key=lambda r: r.total)
        return self._worst

    @property
    def gpu_mem(self) -> float:
        return self.options.gpu_memory_gib * GIB

    @property
    def usable(self) -> float:
        return self.gpu_mem * (1 - self.options.headroom)

    @property
    def fits(self) -> bool:
        return self.worst.total <= self.usable

    @property
    def bytes_per_param(self) -> float:
        w = self.worst
        state = w.params + w.grads + w.optimizer  # model state only (no persistent buffers or step copies)
        return state / w.local_params if w.local_params else 0.0

    def to_dict(self) -> dict:
        """The ``mlite memory --json`` document (bytes as integers)."""
        w = self.worst
        per_node = max(r.host_total for r in self.ranks) * min(self.options.gpus_per_node, self.plan.ngpu)
        # per_gpu adds up to ``total`` (what ``fits`` compares): the gradients alive at the forward/backward peak
        # (the step's fp32 copies are not; fsdp2 may have freed its gradients), and ``other`` the rest of the peak
        # (transients, persistent buffers, framework, padding; when the optimizer step is the peak, its grad copies
        # and Adam temporaries, net of the activations freed by then); never negative (see ``RankMemory.peak``)
        parts = {
            "params": round(w.params),
            "grads": round(w.grads if w.grads_at_peak is None else w.grads_at_peak),
            "optimizer": round(w.optimizer),
            "activations": round(w.activation_total),
        }
        tables = any(r.ngram_owners for r in self.ranks)
        if tables:  # only for a model with n-gram tables (Engram): the most loaded rank's share, 0 if it holds none
            parts["ngram_tables"] = round(sum(w.ngram.values()))
        total = round(w.total)
        ngram = {
            "ngram_detail": {
                "owners": w.ngram_owners,
                "trainable": self.options.engram_trainable,
                **{k: round(v) for k, v in w.ngram.items()},
            }
        }
        return {
            "per_gpu": {**parts, "other": total - sum(parts.values()), "total": total},
            **(ngram if tables else {}),
            "optimizer_detail": {
                "master": round(w.master),
                "exp_avg": round(w.exp_avg),
                "exp_avg_sq": round(w.exp_avg_sq),
            },
            "host": {"per_gpu": round(w.host_total), "per_node": round(per_node)},
            "bytes_per_param": self.bytes_per_param,
            "local_params": round(w.local_params),
            "stage": w.pp_rank,
            "fits": self.fits,
            "gpu_mem": round(self.gpu_mem),
            "static": round(w.static),
            "peak": round(w.peak),
            "usable": round(self.usable),
            "activations_detail": {k: round(v) for k, v in w.activations.items()},
            "transients": {k: round(v) for k, v in w.transients.items()},
            "persistent_detail": {k: round(v) for k, v in w.persistent.items()},
            "step_grads": round(w.step_grads),
            "precision": self.options.precision,
            "params_detail": {k: round(v) for k, v in w.params_detail.items()},
            "other_detail": {k: round(v) for k, v in w.other.items()},
            "host_detail": {k: round(v) for k, v in w.host.items()},
            "cuda_peaks": {
                "steady": round(w.static),
                "full_step": round(w.peak),
                "optimizer_only": round(w.static + w.transients.get("optimizer_step", 0)),
            },
            "phases": {
                "training": {"gpu": round(w.peak + sum(w.other.values()))},
                "idle": {"gpu": round(w.idle_gpu), "host": round(w.host_total)},
            },
            "stages": [
                {
                    "pp_rank": r.pp_rank,
                    "local_params": round(r.local_params),
                    "static": round(r.static),
                    "activations": round(r.activation_total),
                    "peak": round(r.peak),
                    "total": round(r.total),
                }
                for r in self.ranks
            ],
            "mesh": {k: v for k, v in self.plan.to_dict().items() if k in (*MESH_NAMES, "ngpu", "pp_layout")},
            "formulas": self.formulas,
            "validated_against": validated_against(self.options),
            "chunked_state_offload": w.chunked.to_dict() if w.chunked is not None else None,
            "muon": None
            if w.muon is None
            else {
                "matrix_params": round(w.muon["matrix_params"]),
                "adamw_params": round(w.muon["adamw_params"]),
                "largest_matrix": list(w.muon["largest_matrix"]),
                "newton_schulz_bytes": round(w.muon["newton_schulz"]),
            },
        }


def validated_against(o: TrainingOptions) -> str:
    """What the activation rows of this option set were checked against (the measurements in bench/results)."""
    if o.activation_model == "lite":
        return "checked against the kit's lite runtime on an H200 (bench/results/gpu_memory.csv)"
    if o.attention == "unfused":
        where = (
            "attention unfused = Megatron-Core's local spec (DotProductAttention: scores and fp32 softmax kept); "
            "checked against Megatron-Core 0.19.2, local spec, on an H200 (bench/results/mcore_memory.csv) "
            "and Megatron-Core 0.16.1 on the CPU (tests/test_mcore_oracle.py)"
        )
    else:
        where = (
            "attention flash = Transformer Engine / flash-attn kernels (no score matrix); checked against "
            "Megatron-Core 0.19.2 with PyTorch SDPA flash core attention on an H200 (bench/results/"
            "mcore_memory.csv) and on the CPU (tests/test_mcore_oracle.py), standing in for Transformer Engine "
            "(not installed there, not measured)"
        )
    return (
        where + "; GQA/MHA attention, dense SwiGLU and MoE layers at TP = PP = CP = 1; MLA, DSA, Gated DeltaNet "
        "and recompute_modules follow Korthikanti-style components, not validated against Megatron-Core"
    )


def _stage_layers(plan: MeshPlan, pp_rank: int) -> list[int]:
    """The main layers a pipeline rank runs (all its virtual stages)."""
    return [i for st in plan.stage_of_rank(pp_rank) for i in st.layers]


def _act_dims(spec, plan: MeshPlan, o: TrainingOptions) -> ActDims:
    p = plan.parallel
    sp = o.sequence_parallel or (spec.num_experts > 0 and p.tp > 1)
    return ActDims(
        s=o.seq_len // p.cp,
        b=o.micro_batch_size,
        t=p.tp,
        etp=p.etp_size,
        sp=sp and p.tp > 1,
        flash=o.attention == "flash",
        dropout=o.dropout,
        recompute=o.recompute,
        modules=frozenset(o.recompute_modules),
        device=o.lite_device,
    )


def _in_flight(plan: MeshPlan, o: TrainingOptions, pp_rank: int) -> float:
    p = plan.parallel
    if p.pp == 1:
        return 1.0
    n = min(p.pp - pp_rank, o.num_microbatches)
    return n * (1 + (p.pp - 1) / (p.pp * p.vpp)) if p.vpp > 1 else float(n)


_LAYER_CACHE: dict = {}


def _layer_cache(spec, d: ActDims) -> dict:
    ckey = (id(spec), d)
    hit = _LAYER_CACHE.get(ckey)
    if hit is not None and hit[0] is spec:
        return hit[1]
    if len(_LAYER_CACHE) > 4096:
        _LAYER_CACHE.clear()
    cache: dict = {}
    for layer in {(x.attention, x.mlp): x for x in spec.layers}.values():
        key = (layer.attention, layer.mlp)
        if key not in cache:
            cache[key] = (
                layer_bytes(spec, layer, d),
                layer_bytes_no_recompute(spec, layer, d) if d.recompute == "full" else 0.0,
            )
    _LAYER_CACHE[ckey] = (spec, cache)
    return cache


def _padding(sp: StageParams, spec, plan: MeshPlan, o: TrainingOptions, pb: int, gb: int) -> float:
    """Expected distributed-optimizer buffer padding: each tensor starts 64-aligned (32 elements on average), each
    bucket (max(40M, 1M x DP) elements) ends at a multiple of lcm(DP, 128) (half of it on average). The exact layout
    of one bucket is :func:`mlite.runtime.ddp.buffer_layout` (the lite runtime's dist_opt); the padding is kept out
    of the parameter, gradient and optimizer figures, which count real elements only, as the runtime's tally does."""
    if not pads(o):
        return 0.0
    return padding_bytes(sp.tensors, sp.total, plan.dp * plan.parallel.cp, pb + gb)


def pads(o: TrainingOptions) -> bool:
    """Whether :func:`_padding` applies (Megatron-Core's gradient buffer with the distributed optimizer)."""
    return BACKENDS.entry(o.optimizer).grad_buffer and o.use_distributed_optimizer


def padding_bytes(tensors: int, total: float, d: int, per_elem: int) -> float:
    """:func:`_padding` of a rank with ``tensors`` tensors and ``total`` parameters over ``d`` = DP x CP owners."""
    bucket = max(40_000_000, 1_000_000 * d)
    buckets = max(1, math.ceil(total / bucket))
    pad_elems = 32 * tensors + buckets * math.lcm(d, 128) / 2
    return pad_elems * per_elem


def estimate(
    spec,
    mesh: MeshPlan | ParallelConfig | None = None,
    training: TrainingOptions | None = None,
    *,
    ngpu: int | None = None,
    explain: bool = True,
) -> MemoryEstimate:
    """Estimate memory for ``spec`` on a resolved ``mesh`` (or a ParallelConfig + ``ngpu``)."""
    o = training or TrainingOptions()
    if not isinstance(mesh, MeshPlan):
        if ngpu is None:
            raise MliteError("estimate() needs a resolved MeshPlan, or a ParallelConfig and ngpu")
        mesh = resolve(
            spec, ngpu, mesh or ParallelConfig(), seq_len=o.seq_len, gpus_per_node=o.gpus_per_node, auto_uneven=True
        )
    plan = mesh
    if not plan.valid:
        raise MliteError("invalid mesh: " + plan.errors[0].message)
    precision_mesh(o, plan.parallel)  # the precision profile's validated topology (cp, pp)
    prof = profile(o.precision)
    if prof.fp8_weights:
        check_shapes(spec, prof.name)
    sb = state_bytes(o)
    backend = BACKENDS.entry(o.optimizer)
    algo = ALGORITHMS.entry(o.optimizer_algorithm)
    lite_model = o.activation_model == "lite"
    p = plan.parallel
    d_dense = plan.dp * p.cp if sb.shard_optimizer else 1
    d_exp = plan.edp if sb.shard_optimizer else 1
    f = float(o.offload_fraction)
    if lite_model and backend.fp32_main_buffers and 0.0 < f < 1.0:
        f = lite_mfsdp_share(spec, f)  # the runtime offloads whole tensors: O is their share, not f x N
    dims = _act_dims(spec, plan, o)
    cache = _layer_cache(spec, dims)
    vocab_local = plan.padded_vocab / p.tp
    ranks = []
    stages = stage_params(spec, plan)
    for sp in stages:
        local = sp.total
        shard = sp.dense / d_dense + sp.expert / d_exp
        held = shard if sb.params_sharded else local
        params = held * sb.param
        detail: dict[str, float] = {}
        if prof.fp8_weights:  # FP8 data + scales (+ columnwise copy) of the GEMM weights, BF16 for the rest
            dd, de = (d_dense, d_exp) if sb.params_sharded else (1, 1)
            detail = fp8_param_bytes(fp8_stage(sp, plan, prof.weights), sp.dense, sp.expert, dd, de, prof.columnwise)
            params = sum(detail.values())
        grads = held * sb.grad
        master, m, v = ((1 - f) * shard * x for x in (sb.master, sb.exp_avg, sb.exp_avg_sq))
        mu: dict[str, Any] | None = None
        if algo.matrix_state is not None:  # Muon: its matrices keep matrix_state, the rest the fallback's (AdamW)
            share = muon_share(sp, plan)
            ms = share.dense / d_dense + share.expert / d_exp
            m = (1 - f) * (ms * algo.matrix_state[0] + (shard - ms) * sb.exp_avg)
            v = (1 - f) * (ms * algo.matrix_state[1] + (shard - ms) * sb.exp_avg_sq)
            ns = ns_workspace_bytes(*share.largest, o.muon_fp32_matmul_prec) if share.largest[0] else 0
            mu = {"matrix_params": ms, "adamw_params": shard - ms, "largest_matrix": share.largest, "newton_schulz": ns}
        ck = None
        if o.chunked_optimizer_state_offload:
            ck = chunked_offload(o, sb, shard, largest_shard(spec, plan, sp, d_dense, d_exp))
        if ck is not None:  # the selected bundles live on the host between steps (mlite.memory.chunked)
            master, m, v = ((1 - ck.fraction) * shard * x for x in (sb.master, sb.exp_avg, sb.exp_avg_sq))
            master += ck.resident_masters
        # activations
        persistent: dict[str, float] = {}
        if o.activation_model == "lite":
            acts, transients, grads_at_peak = _lite_parts(spec, sp, o, plan, sb, d_dense, held)
        else:
            acts, transients, persistent = _megatron_parts(spec, plan, o, sp, cache, dims, vocab_local, sb)
            grads_at_peak = None
            if backend.step_temporaries:
                # the algorithm's step temporaries (torch AdamW, foreach: sqrt(exp_avg_sq), 4 bytes)
                transients["optimizer_step"] = ALGORITHMS.entry(o.optimizer_algorithm).step_bytes * (1 - f) * shard
        if ck is not None:  # masters' window + moments' slots (+ the step temporaries of one chunk at a time)
            step = ALGORITHMS.entry(o.optimizer_algorithm).step_bytes if backend.step_temporaries else 0
            transients["optimizer_step"] = ck.master_window + max(
                step * (1 - ck.fraction) * shard, ck.state_window + step * ck.chunk_params
            )
        if mu is not None:  # the AdamW part's temporaries, then one matrix's Newton-Schulz at a time
            rest = algo.step_bytes * mu["adamw_params"] if backend.step_temporaries and not lite_model else 0
            one = mu["newton_schulz"]
            if lite_model and share.largest[0]:  # the lite runtime's step: NS, chunked round_bf16, chunked count
                bf16 = o.param_dtype != "fp32"
                one = lite_step_bytes(sp, o.muon_fp32_matmul_prec, bf16, o.lite_device == "cuda")
            transients["optimizer_step"] = max(rest, one)
        other = {"framework": o.framework_overhead_gib * GIB}
        pad = _padding(sp, spec, plan, o, sb.param, sb.grad)
        if pad:
            other["buffer_padding"] = pad
        host = _optimizer_host(o, sb, backend, shard, f, ck)
        tables = stage_tables(spec, _stage_layers(plan, sp.pp_rank))
        owners = plan.dp * p.cp if tables else 0
        ngram = ngram_bytes(tables, owners, trainable=o.engram_trainable) if tables else {}
        idle = params + grads + master + m + v + sum(ngram.values())  # the tables stay resident (never offloaded)
        stuck = ck.resident_masters if ck is not None else 0.0
        idle = runtime_offload(o, backend, host, idle, params, grads, master + m + v, stuck)
        ranks.append(
            RankMemory(
                pp_rank=sp.pp_rank,
                local_params=local,
                params=params,
                grads=grads,
                master=master,
                exp_avg=m,
                exp_avg_sq=v,
                activations=acts,
                transients=transients,
                other=other,
                host=host,
                idle_gpu=idle,
                lite=o.activation_model == "lite",
                persistent=persistent,
                step_grads=(1 - f) * shard * sb.step_grad_copy,
                chunked=ck,
                params_detail=detail,
                grads_at_peak=None if grads_at_peak is None else grads_at_peak * grads,
                ngram=ngram,
                ngram_owners=owners,
                muon=mu,
            )
        )
    est = MemoryEstimate(model=spec.name, plan=plan, options=o, ranks=ranks)
    if explain:
        est.formulas = _formulas(est, stages, sb, d_dense, d_exp, f, dims)
    return est


def lite_mfsdp_share(spec, fraction: float) -> float:
    """The share of the lite runtime's parameter elements its mfsdp backend offloads at ``offload_fraction =
    fraction``: :func:`~mlite.options.optimizers.mfsdp_split_sizes` (the rule the runtime's
    :func:`mlite.runtime.optim.mfsdp.mfsdp_split` calls) over :func:`~mlite.memory.lite.lite_tensors`, so that the
    estimate's O, G = N - O, host 12O + staging are the runtime's to the byte (one GPU; FSDP2 shards each tensor
    over DP, whose rounding per tensor this share does not follow)."""
    from .lite import lite_tensors

    t = lite_tensors(spec)
    flags = mfsdp_split_sizes([n for n, _ in t], [d for _, d in t], fraction)
    total = sum(n for n, _ in t)
    return sum(n for (n, _), x in zip(t, flags) if x) / total if total else 0.0


def runtime_offload(o: TrainingOptions, backend, host: dict, idle: float, params, grads, state, stuck) -> float:
    """Runtime context offload of one rank: the host entries it adds to ``host`` (params, optimizer ``state`` less
    the ``stuck`` chunked masters a build without offload_for_forward leaves on the GPU, grads) and ``idle`` less
    what leaves the GPU between steps."""
    if o.param_offload:
        host["offloaded_params"] = params
        idle -= params
    if o.optimizer_offload:
        host["offloaded_optimizer_state"] = state - stuck
        idle -= state - stuck
    if o.grad_offload and backend.grad_buffer:
        host["offloaded_grads"] = grads
        idle -= grads
    elif backend.frees_grads:
        idle -= grads  # zero_grad sets them to None after the step
    return idle


def _optimizer_host(o: TrainingOptions, sb, backend, shard: float, f: float, ck: ChunkedOffload | None) -> dict:
    """Host bytes of the optimizer state of one rank: chunked offload's pinned bundles, M-FSDP's 12O of state and
    its gradient staging (persistent or ring), or ``offload_fraction``'s offloaded state (+ the fp32 gradient copies
    a CPU update reads)."""
    host: dict[str, float] = {}
    if ck is not None:
        host["chunked_offloaded_state"] = ck.host
    if f and backend.fp32_main_buffers:
        mb = mfsdp_bytes(
            shard,
            mfsdp_offloaded(shard, f),
            o.mfsdp_bucket_size,
            o.mfsdp_grad_staging,
            DTYPE_BYTES[o.param_dtype],
            ALGORITHMS.entry(o.optimizer_algorithm).state_bytes(_FP32),
        )
        host["mfsdp_host_state"] = mb.host_state
        host["mfsdp_grad_staging"] = mb.host_grad_staging
    elif f:
        host["offloaded_optimizer"] = f * shard * sb.host_per_offloaded
        if not backend.hybrid_offload:  # the host update reads fp32 copies of the gradients
            host["cpu_update_grads"] = f * shard * 4
    return host


def _megatron_parts(
    spec, plan, o, sp, cache, dims, vocab_local, sb
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Megatron-Core activations (per component, all micro-batches in flight), transients and persistent buffers
    of one rank (the local spec's modules; see :mod:`mlite.memory.activations`).

    Root parts, sources under megatron/core: the embedding lookup keeps the int64 token ids
    (``models/common/embeddings/language_model_embedding.py``); the unfused cross-entropy
    (``models/common/language_module/language_module.py`` ``compute_language_model_loss`` ->
    ``tensor_parallel/cross_entropy.py``: ``calculate_logits_max`` casts to fp32, ``save_for_backward(exp_logits,
    target_mask, masked_target_1d)``) keeps the fp32 softmax, a bool mask and int64 targets next to the output
    layer's input; the RoPE source table is fp32 and cached per length (``models/common/embeddings/
    rotary_pos_embedding.py`` ``RotaryEmbedding.forward`` under ``lru_cache``); the all-gather dispatcher keeps
    ``local_map``, ``local_probs`` and ``reversed_local_input_permutation_mapping`` as attributes until the next
    forward (``transformer/moe/token_dispatcher.py`` ``MoEAllGatherTokenDispatcher``)."""
    D = dims.s * dims.b
    h = spec.hidden_size
    acts: dict[str, float] = {}
    flight = _in_flight(plan, o, sp.pp_rank)
    recompute_layer = 0.0
    gqa = False
    for layer, n in sp.layer_kinds:
        per, full = cache[(layer.attention, layer.mlp)]
        for k, x in per.items():
            acts[k] = acts.get(k, 0.0) + x * n * flight
        recompute_layer = max(recompute_layer, full)
        gqa = gqa or layer.attention in ("full", "gated_full")
    if sp.has_embedding:
        # int64 token ids kept by the embedding lookup; over TP the vocabulary-parallel embedding also keeps the bool
        # mask of the ids outside its shard (megatron/core tensor_parallel/layers.py VocabParallelEmbedding.forward:
        # ``output_parallel[input_mask, :] = 0.0``), found by the TP = 2 Megatron-Core oracle case
        acts["embedding"] = (8 * D + (D if dims.t > 1 else 0)) * flight
    transients: dict[str, float] = {}
    persistent: dict[str, float] = {}
    tokens = D / dims.t if dims.sp else D
    if sp.has_head:
        acts["final_norm"] = norm_bytes(h, dims) * tokens
        if o.fused_cross_entropy:
            acts["logits"] = 2 * tokens * h + 2 * D * vocab_local
        else:  # output-layer input, the fp32 softmax the cross-entropy keeps, its target mask and indices
            acts["logits"] = 2 * tokens * h + 4 * D * vocab_local + 9 * D
            transients["logits_grad"] = 2 * D * vocab_local  # bf16 logits (forward) / their bf16 grad (backward)
    if BACKENDS.entry(o.optimizer).fp32_main_buffers:
        # M-FSDP: the bounded all-gather scratch (min(C, largest unit) elements in the compute dtype per bucket in
        # flight: 2 with the parameter-gather prefetch, 1 under full offload, which disables it) and the fp32
        # fused-wgrad scratch of one bucket (design doc §Transient phases; fsdp2-param-offload-overlap.md)
        unit = min(o.mfsdp_bucket_size, sp.max_layer)
        transients["mfsdp_all_gather"] = mfsdp_gather_buckets(o) * unit * DTYPE_BYTES[o.param_dtype]
        transients["mfsdp_wgrad"] = 4 * unit
    elif BACKENDS.entry(o.optimizer).unit_gather:
        transients["fsdp2_all_gather"] = 2 * sp.max_layer * sb.param
        transients["fsdp2_reduce_scatter"] = sp.max_layer * (sb.param + 4)
    if gqa and sp.layer_kinds:
        scores = attention_transient(spec, dims)
        if scores:
            transients["attention_scores"] = scores
        buf = attention_buffer(spec, dims)
        if buf:
            persistent["attention_buffer"] = buf
        persistent["rope_table"] = 4 * dims.s * spec.head_dim  # fp32 cos/sin source, cached per sequence length
    if dims.device == "cuda":
        persistent["cublas_workspace"] = CUBLAS_WORKSPACE
    moe_layers = sum(n for layer, n in sp.layer_kinds if layer.mlp == "moe")
    if moe_layers:
        # the all-gather dispatcher keeps its last routing map (bool), permuted probabilities (bf16) and
        # permutation indices (int64) as attributes until the next forward
        k = spec.moe_router_topk
        persistent["moe_dispatcher_cache"] = tokens * (spec.num_experts + 10 * k) * moe_layers
        if o.recompute == "full":
            # the cached probabilities carry the recomputed graph, whose leaf is the checkpoint's detached layer
            # input: that input and its gradient (bf16) stay alive per MoE layer
            persistent["moe_recompute_inputs"] = 4 * tokens * h * moe_layers
    if recompute_layer:
        transients["recompute_layer"] = recompute_layer
    return acts, transients, persistent


def mfsdp_gather_buckets(o: TrainingOptions) -> int:
    """Buckets of gathered parameters alive at once under mfsdp: 2 (current + prefetched) with the parameter-gather
    prefetch, 1 under full offload (``offload_fraction=1`` sets ``overlap_param_gather=False``; the fork's
    ``docs/fsdp2-param-offload-overlap.md`` @ 4b19e6bd)."""
    return 1 if o.offload_fraction >= 1.0 else 2


def _lite_parts(spec, sp, o, plan, sb, d_dense, held) -> tuple[dict[str, float], dict[str, float], float]:
    """The lite runtime's activations and transients (:mod:`mlite.memory.lite`); returns the share of the
    gradients alive at the peak (fsdp2: 0 with one micro-batch: ``zero_grad`` freed them and backward has not made
    new ones when the forward ends; dist_opt: 1, the gradient buffers stay allocated). dist_opt has no FSDP2 unit
    and no unsharded root copy (its parameters are whole); the autograd gradient of a parameter lives only until
    the accumulation hook adds it to the buffer, the largest of them being the lm_head's, already in
    ``loss_backward``."""
    from . import lite

    p = plan.parallel
    if p.tp * p.pp * p.cp * p.ep * p.etp_size != 1:
        raise MliteError(
            "activation_model='lite' describes the kit's lite runtime with tp = pp = cp = ep = etp = 1; "
            "use activation_model='megatron' for a mesh"
        )
    tokens = o.seq_len * o.micro_batch_size
    backend = BACKENDS.entry(o.optimizer)
    # activations are in the compute dtype: mfsdp holds an fp32 shard below f = 1 but FSDP2 gathers (and the model
    # computes) in param_dtype (MixedPrecisionPolicy(param_dtype=...), mlite.runtime.optim.mfsdp)
    ab = DTYPE_BYTES[o.param_dtype] if backend.fp32_main_buffers else sb.param
    dims = lite.LiteDims(tokens=tokens, recompute=o.recompute, device=o.lite_device, act_bytes=ab)
    acts: dict[str, float] = {}
    full_layer = 0.0
    for layer, n in sp.layer_kinds:
        for k, x in lite.block_per_token(spec, layer, dims).items():
            acts[k] = acts.get(k, 0.0) + x * tokens * n
        if o.recompute == "full":
            nd = lite.LiteDims(tokens=tokens, recompute="none", device=o.lite_device, act_bytes=ab)
            full_layer = max(full_layer, sum(lite.block_per_token(spec, layer, nd).values()) * tokens)
    root_acts, root_t = lite.root_parts(spec, dims)
    acts.update(root_acts)
    root_numel = sum(g.numel for g in spec.pre + spec.post)
    multi = tokens > ce_chunk_rows(spec.vocab_size)
    dw = spec.vocab_size * spec.hidden_size * (4 if multi else ab)
    transients = {
        "ce_forward": root_t["ce_forward"] - dw,  # the saved d-weight is already an activation
        "loss_backward": root_t["loss_backward"],
    }
    if backend.unit_gather:  # the gathered copies are in the compute dtype (mfsdp keeps an fp32 shard under it)
        transients["root_params_unsharded"] = root_numel * DTYPE_BYTES[o.param_dtype]
        shared = experts_share_block_unit(plan.ranks())  # the runtime's unit rule (mlite.mesh.fsdp_units)
        unit = largest_block_unit(sp.max_layer, sp.max_layer_dense, sp.max_layer_expert, shared)
        transients["fsdp2_unit"] = lite.unit_transient(unit, d_dense)
    if full_layer:
        transients["recompute_layer"] = full_layer
    if backend.grad_buffer or backend.fp32_main_buffers:  # the buffers (mfsdp: main_grad) stay allocated
        return acts, transients, 1.0
    return acts, transients, (1.0 if o.num_microbatches > 1 else 0.0)


def _formulas(est: MemoryEstimate, stages, sb, d_dense, d_exp, f, dims) -> list[dict]:
    w = est.worst
    sp = stages[w.pp_rank]
    o = est.options
    g = lambda x: f"{x / GIB:.2f} GiB"
    shard = sp.dense / d_dense + sp.expert / d_exp
    held = "shard" if sb.params_sharded else "local"
    rows = [
        ("local_params", "dense_local + expert_local", f"{sp.dense:,.0f} + {sp.expert:,.0f}", sp.total),
        (
            "shard",
            "dense_local / d_dense + expert_local / d_expert",
            f"{sp.dense:,.0f} / {d_dense} + {sp.expert:,.0f} / {d_exp}",
            shard,
        ),
        (
            "params",
            f"{held} x {sb.param} B",
            f"{(shard if sb.params_sharded else sp.total):,.0f} x {sb.param}",
            w.params,
        )
        if not w.params_detail
        else (
            "params",
            "FP8 data (1 B) + block scales + columnwise copy of the GEMM weights, 2 B for the rest",
            ", ".join(f"{k}={g(v)}" for k, v in w.params_detail.items()),
            w.params,
        ),
        ("grads", f"{held} x {sb.grad} B", f"{(shard if sb.params_sharded else sp.total):,.0f} x {sb.grad}", w.grads),
        (
            "master",
            "(1 - offload_fraction) x shard x master_bytes",
            f"(1 - {f}) x {shard:,.0f} x {sb.master}",
            w.master,
        ),
        (
            "exp_avg",
            "(1 - offload_fraction) x shard x exp_avg_bytes",
            f"(1 - {f}) x {shard:,.0f} x {sb.exp_avg}",
            w.exp_avg,
        ),
        (
            "exp_avg_sq",
            "(1 - offload_fraction) x shard x exp_avg_sq_bytes",
            f"(1 - {f}) x {shard:,.0f} x {sb.exp_avg_sq}",
            w.exp_avg_sq,
        ),
        (
            "activations",
            "sum over layers of per-layer bytes x micro-batches in flight (+ logits)",
            f"s={dims.s}, b={dims.b}, t={dims.t}, sp={dims.sp}, recompute={dims.recompute}, "
            f"in flight={_in_flight(est.plan, o, w.pp_rank):g}",
            w.activation_total,
        ),
        (
            "transient",
            "max(FSDP2 all-gather + reduce-scatter + recompute layer + attention scores, logits)",
            ", ".join(f"{k}={g(v)}" for k, v in w.transients.items()) or "none",
            w.transient_peak,
        ),
        (
            "other",
            "framework overhead + buffer padding",
            ", ".join(f"{k}={g(v)}" for k, v in w.other.items()),
            sum(w.other.values()),
        ),
        (
            "host",
            "offload_fraction x shard x host_bytes (+ runtime-offloaded state)"
            if "mfsdp_host_state" not in w.host
            else "12 x O + gradient staging (persistent: 4 x O; ring: 4 x min(O, 2 x bucket_size)), O = f x shard",
            f"{f} x {shard:,.0f} x {sb.host_per_offloaded}"
            if "mfsdp_host_state" not in w.host
            else f"O = {f} x {shard:,.0f}, staging {o.mfsdp_grad_staging}, bucket_size {o.mfsdp_bucket_size:,}",
            w.host_total,
        ),
        *_chunked_rows(w.chunked, shard, sb),
        (
            "fits",
            "total <= gpu_mem x (1 - headroom)",
            f"{g(w.total)} <= {o.gpu_memory_gib} GiB x (1 - {o.headroom})",
            w.total,
        ),
    ]
    if w.ngram:
        rows.insert(
            -2,
            (
                "ngram_tables",
                "per table ceil(rows / owners) x width x (1 fp8 + 1/32 E8M0 scale"
                + (" + 4 master + 4 main grad + 4 momentum" if o.engram_trainable else "")
                + ") B; never offloaded",
                f"owners = DP x CP = {w.ngram_owners}, " + ", ".join(f"{k}={g(v)}" for k, v in w.ngram.items()),
                sum(w.ngram.values()),
            ),
        )
    return [{"name": n, "formula": fm, "values": v, "bytes": round(b)} for n, fm, v, b in rows]


def _chunked_rows(ck: ChunkedOffload | None, shard: float, sb) -> list[tuple]:
    """The formula rows of the chunked optimizer-state offload (none when it is off)."""
    if ck is None:
        return []
    g = lambda x: f"{x / GIB:.2f} GiB"
    mom = sb.exp_avg + sb.exp_avg_sq
    return [
        (
            "chunked_resident",
            "(1 - optimizer_state_offload_fraction) x shard x (master + exp_avg + exp_avg_sq) on the GPU between steps"
            " (+ the selected masters when the build skips offload_for_forward)",
            f"(1 - {ck.fraction:g}) x {shard:,.0f} x ({sb.master} + {sb.exp_avg} + {sb.exp_avg_sq})"
            f" + {g(ck.resident_masters)}",
            (1 - ck.fraction) * shard * (sb.master + mom) + ck.resident_masters,
        ),
        (
            "chunked_master_window",
            "optimizer_state_offload_fraction x shard x master (restored in one window for the update)",
            f"{ck.fraction:g} x {shard:,.0f} x {sb.master}" + ("" if ck.master_window else " (never left the GPU)"),
            ck.master_window,
        ),
        (
            "chunked_state_window",
            "two staging slots: min(S, 2 x max(chunk MiB x 2^20, largest parameter's moments)); S if chunk is 0",
            f"S = {g(ck.selected * mom)}, chunk = {g(ck.chunk_bytes)}, largest = {g(ck.largest_state)}",
            ck.state_window,
        ),
        (
            "chunked_host",
            "optimizer_state_offload_fraction x shard x (master + exp_avg + exp_avg_sq), pinned",
            f"{ck.fraction:g} x {shard:,.0f} x ({sb.master} + {sb.exp_avg} + {sb.exp_avg_sq})",
            ck.host,
        ),
    ]
