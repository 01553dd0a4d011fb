"""``predict``: the step time of a plan (model, mesh, training options) on a hardware profile.

One optimizer step of 1F1B (interleaved when VPP > 1) is

    step = m x t_mb(slowest pipeline rank) + (pp - 1) / vpp x mean t_mb  (the bubble)
           + exposed data-parallel traffic + optimizer step + offloaded update

with ``t_mb`` one micro-batch's forward + backward + recompute (:mod:`mlite.time.compute`) plus its exposed TP / SP
collectives, CP ring transfers, EP dispatch and combine and pipeline sends (:mod:`mlite.time.comm`). What overlaps
with what is the backend's: Megatron-Core DDP reduce-scatters the gradients during the last micro-batch's backward and
all-gathers the parameters during the next forward (``overlap_grad_reduce`` / ``overlap_param_gather``, as NeMo's and
Megatron-Bridge's recipes set them); FSDP2 gathers each layer while the previous one computes and reduce-scatters
every micro-batch; TP, EP and pipeline transfers are on the critical path (no TE comm overlap, no DeepEP overlap);
a CP ring transfer hides behind its attention block. Every such choice is listed in ``assumptions``.

The optimizer step moves its state at the HBM rate (:func:`optimizer_bytes_per_param`); ``offload_fraction`` of it
runs on the host: gradients down and parameters up over PCIe plus the host Adam at ``host_adam_params_per_s``, not
overlapped with the device part.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..models.flops import flops_per_token
from ..options.optimizers import DTYPE_BYTES, UPDATE_CHUNK
from .comm import all_to_all_s, p2p_s, ranks_per_node, ring_s, spans_nodes
from .compute import Cost, Shard, embedding_cost, head_cost, layer_backward, layer_forward
from .hardware import HardwareProfile, load_hardware
from .knobs import Knobs
from .routing import dispatch_rows_per_token

PARTS = (
    "forward",
    "backward",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_p2p",
    "pp_bubble",
    "dp_comm",
    "host_bound",
    "optimizer",
    "offload",
)
"""The names of :attr:`StepTime.parts`, in the order of a step (their seconds add up to ``step_s``)."""
COMM_PARTS = ("tp_comm", "cp_comm", "ep_comm", "pp_p2p", "dp_comm")
"""The parts that are exposed communication."""
FSDP_GATHER_BYTES = 12
"""HBM bytes per parameter of one FSDP2 all-gather on a single rank: the copy-in of the shard (read + write bf16),
the collective's copy and the copy-out into the unsharded parameter (``foreach_all_gather`` /
``foreach_all_gather_copy_out``)."""
FSDP_REDUCE_BYTES = 24
"""HBM bytes per parameter of one FSDP2 gradient reduce-scatter on a single rank: the ``chunk_cat`` of the bf16
gradients into the fp32 reduce buffer (read 2, write 4), the collective's copy (8) and the accumulation into the
sharded fp32 gradient (read 4 + 2, write 4)."""
GRAD_BUCKET = 40_000_000
"""Megatron-Core DDP's default bucket (elements): the last bucket's reduce-scatter is never hidden."""


@dataclass
class StepTime:
    """The predicted step of one plan."""

    step_s: float
    """Seconds per optimizer step."""
    tokens_per_step: float
    """Tokens per optimizer step over the whole job (micro-batch x sequence x micro-batches x DP)."""
    tokens_per_s_per_gpu: float
    """Tokens per second per GPU."""
    mfu: float
    """Model FLOPs utilisation: FLOPs per token (tied output projection included) x tokens/s/GPU / bf16 peak."""
    parts: dict
    """Part (:data:`PARTS`) -> seconds of the step it takes on the critical path; they add up to ``step_s``."""
    exposed_comm_s: float
    """Seconds of communication not hidden behind compute (the sum of :data:`COMM_PARTS`)."""
    comm_total: dict
    """Communication part -> its seconds before overlap (what the links carry)."""
    compute: dict
    """``forward`` / ``backward`` / ``recompute`` -> kind (gemm, attention, experts, routing, elementwise, loss) ->
    GPU seconds over the step's micro-batches on the slowest pipeline rank."""
    stage: int
    """The slowest pipeline rank (whose micro-batches set the pace)."""
    assumptions: list
    """What the prediction assumes rather than knows."""
    hardware: HardwareProfile
    """The profile it used."""
    ngpu: int = 0
    """GPUs of the plan."""
    calibration: dict = field(default_factory=dict)
    """When refitted from a run (``mlite time --calibrate-from``): the run, its measured step and the scale."""
    knobs: Knobs = field(default_factory=Knobs)
    """The framework knobs it assumed."""
    rl: Any = None
    """With ``mlite time --rl``: the RL step phase by phase (:class:`mlite.time.rl.RLStepTime`)."""

    def to_dict(self) -> dict:
        return {
            "step_s": self.step_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu": self.mfu,
            "parts": dict(self.parts),
            "exposed_comm_s": self.exposed_comm_s,
            "assumptions": list(self.assumptions),
            "hardware": self.hardware.to_dict(),
            "tokens_per_step": self.tokens_per_step,
            "comm_total": dict(self.comm_total),
            "compute": {k: dict(v) for k, v in self.compute.items()},
            "stage": self.stage,
            "ngpu": self.ngpu,
            "calibration": dict(self.calibration),
            "knobs": asdict(self.knobs),
            **(self.rl.to_dict() if self.rl is not None else {}),
        }


def optimizer_bytes_per_param(o) -> tuple[float, str]:
    """HBM bytes the optimizer step moves per local parameter, and the sum written out.

    Gradient read for the norm, read for the update; fp32 master read + write (with PAO and param remainders: the
    bf16 parameter and its int16 remainder, read + write); the two moments read + written in their dtypes; the bf16
    parameter written from the master (not with remainders); ``zero_grad`` writing the gradient buffer (not where the
    backend frees its gradients)."""
    from ..options.optimizers import ALGORITHMS, BACKENDS

    be = BACKENDS.entry(o.optimizer)
    g = 4 if not be.grad_buffer else DTYPE_BYTES[o.main_grads_dtype]
    m1, m2 = ALGORITHMS.entry(o.optimizer_algorithm).state_bytes(o)
    remainders = o.use_precision_aware_optimizer and o.store_param_remainders and o.param_dtype == "bf16"
    master = 8 if o.param_dtype != "fp32" else 0
    param = 0 if remainders or o.param_dtype == "fp32" else 2
    p_rw = 8 if o.param_dtype == "fp32" else 0
    zero = 0 if be.frees_grads else g
    terms = [
        ("grad norm", g),
        ("grad", g),
        ("master", master),
        ("moments", 2 * (m1 + m2)),
        ("param", param + p_rw),
        ("zero_grad", zero),
    ]
    return float(sum(v for _, v in terms)), " + ".join(f"{v} {k}" for k, v in terms if v)


def grad_accumulate_bytes(o) -> int:
    """HBM bytes per local parameter and micro-batch of Megatron-Core DDP's gradient accumulation: the parameter's
    bf16 gradient read, the buffer read and written in ``main_grads_dtype``."""
    g = DTYPE_BYTES[o.main_grads_dtype]
    return 2 + 2 * g


def _host_recompute(o) -> str | None:
    """Which of the profile's recompute host costs a step pays: ``full``, ``selective`` (also for named
    ``recompute_modules``) or None."""
    if o.recompute == "full":
        return "full"
    if o.recompute == "selective" or o.recompute_modules:
        return "selective"
    return None


def recompute_host_s(hw, o) -> float:
    """Host seconds per layer and micro-batch the recompute mode costs beyond its GPU work (the profile's)."""
    mode = _host_recompute(o)
    return getattr(hw, f"recompute_{mode}_host_s") if mode else 0.0


def host_floor_s(hw, o, layers: int, forward_share: float) -> tuple[float, float]:
    """(forward, backward) host seconds one micro-batch takes to issue on a rank with ``layers`` decoder layers:
    the profile's host floor (:func:`mlite.time.calibrate.host_floor_fit`: per layer, plus fsdp2's hooks, plus the
    per-micro-batch intercept) split between the two phases by ``forward_share`` (the forward's share of the
    kernels the phases launch), and the recompute mode's addition in the backward, where it runs; (0, 0) where the
    profile has none."""
    from ..options.optimizers import BACKENDS

    if not hw.host_floor_layer_s:
        return 0.0, 0.0
    per = hw.host_floor_layer_s
    if BACKENDS.entry(o.optimizer).shards_params:
        per += hw.host_floor_fsdp_layer_s
    both = hw.host_floor_microbatch_s + layers * per
    mode = _host_recompute(o)
    rec = layers * getattr(hw, f"host_floor_{mode}_s") if mode else 0.0
    return both * forward_share, both * (1 - forward_share) + rec


def _shard(spec, plan, o, k: Knobs | None = None) -> Shard:
    p = plan.parallel
    sp = bool(o.sequence_parallel or (spec.is_moe and p.tp > 1))
    return Shard(
        tokens=o.micro_batch_size * o.seq_len / p.cp,
        tp=p.tp,
        sp=sp and p.tp > 1,
        ep=p.ep,
        etp=p.etp_size,
        seq_len=o.seq_len,
        fused_ce=bool(o.fused_cross_entropy),
        fp8=bool(k is not None and k.gemm_dtype == "fp8"),
    )


@dataclass
class _Rank:
    fwd: Cost
    bwd: Cost
    rec: Cost
    comm: dict
    exposed: dict
    n_layers: int
    fwd_exposed: dict


def _recompute_kinds(o) -> tuple[str, ...] | None:
    """The kinds a layer's forward recomputes in the backward (None: the whole layer)."""
    if o.recompute == "full":
        return None
    kinds: set[str] = set()
    if o.recompute == "selective":
        kinds.add("attention")
    mods = set(o.recompute_modules or ())
    if "core_attn" in mods or "gdn" in mods:
        kinds.add("attention")
    if "mlp" in mods or "moe" in mods:
        kinds |= {"experts", "routing", "elementwise"}
    return tuple(sorted(kinds))


_LAYER_CACHE: dict = {}
_FLOPS_CACHE: dict = {}


def _flops(spec, seq_len: int) -> float:
    """:func:`flops_per_token` of the training step, cached per model and sequence length."""
    hit = _FLOPS_CACHE.get((id(spec), seq_len))
    if hit is None or hit[0] is not spec:
        if len(_FLOPS_CACHE) > 1024:
            _FLOPS_CACHE.clear()
        hit = _FLOPS_CACHE[id(spec), seq_len] = (spec, flops_per_token(spec, seq_len))
    return hit[1]


def _layer_costs(hw, spec, layer, sh: Shard, only: tuple[str, ...] | None = None) -> tuple[Cost, Cost]:
    """``(forward, backward)`` of one layer (``only``: the recomputed forward's kinds, backward then empty), cached
    per profile, layer and shard: the meshes of a table share most of them. Callers only read the costs."""
    key = (id(hw), id(layer), sh, only)
    hit = _LAYER_CACHE.get(key)
    if hit is not None and hit[0] is hw and hit[1] is layer:
        return hit[2]
    if len(_LAYER_CACHE) > 65536:
        _LAYER_CACHE.clear()
    if only is None:
        out = (layer_forward(hw, spec, layer, sh), layer_backward(hw, spec, layer, sh))
    else:
        out = (layer_forward(hw, spec, layer, sh, only=only), Cost())
    _LAYER_CACHE[key] = (hw, layer, out)
    return out


def _rank_costs(hw, spec, plan, o, st, sh: Shard, k: Knobs) -> _Rank:
    fwd, bwd, rec = Cost(), Cost(), Cost()
    only = _recompute_kinds(o)
    n_moe = 0
    n_attn = 0
    cp_exposed = 0.0
    cp_total = 0.0
    cp_fwd = 0.0
    p = plan.parallel
    gpn = plan.gpus_per_node
    n_layers = 0
    for layer, count in st.layer_kinds:
        f, b = _layer_costs(hw, spec, layer, sh)
        fwd.merge(f, count)
        bwd.merge(b, count)
        n_layers += count
        if only is None:
            rec.merge(f, count)
        elif only:
            rec.merge(_layer_costs(hw, spec, layer, sh, only)[0], count)
        if layer.mlp in ("moe", "hash_moe"):
            n_moe += count
        if layer.attention in ("full", "gated_full", "mla", "dsa", "csa", "hca", "swa", "gdn"):
            n_attn += count
            if p.cp > 1:
                kv = spec.num_key_value_heads if layer.attention not in ("mla", "dsa") else spec.num_attention_heads
                d = spec.head_dim + spec.v_head_dim
                nbytes = (p.cp - 1) * sh.tokens * kv / p.tp * d * 2
                crosses = spans_nodes(p.cp, p.tp, gpn)
                c_f = p2p_s(hw, nbytes, crosses)
                c_b = p2p_s(hw, 2 * nbytes, crosses)
                a_f = f.parts.get("attention", 0.0)
                a_b = b.parts.get("attention", 0.0)
                cp_total += count * (c_f + c_b + (c_f if only is None else 0.0))
                cp_exposed += count * (max(0.0, c_f - a_f) + max(0.0, c_b - a_b))
                cp_fwd += count * max(0.0, c_f - a_f)
                if only is None:
                    cp_exposed += count * max(0.0, c_f - a_f)
    if st.has_embedding:
        fwd.merge(embedding_cost(hw, spec, sh, False))
        bwd.merge(embedding_cost(hw, spec, sh, True))
    if st.has_head:
        fwd.merge(head_cost(hw, spec, sh, False))
        bwd.merge(head_cost(hw, spec, sh, True))
    from ..options.optimizers import BACKENDS

    if BACKENDS.entry(o.optimizer).grad_buffer and not k.gradient_accumulation_fusion:  # a separate add per mb
        bwd.add("grad_accumulate", st.total * grad_accumulate_bytes(o) / hw.hbm_bytes_per_s, 0)
    comm: dict[str, float] = {}
    h = spec.hidden_size
    layers_all = n_layers + st.mtp_layers
    passes = 3 if only is None else 2  # forward, backward (+ the recomputed forward)
    # Megatron-Core's "moe" recompute checkpoints the MoE layer's whole forward (router, dispatch, experts, combine:
    # MoELayer.forward's custom_forward under tensor_parallel.checkpoint / te_checkpoint, NVIDIA/Megatron-LM
    # megatron/core/transformer/moe/moe_layer.py @ 001199898), so its all-to-alls run a third time
    ep_passes = 3 if only is None or "moe" in (o.recompute_modules or ()) else 2
    if p.tp > 1:
        buf = sh.tokens * h * 2
        crosses, loc = spans_nodes(p.tp, 1, gpn), ranks_per_node(p.tp, 1, gpn)
        if sh.sp:
            one = 2 * ring_s(hw, buf, p.tp, crosses, "all_gather", loc) + 2 * ring_s(
                hw, buf, p.tp, crosses, "reduce_scatter", loc
            )
        else:
            one = 2 * ring_s(hw, buf, p.tp, crosses, "all_reduce", loc)
        comm["tp_comm"] = passes * layers_all * one
    if n_moe and p.ep * p.etp_size > 1:
        rows = dispatch_rows_per_token(spec.num_experts, spec.moe_router_topk, p.ep, k.ep_dispatcher, k.routing)
        buf = sh.sp_tokens * rows * h * 2
        one = 0.0
        if p.ep > 1:
            dispatch = buf * p.etp_size * (0.5 if k.dispatch_dtype == "fp8" else 1.0)
            one += all_to_all_s(hw, dispatch, p.ep, p.etp_size, gpn)
            one += all_to_all_s(hw, buf * p.etp_size, p.ep, p.etp_size, gpn)
        if p.etp_size > 1:
            x, loc = spans_nodes(p.etp_size, 1, gpn), ranks_per_node(p.etp_size, 1, gpn)
            one += ring_s(hw, buf * p.etp_size, p.etp_size, x, "all_gather", loc)
            one += ring_s(hw, buf * p.etp_size, p.etp_size, x, "reduce_scatter", loc)
        comm["ep_comm"] = ep_passes * n_moe * one
    if p.pp > 1:
        crosses = spans_nodes(p.pp, p.tp * p.cp * plan.dp, gpn)
        comm["pp_p2p"] = 2 * p.vpp * p2p_s(hw, sh.sp_tokens * h * 2, crosses)
    exposed = dict(comm)
    for name, share in (("tp_comm", k.tp_comm_overlap), ("ep_comm", k.ep_comm_overlap)):
        if name in exposed:
            exposed[name] *= 1.0 - share
    fwd_exposed = {n: v / (2 if n == "pp_p2p" else passes) for n, v in exposed.items()}
    if cp_total:
        comm["cp_comm"] = cp_total
        exposed["cp_comm"] = cp_exposed
        fwd_exposed["cp_comm"] = cp_fwd
    return _Rank(fwd, bwd, rec, comm, exposed, layers_all, fwd_exposed)


def _ranks(hw, spec, plan, o, stages, sh: Shard, k: Knobs) -> tuple[list[_Rank], list[float]]:
    """Every pipeline rank's costs and micro-batch seconds; ranks that run the same layers (and neither or both of
    the embedding and the head) share one computation: a deep pipeline's middle ranks are alike."""
    ranks: list[_Rank] = []
    mb: list[float] = []
    seen: dict = {}
    for st in stages:
        key = (tuple((id(layer), n) for layer, n in st.layer_kinds), st.has_embedding, st.has_head, st.mtp_layers)
        hit = seen.get(key)
        if hit is None:
            r = _rank_costs(hw, spec, plan, o, st, sh, k)
            t = r.fwd.seconds(hw) + r.bwd.seconds(hw) + r.rec.seconds(hw) + sum(r.exposed.values())
            hit = seen[key] = (r, t)
        ranks.append(hit[0])
        mb.append(hit[1])
    return ranks, mb


def _dp_time(hw, spec, plan, o, st, r: _Rank, k: Knobs) -> tuple[float, float, list[str]]:
    """(total, exposed) seconds of the data-parallel traffic of one step on this pipeline rank."""
    from ..options.optimizers import BACKENDS

    p = plan.parallel
    gpn = plan.gpus_per_node
    be = BACKENDS.entry(o.optimizer)
    notes: list[str] = []
    groups = [  # (parameters, group size, stride)
        (st.dense, plan.dp * p.cp, p.tp),
        (st.expert, plan.edp, p.ep * p.etp_size),
    ]
    m = o.num_microbatches
    fwd_mb, bwd_mb = r.fwd.seconds(hw), r.bwd.seconds(hw)
    total = exposed = 0.0
    if be.shards_params:
        # FSDP2: each layer gathered in the forward and again in the backward, gradients reduce-scattered in fp32,
        # every micro-batch; on one rank the gather and the reduce are copies in HBM.
        gathers = 2 if k.fsdp_reshard_after_forward else 1
        rb = DTYPE_BYTES[k.fsdp_reduce_dtype]
        reduces = m if k.fsdp_reduce_every_microbatch else 1
        ag = rs = copies = 0.0
        for n, size, stride in groups:
            if not n:
                continue
            if size > 1:
                crosses, loc = spans_nodes(size, stride, gpn), ranks_per_node(size, stride, gpn)
                ag += gathers * ring_s(hw, n * 2, size, crosses, "all_gather", loc)
                rs += ring_s(hw, n * rb, size, crosses, "reduce_scatter", loc)
            else:  # one rank: the gather and the reduce are copies in HBM, nothing to hide them behind
                copies += (gathers * FSDP_GATHER_BYTES + FSDP_REDUCE_BYTES) * n / hw.hbm_bytes_per_s
        total = m * (ag + copies) + reduces * rs
        layer_share = 1.0 / max(r.n_layers, 1)
        per_mb = ag + rs * reduces / m
        host = r.n_layers * hw.fsdp_layer_host_s
        exposed = m * (max(0.0, per_mb - (fwd_mb + bwd_mb)) + per_mb * layer_share + copies + host)
        if be.fp32_main_buffers and o.offload_fraction >= 1.0:
            # M-FSDP's full offload sets overlap_param_gather=False (ISEEKYAN/Megatron-LM experimental/lite/docs/
            # fsdp2-param-offload-overlap.md @ 4b19e6bd): every gather waits, only the reduce-scatter still overlaps
            hidden = rs * reduces / m
            exposed = m * (max(0.0, hidden - (fwd_mb + bwd_mb)) + hidden * layer_share + ag + copies + host)
            notes.append("mfsdp full offload: the parameter-gather prefetch is off, every all-gather is exposed")
        notes.append(
            f"fsdp2: {gathers} gather(s) per layer and micro-batch, gradients reduced in {k.fsdp_reduce_dtype} "
            f"{'every micro-batch' if reduces == m else 'once per step'}; each layer's traffic overlaps the previous "
            "layer's compute (prefetch), the first gather and the last reduce-scatter are exposed; on one GPU they "
            "are HBM copies"
        )
        return total, exposed, notes
    gb = DTYPE_BYTES[o.main_grads_dtype] if be.grad_buffer else 4
    for n, size, stride in groups:
        if not n or size <= 1:
            continue
        crosses, loc = spans_nodes(size, stride, gpn), ranks_per_node(size, stride, gpn)
        if o.use_distributed_optimizer:
            rs = ring_s(hw, n * gb, size, crosses, "reduce_scatter", loc)
            ag = ring_s(hw, n * 2, size, crosses, "all_gather", loc)
        else:
            rs, ag = ring_s(hw, n * gb, size, crosses, "all_reduce", loc), 0.0
        last = min(1.0, GRAD_BUCKET / n)
        total += rs + ag
        exposed += max(0.0, rs - bwd_mb) + last * rs if k.overlap_grad_reduce else rs
        exposed += max(0.0, ag - fwd_mb) if k.overlap_param_gather else ag
    if total:
        notes.append(
            "dist_opt: gradient reduce-scatter "
            + (
                "overlaps the last micro-batch's backward (the last 40M-element bucket exposed)"
                if k.overlap_grad_reduce
                else "exposed"
            )
            + ", parameter all-gather "
            + ("overlaps the next forward" if k.overlap_param_gather else "exposed")
        )
    return total, exposed, notes


def optimizer_host_s(hw, o, layers: int) -> float:
    """Seconds the lite runtime's optimizer step + ``zero_grad`` take beyond the update's HBM bytes on a rank with
    ``layers`` decoder layers: the profile's per-layer and per-step figures of the backend (``mlite calibrate``'s
    optimizer anchor; fsdp2 for a backend that shards parameters, else dist_opt's; 0 where none was measured)."""
    from ..options.optimizers import BACKENDS

    if BACKENDS.entry(o.optimizer).shards_params:
        return layers * hw.fsdp_optimizer_layer_host_s + hw.fsdp_optimizer_step_host_s
    return layers * hw.optimizer_layer_host_s + hw.optimizer_step_host_s


def _update_time(hw, plan, o, st) -> tuple[float, float, str]:
    """(device optimizer seconds, offloaded update seconds, bytes formula) of this pipeline rank's shard."""
    from ..options.optimizers import BACKENDS

    p = plan.parallel
    be = BACKENDS.entry(o.optimizer)
    sharded = be.shards_params or o.use_distributed_optimizer
    n = st.dense / (plan.dp * p.cp if sharded else 1) + st.expert / (plan.edp if sharded else 1)
    per, formula = optimizer_bytes_per_param(o)
    f = float(o.offload_fraction)
    device = (1 - f) * n * per / hw.hbm_bytes_per_s + 8 * hw.kernel_launch_s + optimizer_host_s(hw, o, st.layers)
    off = 0.0
    if f > 0:
        g = DTYPE_BYTES[o.main_grads_dtype] if be.grad_buffer else 4
        # serial, as the runtime runs it (mlite/runtime/optim/optimizer.py): step_async queues every gradient
        # copy to the host before its scale.tolist() (global-norm clipping needs them all), so the host update
        # starts only after the last lands; _update_staged_c then copies each span's new parameters back while
        # it updates the next, so only the last span's copy (at least UPDATE_CHUNK elements) is exposed
        span = min(f * n, float(UPDATE_CHUNK))
        off = f * n * g / hw.pcie_bytes_per_s + f * n / hw.host_adam_params_per_s + span * 2 / hw.pcie_bytes_per_s
    return device, off, formula


def predict(
    spec, plan, training=None, hardware: HardwareProfile | str = "H200", knobs: Knobs | None = None
) -> StepTime:
    """The predicted step of ``spec`` on the resolved mesh ``plan`` with ``training``'s options (``knobs``: what
    the framework does beyond them, :class:`mlite.time.knobs.Knobs`; default the lite runtime's)."""
    from ..errors import MliteError
    from ..memory.params import stage_params
    from ..options import TrainingOptions

    hw = load_hardware(hardware)
    o = training or TrainingOptions()
    if not plan.valid:
        raise MliteError("the mesh is invalid: fix the errors mlite mesh reports before asking for its step time")
    k = (knobs or Knobs()).check()
    p = plan.parallel
    sh = _shard(spec, plan, o, k)
    stages = stage_params(spec, plan)
    ranks, mb = _ranks(hw, spec, plan, o, stages, sh, k)
    slow = max(range(len(ranks)), key=lambda i: mb[i])
    r, st = ranks[slow], stages[slow]
    m = o.num_microbatches
    bubble = (p.pp - 1) / p.vpp * (sum(mb) / len(mb)) if p.pp > 1 else 0.0
    dp_total, dp_exposed, notes = _dp_time(hw, spec, plan, o, st, r, k)
    opt_s, off_s, formula = _update_time(hw, plan, o, st)
    parts = {
        "forward": m * r.fwd.seconds(hw),
        "backward": m * r.bwd.seconds(hw),
        "recompute": m * (r.rec.seconds(hw) + r.n_layers * recompute_host_s(hw, o)),
        "tp_comm": m * r.exposed.get("tp_comm", 0.0),
        "cp_comm": m * r.exposed.get("cp_comm", 0.0),
        "ep_comm": m * r.exposed.get("ep_comm", 0.0),
        "pp_p2p": m * r.exposed.get("pp_p2p", 0.0),
        "pp_bubble": bubble,
        "dp_comm": dp_exposed,
        "optimizer": opt_s,
        "offload": off_s,
    }
    # neither phase of a micro-batch is faster than the host issuing it: the GPU waits on the launches of a
    # launch-bound model; the forward's issue cannot hide behind the backward's GPU work (the backward starts from
    # the forward's loss), so each phase takes the slower of its host floor and its device time
    share = r.fwd.kernels / (r.fwd.kernels + r.bwd.kernels + r.rec.kernels) if r.fwd.kernels else 1 / 3
    floor_f, floor_b = host_floor_s(hw, o, r.n_layers, share)
    floor = floor_f + floor_b
    device_mb = sum(v for n, v in parts.items() if n not in ("pp_bubble", "optimizer", "offload")) / m
    device_f = r.fwd.seconds(hw) + sum(r.fwd_exposed.values())
    device_b = device_mb - device_f
    parts["host_bound"] = m * (max(0.0, floor_f - device_f) + max(0.0, floor_b - device_b))
    comm_total = {k: m * r.comm.get(k, 0.0) for k in COMM_PARTS if k != "dp_comm"}
    comm_total["dp_comm"] = dp_total
    step = sum(parts.values())
    tokens = o.micro_batch_size * o.seq_len * m * plan.dp
    tps = tokens / step / plan.ngpu
    mfu = _flops(spec, o.seq_len) * tps / hw.peak_bf16_flops
    assumptions = [
        "balanced routing: every expert gets tokens x topk / experts rows" if spec.is_moe else None,
        f"EP dispatch + combine move "
        f"{dispatch_rows_per_token(spec.num_experts, spec.moe_router_topk, p.ep, k.ep_dispatcher, k.routing):.3g} "
        f"rows per token ({k.ep_dispatcher} dispatcher, {k.routing} routing)"
        if spec.is_moe and p.ep > 1
        else None,
        f"TP / SP collectives {k.tp_comm_overlap:.0%} and EP dispatch + combine {k.ep_comm_overlap:.0%} hidden "
        "behind compute; pipeline sends exposed",
        "linear layers' GEMMs in fp8 at the fp8 peak x gemm_efficiency, inputs cast first" if sh.fp8 else None,
        f"1F1B pipeline bubble (pp - 1) / vpp x the mean micro-batch time ({p.pp - 1}/{p.vpp})" if p.pp > 1 else None,
        *notes,
        f"optimizer step: {formula} bytes per local parameter at the copy rate {hw.hbm_bytes_per_s:.3g} B/s, plus "
        f"{optimizer_host_s(hw, o, st.layers):.3g} s of the runtime's host work (the profile's optimizer anchor)",
        "offloaded update, serial after the device part: every offloaded gradient to the host over PCIe (clipping "
        f"needs them all), then the host Adam at {hw.host_adam_params_per_s:.3g} params/s, then the last span's "
        "parameters back (earlier spans' copies hide behind the next span's update; a span is >= "
        f"{UPDATE_CHUNK} elements)"
        if o.offload_fraction
        else None,
        f"host floor {floor_f:.3g} s forward + {floor_b:.3g} s backward per micro-batch (the profile's host-floor "
        "anchor, split by the phases' kernels): host_bound is what each phase waits on the host beyond its device "
        "time"
        if floor
        else None,
        "attention at the flash kernel's rate (the profile's attention efficiencies)",
        "no data loading or logging; host time only as kernel launches and the profile's measured host costs "
        "(recompute, FSDP2 hooks, and what the layer anchor folds into elementwise_efficiency)",
    ]
    src = "mlite calibrate" if hw.measured else "vendor figures and documented default efficiencies"
    assumptions.append(f"hardware {hw.name}: {src}")
    compute = {
        "forward": {k: m * v for k, v in r.fwd.parts.items()},
        "backward": {k: m * v for k, v in r.bwd.parts.items()},
        "recompute": {k: m * v for k, v in r.rec.parts.items()},
    }
    return StepTime(
        step_s=step,
        tokens_per_step=tokens,
        tokens_per_s_per_gpu=tps,
        mfu=mfu,
        parts=parts,
        exposed_comm_s=sum(parts[k] for k in COMM_PARTS),
        comm_total=comm_total,
        compute=compute,
        stage=slow,
        assumptions=[a for a in assumptions if a],
        hardware=hw,
        ngpu=plan.ngpu,
        knobs=k,
    )


def forward_time(spec, plan, training, hardware: HardwareProfile | str = "H200", knobs: Knobs | None = None) -> dict:
    """Part -> seconds of a forward-only pass over ``training.num_microbatches`` micro-batches (verl's log-prob
    forwards): the forward compute, one pass of the TP / EP / CP traffic, the pipeline sends one way and a bubble of
    (pp - 1) / vpp mean forward micro-batches; no backward, no data-parallel traffic, no optimizer."""
    from ..memory.params import stage_params

    hw = load_hardware(hardware)
    k = (knobs or Knobs()).check()
    p = plan.parallel
    sh = _shard(spec, plan, training, k)
    ranks = [_rank_costs(hw, spec, plan, training, st, sh, k) for st in stage_params(spec, plan)]
    mb = [r.fwd.seconds(hw) + sum(r.fwd_exposed.values()) for r in ranks]
    slow = max(range(len(ranks)), key=lambda i: mb[i])
    r, m = ranks[slow], training.num_microbatches
    out = {"forward": m * r.fwd.seconds(hw)}
    for name in COMM_PARTS[:-1]:
        out[name] = m * r.fwd_exposed.get(name, 0.0)
    out["pp_bubble"] = (p.pp - 1) / p.vpp * sum(mb) / len(mb) if p.pp > 1 else 0.0
    return out
