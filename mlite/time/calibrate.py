"""``mlite calibrate``: measure this machine's GPU (or CPU) and write a :class:`~.hardware.HardwareProfile`.

Each measurement is a small function that returns plain numbers and runs the same code on ``cuda`` and ``cpu`` (on
CPU at small sizes, so CI covers it). Timing: warm-up calls, then the median of several repeats of a timed loop --
CUDA events on a GPU, the host clock (``time.perf_counter``) on CPU; the host-clock measurements (launch cost, host
Adam) synchronise once at the end. What is measured:

* GEMMs (:func:`gemm_rates`): ``torch.mm(x, w.t())`` (the ``F.linear`` layout) at the model's projection shapes
  (:func:`model_gemm_shapes`) at several token counts plus two large squares; :func:`fit_gemm` fits
  ``t = flops / (peak x gemm_efficiency) + gemm_overhead_s``.
* Attention (:func:`attention_rate`): ``F.scaled_dot_product_attention``, causal, GQA through ``enable_gqa`` as
  :func:`mlite.runtime.models.attention._sdpa` calls it, forward and forward + backward.
* Routed experts (:func:`grouped_gemm_rate`): the expert GEMM path the lite runtime picks for the device
  (:func:`mlite.runtime.models.moe.expert_path`: ``torch._grouped_mm``, padded ``bmm`` or the per-expert loop) at the
  model's expert shapes, tokens spread evenly over the experts.
* Memory (:func:`copy_bandwidth`): a large device copy (bytes read + written per second) and an elementwise add
  ``c = a + b`` (3 tensors of traffic) whose effective bandwidth over the copy's is ``elementwise_efficiency``.
* Launch cost (:func:`launch_cost`), host <-> device copies (:func:`host_device_bandwidth`, pinned memory) and the
  host AdamW of ``offload_fraction`` (:func:`host_adam_rate`, :func:`mlite.runtime.optim.host.update_chunk` chunk by
  chunk, as :meth:`mlite.runtime.optim.optimizer.ShardedAdamW._update_staged` runs it).

* The lite runtime itself, on the model cut to 1 and 3 layers (:func:`cut_model_seconds`): the layer anchor at 4096
  tokens per recompute mode and on fsdp2 (:func:`anchor_fit`), the optimizer anchor (:func:`optimizer_anchor_fit`),
  and the host floor at a few tokens (:func:`host_floor_fit`): what issuing a layer costs the host when the GPU
  waits on it, which sets a launch-bound model's step (a small MoE's is).

The vendor figures a single process cannot measure (peak FLOP/s, NVLink, network, GPUs per node, memory sizes,
collective efficiency and latency) stay the base profile's.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from ..errors import MliteError
from .hardware import HardwareProfile, hardware_names, load_hardware, profile_from_dict

DEFAULT_BASE = "H100"
"""The base profile when the device's name matches no shipped profile (and on CPU)."""

MEASURED_FIELDS = (
    "gemm_efficiency",
    "gemm_overhead_s",
    "grouped_gemm_efficiency",
    "attention_efficiency",
    "attention_bwd_efficiency",
    "hbm_bytes_per_s",
    "elementwise_efficiency",
    "kernel_launch_s",
    "pcie_bytes_per_s",
    "host_adam_params_per_s",
    "recompute_selective_host_s",
    "recompute_full_host_s",
    "fsdp_layer_host_s",
    "optimizer_layer_host_s",
    "optimizer_step_host_s",
    "fsdp_optimizer_layer_host_s",
    "fsdp_optimizer_step_host_s",
    "host_floor_layer_s",
    "host_floor_microbatch_s",
    "host_floor_selective_s",
    "host_floor_full_s",
    "host_floor_fsdp_layer_s",
)
"""The profile fields :func:`calibrate` may replace (the others are the base's vendor figures)."""


@dataclass(frozen=True)
class Sizes:
    """How large the measurements are (:data:`FULL` on a GPU, :data:`QUICK` for a CPU smoke test)."""

    gemm_tokens: tuple[int, ...]
    """Token counts (GEMM rows) at which the model's projections are measured."""
    gemm_squares: tuple[int, ...]
    """Edge of the square GEMMs added to pin the large-shape rate."""
    attention_tokens: int
    """Tokens per attention call (batch x sequence)."""
    attention_seq: int
    """Longest sequence of the attention measurement (capped by the model's context)."""
    expert_tokens: int
    """Tokens routed through the experts per call."""
    copy_bytes: int
    """Bytes of the source tensor of the device copy and of each operand of the add."""
    launches: int
    """Tiny kernels launched back to back per repeat."""
    pcie_bytes: int
    """Bytes of one host <-> device copy."""
    adam_numel: int
    """Elements of the host AdamW shard (large enough on a GPU machine that the state streams from DRAM, as a
    real offloaded shard does, not from the CPU's caches)."""
    repeats: int
    """Timed repeats (the median is kept)."""
    anchor_tokens: int = 4096
    """Tokens of the micro-batch of the layer anchor (:func:`runtime_layer_seconds`)."""
    adam_model_numel: int = 0
    """Cap of the elements of the host AdamW measured at the model's size (:func:`_part_host_adam`: the whole
    model's parameters, what ``offload_fraction=1`` updates on one GPU; 0: only ``adam_numel``)."""
    floor_tokens: int = 64
    """Tokens of the micro-batch of the host-floor anchor (:func:`host_floor_fit`): few enough that the GPU work is
    negligible next to the host's issuing of it."""


FULL = Sizes((1024, 4096, 16384), (4096, 8192), 32768, 4096, 16384, 1 << 30, 5000, 1 << 28, 1 << 26, 5, 4096, 1 << 31)
"""Sizes of a full calibrate on a GPU (sized for well under a minute on an H200: an estimate, not yet timed there)."""
QUICK = Sizes((64, 256), (128, 256), 512, 128, 256, 1 << 22, 500, 1 << 20, 1 << 19, 3, 64, 1 << 21, 16)
"""Sizes of ``--quick`` and of every CPU run (seconds on a 2-core CPU)."""


# ---------------------------------------------------------------------------------------------------- device, timing
def check_device(device) -> str:
    """``cuda``, ``cuda:N`` or ``cpu``, usable here, as ``cuda:N`` (the current device for ``cuda``) or ``cpu``;
    anything else is bad input (one line)."""
    import torch

    text = str(device)
    if text != "cpu" and text != "cuda" and not (text.startswith("cuda:") and text[5:].isdigit()):
        raise MliteError(f"--device {text!r}: use cuda (or cuda:N) or cpu")
    if text.startswith("cuda"):
        if not torch.cuda.is_available():
            raise MliteError(
                f"--device {text}: no CUDA device is visible to torch {torch.__version__} here; use --device cpu "
                "(a smoke test) or run on the GPU machine"
            )
        index = torch.device(text).index
        if index is not None and index >= torch.cuda.device_count():
            raise MliteError(f"--device {text}: only {torch.cuda.device_count()} CUDA device(s) are visible")
        return f"cuda:{torch.cuda.current_device() if index is None else index}"
    return text


def device_name(device) -> str:
    """The GPU's name (``NVIDIA H200``), or ``CPU <machine>`` on CPU."""
    import torch

    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU {platform.machine() or 'unknown'}".strip()


def _is_cuda(device) -> bool:
    return str(device).startswith("cuda")


def _sync(device) -> None:
    import torch

    if _is_cuda(device):
        torch.cuda.synchronize(torch.device(device))


def time_per_call(fn: Callable[[], object], device, *, inner: int = 1, repeats: int = 5, warmup: int = 2) -> float:
    """Median seconds of one ``fn()`` over ``repeats`` timed loops of ``inner`` calls (after ``warmup`` calls):
    CUDA events around each loop on a GPU, the host clock with a synchronisation on CPU."""
    import torch

    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        if _is_cuda(device):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def _inner_for(seconds_hint: float, target: float = 2e-3, cap: int = 200) -> int:
    """Calls per timed loop so that one loop lasts about ``target`` seconds."""
    return max(1, min(cap, int(target / max(seconds_hint, 1e-9))))


def _timed(fn: Callable[[], object], device, repeats: int) -> float:
    """:func:`time_per_call` with a loop length chosen from one probe call."""
    probe = time_per_call(fn, device, inner=1, repeats=1, warmup=1)
    return time_per_call(fn, device, inner=_inner_for(probe), repeats=repeats, warmup=1)


# ---------------------------------------------------------------------------------------------------------- GEMMs
@dataclass(frozen=True)
class GemmShape:
    """One projection GEMM of a model: ``[M, K] x [K, N]``, ``count`` times per forward (layers, experts)."""

    name: str
    """The tensor it multiplies by (``self_attn.q_proj.weight``, ``mlp.experts.gate_up_proj``)."""
    m: int
    """Rows: tokens (for a routed expert: the tokens it receives)."""
    n: int
    """Output features."""
    k: int
    """Input features."""
    count: int
    """How many of these GEMMs one forward pass runs."""

    @property
    def flops(self) -> float:
        """Forward FLOPs of all ``count`` GEMMs: 2 x M x N x K x count."""
        return 2.0 * self.m * self.n * self.k * self.count


_ROW_PARALLEL = ("o_proj", "down_proj", "out_proj", "dense_4h_to_h", "w2")
"""Weight names whose output is the model width (their input is the split dimension)."""


def _short(name: str) -> str:
    """The module name of a tensor: ``q_proj`` of ``self_attn.q_proj.weight``."""
    parts = name.split(".")
    return parts[-2] if len(parts) > 1 and parts[-1] in ("weight", "bias") else parts[-1]


def _input_dim(spec, short: str) -> int:
    """K of a column-parallel projection: the model width, or the MLA low rank it reads."""
    if short in ("q_b_proj", "wq_b") and spec.q_lora_rank:
        return int(spec.q_lora_rank)
    if short == "kv_b_proj" and spec.kv_lora_rank:
        return int(spec.kv_lora_rank)
    return int(spec.hidden_size)


def is_gemm_weight(group) -> bool:
    """A tensor a token is multiplied by (a projection or a routed expert), not a norm, bias, convolution or scalar."""
    from ..models.flops import _MATRIX_COMPONENTS

    if group.component not in _MATRIX_COMPONENTS:
        return False
    if group.component == "routed_experts":
        return True
    short = _short(group.name)
    return group.name.endswith(".weight") and "norm" not in short and "conv" not in short


def _split(n: int, tp: int) -> int:
    return max(1, -(-n // tp))


def _gemm_of(spec, group, tokens: int, tp: int) -> GemmShape:
    h = int(spec.hidden_size)
    if group.component == "routed_experts":
        e = int(spec.num_experts)
        per = group.numel // e
        rows = max(1, tokens * int(spec.moe_router_topk) // e)
        if group.name.endswith("down_proj"):
            return GemmShape(group.name, rows, h, per // h, e)
        return GemmShape(group.name, rows, per // h, h, e)
    short = _short(group.name)
    if short in _ROW_PARALLEL and group.numel % h == 0:
        n, k = h, group.numel // h
        if group.parallel == "tp":
            k = _split(k, tp)
    else:
        k = _input_dim(spec, short)
        if group.numel % k:
            k = 1  # a tensor the kit cannot factor: one row of its numel (FLOPs still exact)
        n = group.numel // k
        if group.parallel in ("tp", "vocab"):
            n = _split(n, tp)
    return GemmShape(group.name, tokens, n, k, 1)


def model_gemm_shapes(spec, tokens: int, tp: int = 1) -> list[GemmShape]:
    """The projection GEMMs of one forward pass over ``tokens`` tokens on one GPU of a ``tp``-way split: attention,
    MLP and shared-expert projections, routed experts (``tokens x topk / num_experts`` rows each, ``count`` =
    experts), the output projection (the embedding matrix when tied). Identical GEMMs of different layers merge into
    one entry (``count`` = layers). At ``tp=1`` their FLOPs sum to 2 x tokens x the matrix parameters
    :func:`mlite.models.flops.flops_per_token` counts, less the norm weights that count includes."""
    from ..models.flops import output_projection

    if tokens < 1 or tp < 1:
        raise MliteError(f"model_gemm_shapes: tokens={tokens}, tp={tp} must be >= 1")
    out: dict[tuple, GemmShape] = {}

    def add(s: GemmShape) -> None:
        key = (s.name, s.m, s.n, s.k)
        old = out.get(key)
        out[key] = replace(s, count=s.count + old.count) if old else s

    for layer in spec.main_layers:
        for g in layer.groups:
            if is_gemm_weight(g):
                add(_gemm_of(spec, g, tokens, tp))
    for g in spec.post:
        if is_gemm_weight(g):
            add(_gemm_of(spec, g, tokens, tp))
    if not any(g.component == "lm_head" for g in spec.post) and output_projection(spec):
        add(GemmShape("lm_head (tied embedding)", tokens, _split(int(spec.vocab_size), tp), int(spec.hidden_size), 1))
    return list(out.values())


def gemm_rates(device, shapes: Iterable[tuple[int, int, int]], dtype=None, repeats: int = 5) -> list[list[float]]:
    """``[M, N, K, flops_per_s, seconds]`` of ``torch.mm(x[M, K], w[N, K].t())`` for each distinct shape (bf16 by
    default), in the order given."""
    import torch

    dtype = dtype or torch.bfloat16
    rows = []
    for m, n, k in dict.fromkeys((int(m), int(n), int(k)) for m, n, k in shapes):
        x = torch.randn(m, k, device=device, dtype=dtype)
        w = torch.randn(n, k, device=device, dtype=dtype)
        out = torch.empty(m, n, device=device, dtype=dtype)
        wt = w.t()
        t = _timed(functools.partial(torch.mm, x, wt, out=out), device, repeats)
        rows.append([m, n, k, 2.0 * m * n * k / t, t])
    return rows


def fit_gemm(rates: Sequence[Sequence[float]], peak_flops: float) -> tuple[float, float]:
    """``(gemm_efficiency, gemm_overhead_s)`` of ``t = flops / (peak x eff) + overhead`` fitted to ``[M, N, K,
    flops_per_s, ...]`` rows: least squares on the relative error (each shape weighs alike, so the small shapes pin
    the overhead and the large ones the rate), overhead >= 0; the efficiency is capped at 1."""
    pts = [(2.0 * r[0] * r[1] * r[2], 2.0 * r[0] * r[1] * r[2] / r[3]) for r in rates]
    if not pts or peak_flops <= 0:
        raise MliteError("fit_gemm: needs at least one measured GEMM and a positive peak")
    # minimise sum ((a f + c) / t - 1)^2 over a (seconds per FLOP) and c (seconds)
    sff = sum((f / t) ** 2 for f, t in pts)
    sfc = sum(f / t**2 for f, t in pts)
    scc = sum(1 / t**2 for _, t in pts)
    sf = sum(f / t for f, t in pts)
    sc = sum(1 / t for _, t in pts)
    det = sff * scc - sfc * sfc
    a = c = -1.0
    if len(pts) > 1 and det > 0:
        a = (sf * scc - sc * sfc) / det
        c = (sff * sc - sfc * sf) / det
    if a <= 0 or c < 0:  # the constrained optimum lies on an edge: no overhead (a > 0 always there)
        a, c = sf / sff, 0.0
    return min(1.0, 1.0 / (a * peak_flops)), c


# ------------------------------------------------------------------------------------------------------ attention
def attention_rate(
    device, *, heads: int, kv_heads: int, head_dim: int, seq: int, batch: int = 1, dtype=None, repeats: int = 5
) -> dict:
    """Causal SDPA on ``[batch, heads, seq, head_dim]`` (GQA through ``enable_gqa``): forward seconds, forward +
    backward seconds, the backward's share, and their FLOP rates (forward FLOPs 4 x b x heads x seq^2 x d / 2,
    backward 2.5 x that)."""
    import torch
    import torch.nn.functional as F

    dtype = dtype or torch.bfloat16
    q = torch.randn(batch, heads, seq, head_dim, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(batch, kv_heads, seq, head_dim, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(batch, kv_heads, seq, head_dim, device=device, dtype=dtype, requires_grad=True)
    gqa = kv_heads != heads

    def fwd():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    grad = torch.randn(batch, heads, seq, head_dim, device=device, dtype=dtype)

    def fwd_bwd():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return torch.autograd.grad(out, (q, k, v), grad)

    t_f = _timed(fwd, device, repeats)
    t_fb = _timed(fwd_bwd, device, repeats)
    flops_f = 4.0 * batch * heads * seq * seq * head_dim / 2
    t_b = max(t_fb - t_f, 1e-12)
    return {
        "batch": batch,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "seq": seq,
        "fwd_s": t_f,
        "fwd_bwd_s": t_fb,
        "bwd_s": t_b,
        "fwd_flops": flops_f,
        "fwd_flops_per_s": flops_f / t_f,
        "bwd_flops_per_s": 2.5 * flops_f / t_b,
    }


# ------------------------------------------------------------------------------------------------ routed experts
def grouped_gemm_rate(
    device, num_experts: int, topk: int, hidden: int, ffn: int, *, tokens: int, dtype=None, repeats: int = 5
) -> dict:
    """The routed experts' SwiGLU GEMMs as the lite runtime runs them on ``device`` (its expert path), ``tokens x
    topk`` rows spread evenly over ``num_experts``: seconds and FLOP rate (FLOPs 2 x rows x 3 x ffn x hidden)."""
    import torch

    from ..runtime.models.moe import _PATH_FN, expert_path

    dtype = dtype or torch.bfloat16
    path = expert_path(device, dtype)
    rows = tokens * topk
    base, extra = divmod(rows, num_experts)
    counts = torch.tensor([base + (e < extra) for e in range(num_experts)], device=device, dtype=torch.int64)
    xs = torch.randn(rows, hidden, device=device, dtype=dtype)
    w1 = torch.randn(num_experts, 2 * ffn, hidden, device=device, dtype=dtype) * 0.02
    w2 = torch.randn(num_experts, hidden, ffn, device=device, dtype=dtype) * 0.02
    fn = _PATH_FN[path]
    t = _timed(lambda: fn(xs, counts, w1, w2), device, repeats)
    flops = 2.0 * rows * 3 * ffn * hidden
    return {
        "path": path,
        "num_experts": num_experts,
        "topk": topk,
        "hidden": hidden,
        "ffn": ffn,
        "tokens": tokens,
        "seconds": t,
        "flops": flops,
        "flops_per_s": flops / t,
    }


# ---------------------------------------------------------------------------------------------------------- memory
def copy_bandwidth(device, nbytes: int = 1 << 30, repeats: int = 5) -> dict:
    """Device memory bandwidth: ``dst.copy_(src)`` of ``nbytes`` (bytes read + written per second), and a bf16
    ``torch.add(a, b, out=c)`` of ``nbytes`` per operand (3 x nbytes of traffic); ``elementwise_efficiency`` is the
    add's bandwidth over the copy's (capped at 1)."""
    import torch

    n = max(1, nbytes // 2)
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t_copy = _timed(lambda: dst.copy_(src), device, repeats)
    b = torch.randn_like(src)
    t_add = _timed(lambda: torch.add(src, b, out=dst), device, repeats)
    copy_bw = 2.0 * n * 2 / t_copy
    add_bw = 3.0 * n * 2 / t_add
    return {
        "bytes": n * 2,
        "copy_s": t_copy,
        "copy_bytes_per_s": copy_bw,
        "add_s": t_add,
        "add_bytes_per_s": add_bw,
        "elementwise_efficiency": min(1.0, add_bw / copy_bw),
        "elementwise_kernel": "torch.add(a, b, out=c), bf16, 3 tensors of traffic",
    }


def launch_cost(device, launches: int = 5000, repeats: int = 5) -> dict:
    """Host seconds per launch of a tiny kernel (``x.add_(1)`` on one element), ``launches`` back to back on the host
    clock, synchronised once at the end (median of ``repeats``)."""
    import torch

    x = torch.zeros(1, device=device)
    for _ in range(100):
        x.add_(1)
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(launches):
            x.add_(1)
        _sync(device)
        times.append((time.perf_counter() - t0) / launches)
    return {"launches": launches, "kernel_launch_s": statistics.median(times), "kernel": "x.add_(1), 1 element"}


def host_device_bandwidth(device, nbytes: int = 1 << 28, repeats: int = 5) -> dict | None:
    """Pinned host -> device and device -> host copies of ``nbytes``: bytes per second each way and their harmonic
    mean (the rate at which equal bytes each way take the same total time). None on CPU: there is no such link."""
    import torch

    if not _is_cuda(device):
        return None
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    t_h2d = _timed(lambda: dev.copy_(host, non_blocking=True), device, repeats)
    t_d2h = _timed(lambda: host.copy_(dev, non_blocking=True), device, repeats)
    h2d, d2h = nbytes / t_h2d, nbytes / t_d2h
    return {
        "bytes": nbytes,
        "h2d_bytes_per_s": h2d,
        "d2h_bytes_per_s": d2h,
        "pcie_bytes_per_s": 2.0 / (1.0 / h2d + 1.0 / d2h),
    }


def host_adam_rate(
    numel: int = 1 << 22, mode: str = "master", repeats: int = 3, pin: bool = False, host_kernel: str = "auto"
) -> dict:
    """Parameters per second of the host AdamW of ``offload_fraction``, on the path the runtime takes for these
    tensors (:func:`mlite.runtime.optim.host_fused.takes` under ``host_kernel``, ``ShardedAdamW``'s default
    ``auto``): the one-pass C kernel over the whole shard, as ``ShardedAdamW._update_staged`` calls it for one
    shard, or else :func:`mlite.runtime.optim.host.update_chunk` in chunks of :data:`~mlite.runtime.optim.CHUNK`
    with work buffers allocated once (bench/offload_host_speed.py times both). An fp32 state shard of ``numel``
    elements, bf16 gradient and parameter staging; ``mode`` ``master``: fp32 master, ``remainder``: the
    precision-aware int16 remainder; ``pin``: the gradient and parameter staging buffers in pinned memory, as ``_stage_in`` allocates
    them on a CUDA machine. The state is filled by copying one random chunk over it (no full-size random draw)."""
    import torch

    from ..runtime.optim import host, host_fused
    from ..runtime.optim.adamw import AdamWHyper, step_scalars
    from ..runtime.optim.master import split_fp32
    from ..runtime.optim.optimizer import CHUNK

    g = torch.Generator().manual_seed(0)
    c = min(CHUNK, numel)
    seed_m, seed_g = torch.randn(c, generator=g) * 0.02, (torch.randn(c, generator=g) * 1e-3).bfloat16()
    master = torch.empty(numel)
    grad = torch.empty(numel, dtype=torch.bfloat16, pin_memory=pin)
    for a in range(0, numel, c):
        b = min(a + c, numel)
        master[a:b].copy_(seed_m[: b - a])
        grad[a:b].copy_(seed_g[: b - a])
    hi, rem = split_fp32(master)
    param = torch.empty(numel, dtype=torch.bfloat16, pin_memory=pin).copy_(hi)
    state = {"exp_avg": torch.zeros(numel), "exp_avg_sq": torch.zeros(numel)}
    state["master" if mode == "master" else "remainder"] = master if mode == "master" else rem
    fused = host_fused.takes(host_kernel, param, grad, state)
    work = {} if fused else host.work_buffers(min(CHUNK, numel), "cpu")

    def update(step: int) -> None:
        sc = step_scalars(
            AdamWHyper(lr=1e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=step, clip_coef=0.7)
        )
        if fused:
            host_fused.update_range(mode, param, grad, state, 0, numel, sc)
            return
        for a in range(0, numel, CHUNK):
            b = min(a + CHUNK, numel)
            host.update_chunk(mode, param[a:b], grad[a:b], state, a, b, sc, work)

    update(1)
    times = []
    for step in range(2, repeats + 2):
        t0 = time.perf_counter()
        update(step)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    return {
        "numel": numel,
        "mode": mode,
        "threads": torch.get_num_threads(),
        "pinned_staging": pin,
        "host_kernel": "c" if fused else "torch",
        "seconds": t,
        "params_per_s": numel / t,
    }


# ------------------------------------------------------------------------------------------------------- calibrate
def resolve_base(base, device) -> HardwareProfile:
    """The base profile: a :class:`HardwareProfile`, a shipped name or a profile file; None: the shipped profile whose
    name is in the GPU's name, else :data:`DEFAULT_BASE`."""
    if isinstance(base, HardwareProfile):
        return base
    names = hardware_names()
    if base is None:
        seen = device_name(device).upper() if _is_cuda(device) else ""
        base = next((n for n in sorted(names, key=len, reverse=True) if n.upper() in seen), DEFAULT_BASE)
    from pathlib import Path

    if str(base).upper() not in {n.upper() for n in names} and not Path(str(base)).expanduser().is_file():
        raise MliteError(
            f"--base {str(base)!r}: not a shipped profile ({', '.join(names)}) nor a profile file; give one of those "
            "names or a profile's path"
        )
    return load_hardware(base)


def _shapes_for(spec, tokens: Sequence[int]) -> list[tuple[int, int, int]]:
    return [(s.m, s.n, s.k) for t in tokens for s in model_gemm_shapes(spec, t)]


Part = tuple[dict, dict, dict]
"""What one measurement gives :func:`calibrate`: (profile fields, their ``sources`` lines, ``measured`` entries)."""
_BY = "mlite calibrate: "


def _part_gemm(device, spec, sz: Sizes, peak: float) -> Part:
    squares = [(s, s, s) for s in sz.gemm_squares]
    table = gemm_rates(device, _shapes_for(spec, sz.gemm_tokens) + squares, repeats=sz.repeats)
    eff, overhead = fit_gemm(table, peak)
    what = (
        f"torch.mm bf16 at {spec.name}'s projections x {list(sz.gemm_tokens)} tokens + squares {list(sz.gemm_squares)}"
    )
    return (
        {"gemm_efficiency": eff, "gemm_overhead_s": overhead},
        {
            "gemm_efficiency": f"{_BY}{what}, fitted t = flops/(peak x eff) + overhead",
            "gemm_overhead_s": f"{_BY}{what}, fitted overhead",
        },
        {
            "gemm_table": [[m, n, k, r] for m, n, k, r, _ in table],
            "gemm_fit": {
                "gemm_efficiency": eff,
                "gemm_overhead_s": overhead,
                "shapes": len(table),
                "best_share_of_peak": max(r[3] for r in table) / peak,
            },
        },
    )


def _part_attention(device, spec, sz: Sizes, peak: float) -> Part:
    seq = min(sz.attention_seq, spec.max_position_embeddings or sz.attention_seq)
    att = attention_rate(
        device,
        heads=spec.num_attention_heads,
        kv_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        seq=seq,
        batch=max(1, sz.attention_tokens // seq),
        repeats=sz.repeats,
    )
    shape = f"{att['batch']} x {att['heads']} heads (kv {att['kv_heads']}) x seq {seq} x d {att['head_dim']}"
    return (
        {
            "attention_efficiency": min(1.0, att["fwd_flops_per_s"] / peak),
            "attention_bwd_efficiency": min(1.0, att["bwd_flops_per_s"] / peak),
        },
        {
            "attention_efficiency": f"{_BY}causal SDPA forward bf16, {shape}",
            "attention_bwd_efficiency": f"{_BY}causal SDPA backward (fwd+bwd - fwd) bf16, {shape}",
        },
        {"attention": att},
    )


def _part_experts(device, spec, sz: Sizes, peak: float) -> Part:
    if not (spec.is_moe and spec.num_experts and spec.moe_ffn_hidden_size):
        return (
            {},
            {},
            {"grouped_gemm": f"not measured: {spec.name} has no routed experts (calibrate with a MoE config)"},
        )
    experts = (spec.num_experts, spec.moe_router_topk, spec.hidden_size, spec.moe_ffn_hidden_size)
    gg = grouped_gemm_rate(device, *experts, tokens=sz.expert_tokens, repeats=sz.repeats)
    what = f"{gg['num_experts']} experts x {gg['ffn']} x {gg['hidden']}, {gg['tokens']} tokens top-{gg['topk']}"
    return (
        {"grouped_gemm_efficiency": min(1.0, gg["flops_per_s"] / peak)},
        {"grouped_gemm_efficiency": f"{_BY}the runtime's {gg['path']} expert SwiGLU, {what}"},
        {"grouped_gemm": gg},
    )


def _part_memory(device, spec, sz: Sizes, peak: float) -> Part:
    mem = copy_bandwidth(device, sz.copy_bytes, sz.repeats)
    return (
        {"hbm_bytes_per_s": mem["copy_bytes_per_s"], "elementwise_efficiency": mem["elementwise_efficiency"]},
        {
            "hbm_bytes_per_s": f"{_BY}device copy of {mem['bytes']} bytes (read + write)",
            "elementwise_efficiency": f"{_BY}bf16 add (3 tensors of traffic) bandwidth / copy bandwidth",
        },
        {"memory": mem},
    )


def _part_launch(device, spec, sz: Sizes, peak: float) -> Part:
    launch = launch_cost(device, sz.launches, sz.repeats)
    return (
        {"kernel_launch_s": launch["kernel_launch_s"]},
        {"kernel_launch_s": f"{_BY}{launch['launches']} x add_ on one element, host clock"},
        {"launch": launch},
    )


def _part_pcie(device, spec, sz: Sizes, peak: float) -> Part:
    link = host_device_bandwidth(device, sz.pcie_bytes, sz.repeats)
    if link is None:
        return {}, {}, {"pcie": "not measured: no host <-> device link on cpu (the base profile's value is kept)"}
    return (
        {"pcie_bytes_per_s": link["pcie_bytes_per_s"]},
        {"pcie_bytes_per_s": f"{_BY}pinned copies of {link['bytes']} bytes, harmonic mean of both directions"},
        {"pcie": link},
    )


def host_adam_numel(spec, sz: Sizes) -> int:
    """Elements of the host AdamW measurement: the model's parameters (the shard ``offload_fraction=1`` updates on
    one GPU), capped by ``sz.adam_model_numel`` and by a quarter of the host's available memory at 18 bytes per
    element (fp32 master and moments, bf16 gradient and parameter staging, the reused work buffers); never below
    ``sz.adam_numel``."""
    import os

    n = int(spec.total) if sz.adam_model_numel else 0
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # no sysconf on this platform: the cap alone
        avail = 1 << 62
    return max(sz.adam_numel, min(n, sz.adam_model_numel, avail // 4 // 18))


def _part_host_adam(device, spec, sz: Sizes, peak: float) -> Part:
    n = host_adam_numel(spec, sz)
    adam = host_adam_rate(n, "master", min(sz.repeats, 3), pin=_is_cuda(device))
    what = (
        f"host AdamW (update_chunk, fp32 master) on {adam['numel']} elements ({spec.name}'s parameters, capped), "
        f"{'pinned' if adam['pinned_staging'] else 'pageable'} staging, {adam['threads']} threads"
    )
    return (
        {"host_adam_params_per_s": adam["params_per_s"]},
        {"host_adam_params_per_s": f"{_BY}{what}"},
        {"host_adam": adam, "host_adam_remainder": host_adam_rate(sz.adam_numel, "remainder", sz.repeats)},
    )


PARTS: tuple[Callable[..., Part], ...] = (
    _part_gemm,
    _part_attention,
    _part_experts,
    _part_memory,
    _part_launch,
    _part_pcie,
    _part_host_adam,
)
"""The measurements of :func:`calibrate`, in order."""


ANCHOR_LAYERS = (1, 3)
"""Layer counts of the two cut models whose difference is one layer's cost (embedding, head, loss cancel)."""
RECOMPUTE_MODES = ("none", "selective", "full")


def _anchor_layers(spec) -> tuple[int, int]:
    """The two layer counts of the anchor for ``spec`` (:data:`ANCHOR_LAYERS`, the larger capped by its layers)."""
    return ANCHOR_LAYERS[0], min(ANCHOR_LAYERS[1], spec.num_layers)


def runtime_layer_seconds(
    device,
    spec,
    tokens: int,
    recompute: str = "none",
    repeats: int = 3,
    optimizer: str = "dist_opt",
    opt_out: list | None = None,
) -> float:
    """Wall seconds of one decoder layer's forward + backward as the lite runtime runs it: ``forward_backward`` of
    one packed micro-batch of ``tokens`` tokens on ``spec`` cut to 3 layers, less the same on 1 layer, halved
    (:func:`cut_model_seconds`). ``opt_out``: also time the runtime's ``optimizer_step`` + ``zero_grad`` on each
    cut model (a whole step less its ``forward_backward``) and append their seconds, fewer layers first (the
    optimizer anchor, :func:`optimizer_anchor_fit`)."""
    out = cut_model_seconds(device, spec, tokens, recompute, optimizer, repeats, opt_out)
    lo, hi = _anchor_layers(spec)
    return max(0.0, (out[1] - out[0]) / (hi - lo))


def cut_model_seconds(
    device, spec, tokens: int, recompute: str, optimizer: str, repeats: int = 3, opt_out: list | None = None
) -> list[float]:
    """``forward_backward`` seconds of ``spec`` cut to each of :data:`ANCHOR_LAYERS`, fewer layers first: one packed
    micro-batch of ``tokens`` tokens, ``optimizer``'s backend on one rank, bf16, the median of ``repeats``
    synchronised calls after two warm-ups; a process group it starts is destroyed again (``opt_out``: see
    :func:`runtime_layer_seconds`)."""
    import os

    import torch.distributed as dist

    from ..runtime.dist import destroy_distributed

    dev = "cuda" if _is_cuda(device) else "cpu"
    out: list[float] = []
    had_group = dist.is_available() and dist.is_initialized()
    saved = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT")}
    if not had_group:  # a one-process group of its own, on an in-process store (not a port an outer process holds)
        os.environ.pop("MASTER_PORT", None)
    try:
        _anchor_runs(device, dev, spec, tokens, recompute, repeats, optimizer, out, opt_out)
    finally:  # leave no process group and no MASTER_PORT behind for the caller's own runs or child processes
        if not had_group and dist.is_available() and dist.is_initialized():
            destroy_distributed()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return out


def _anchor_runs(
    device, dev: str, spec, tokens: int, recompute: str, repeats: int, optimizer: str, out: list, opt_out=None
) -> None:
    """``forward_backward`` seconds of ``spec`` cut to each of :data:`ANCHOR_LAYERS`, appended to ``out`` (and the
    optimizer step + ``zero_grad`` seconds to ``opt_out`` when given)."""
    import json
    import tempfile
    from pathlib import Path

    import torch

    from ..launch import RunConfig
    from ..runtime.batch import PackedBatch
    from ..runtime.runtime import create_runtime

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.json"
        path.write_text(json.dumps(spec.config))
        for layers in _anchor_layers(spec):
            run = RunConfig(
                model=str(path),
                layers=layers,
                nproc=1,
                device=dev,
                optimizer=optimizer,
                recompute=recompute,
                tokens_per_microbatch=tokens,
                num_microbatches=1,
                param_dtype="bf16",
            )
            rt = create_runtime(run.runtime_config())
            h = rt.build_model()
            g = torch.Generator().manual_seed(0)
            ids = torch.randint(0, spec.vocab_size, (tokens,), generator=g).tolist()
            mb = [PackedBatch.from_sequences([ids]).to(device)]

            def fb(rt=rt, h=h, mb=mb):
                rt.forward_backward(h, mb, num_microbatches=1)

            out.append(time_per_call(fb, device, repeats=repeats, warmup=2))
            if opt_out is not None:

                def step(rt=rt, h=h, fb=fb):
                    fb()
                    rt.optimizer_step(h)
                    rt.zero_grad(h)

                opt_out.append(max(0.0, time_per_call(step, device, repeats=repeats, warmup=2) - out[-1]))
            del rt, h
            if dev == "cuda":
                torch.cuda.empty_cache()


def anchor_fit(hw: HardwareProfile, spec, tokens: int, seconds: dict) -> tuple[dict, dict]:
    """Profile fields from the layer anchor: ``elementwise_efficiency`` such that the time model's layer (its GEMM,
    expert and attention rooflines at ``hw``'s measured rates, its elementwise bytes, the gradient-buffer
    accumulation) takes the measured no-recompute seconds; and the host time of selective / full recompute per
    layer beyond the GPU work the model gives it. Returns ``(fields, what was fitted)``."""
    from dataclasses import replace

    from .compute import Shard, layer_backward, layer_bytes, layer_forward
    from .model import _recompute_kinds

    sh = Shard(tokens=tokens, tp=1, sp=False, ep=1, etp=1, seq_len=tokens)
    layer = spec.main_layers[min(1, len(spec.main_layers) - 1)]
    f, b = layer_forward(hw, spec, layer, sh), layer_backward(hw, spec, layer, sh)
    elem_s = f.parts.get("elementwise", 0.0) + b.parts.get("elementwise", 0.0)
    from ..options import TrainingOptions
    from .model import grad_accumulate_bytes

    # + the bf16 gradient added into dist_opt's fp32 buffer (the anchor's backend)
    acc = layer.params * grad_accumulate_bytes(TrainingOptions(optimizer="dist_opt")) / hw.hbm_bytes_per_s
    other = f.gpu_s + b.gpu_s - elem_s + acc
    elem_bytes = 3 * layer_bytes(spec, layer, sh)
    fit: dict = {"tokens": tokens, "layer": layer.kind, "measured_s": dict(seconds), "modelled_other_s": other}
    residual = seconds["none"] - other
    fields: dict = {}
    if residual > 0 and elem_bytes:
        fields["elementwise_efficiency"] = min(1.0, max(1e-3, elem_bytes / (residual * hw.hbm_bytes_per_s)))
    fit["elementwise_bytes"] = elem_bytes
    hw2 = replace(hw, **fields)
    base = seconds["none"]
    if "fsdp2" in seconds:
        from .model import FSDP_GATHER_BYTES, FSDP_REDUCE_BYTES

        copies = layer.params * (2 * FSDP_GATHER_BYTES + FSDP_REDUCE_BYTES) / hw.hbm_bytes_per_s
        fields["fsdp_layer_host_s"] = max(0.0, seconds["fsdp2"] - base - copies + acc)
        fit["fsdp_copies_s"] = copies
    for mode in ("selective", "full"):
        if mode not in seconds:
            continue
        only = _recompute_kinds(TrainingOptions(recompute=mode))
        g = layer_forward(hw2, spec, layer, sh, only=only).gpu_s
        fields[f"recompute_{mode}_host_s"] = max(0.0, seconds[mode] - base - g)
        fit[f"recompute_{mode}_gpu_s"] = g
    return fields, fit


OPTIMIZER_FIELDS = {
    "dist_opt": ("optimizer_layer_host_s", "optimizer_step_host_s"),
    "fsdp2": ("fsdp_optimizer_layer_host_s", "fsdp_optimizer_step_host_s"),
}
"""Backend -> its (per layer, per step) optimizer host fields."""


def cut_params(spec, layers: int) -> float:
    """Parameters of ``spec`` cut to its first ``layers`` decoder layers (embedding, head and MTP kept)."""
    main = spec.main_layers
    return float(spec.total - sum(x.params for x in main) + sum(x.params for x in main[:layers]))


def optimizer_anchor_fit(hw: HardwareProfile, spec, seconds: dict) -> tuple[dict, dict]:
    """Optimizer host fields from the optimizer anchor: ``seconds`` = backend -> ``[s at lo layers, s at hi
    layers]`` of the runtime's ``optimizer_step`` + ``zero_grad`` on the cut models (:data:`ANCHOR_LAYERS`). The
    part the time model already gives (:func:`mlite.time.model.optimizer_bytes_per_param` of that backend at the
    HBM rate, 8 launches) is taken off; what is left is split into a per-layer slope and a per-step intercept
    (:data:`OPTIMIZER_FIELDS`). Returns ``(fields, what was fitted)``."""
    from ..options import TrainingOptions
    from .model import optimizer_bytes_per_param

    lo, hi = _anchor_layers(spec)
    fields: dict = {}
    fit: dict = {"layers": [lo, hi], "measured_s": {k: list(v) for k, v in seconds.items()}}
    for backend, (per_layer, per_step) in OPTIMIZER_FIELDS.items():
        if backend not in seconds or hi <= lo:
            continue
        per, _ = optimizer_bytes_per_param(TrainingOptions(optimizer=backend))
        model = [cut_params(spec, n) * per / hw.hbm_bytes_per_s + 8 * hw.kernel_launch_s for n in (lo, hi)]
        rest = [s - m for s, m in zip(seconds[backend], model)]
        slope = max(0.0, (rest[1] - rest[0]) / (hi - lo))
        fields[per_layer] = slope
        fields[per_step] = max(0.0, rest[0] - lo * slope)
        fit[f"{backend}_modelled_s"] = model
    return fields, fit


FLOOR_RUNS = (("none", "dist_opt"), ("selective", "dist_opt"), ("full", "dist_opt"), ("none", "fsdp2"))
"""(recompute, optimizer) of the host-floor anchor's runs."""


def host_floor_fit(spec, seconds: dict) -> tuple[dict, dict]:
    """Host-floor fields from ``seconds`` = (recompute, optimizer) -> ``[s at lo layers, s at hi layers]`` of
    :func:`cut_model_seconds` at a few tokens, where the step only waits on the host issuing its kernels: the
    per-layer slope of (none, dist_opt) is ``host_floor_layer_s``, its intercept ``host_floor_microbatch_s``; the
    other runs' slopes less that one are what selective / full recompute and fsdp2's hooks add per layer.
    Returns ``(fields, what was fitted)``."""
    lo, hi = _anchor_layers(spec)
    fit: dict = {"layers": [lo, hi], "measured_s": {f"{r}/{o}": list(v) for (r, o), v in seconds.items()}}
    if hi <= lo or ("none", "dist_opt") not in seconds:
        return {}, fit

    def slope(key):
        a, b = seconds[key]
        return (b - a) / (hi - lo)

    base = slope(("none", "dist_opt"))
    fields = {
        "host_floor_layer_s": max(0.0, base),
        "host_floor_microbatch_s": max(0.0, seconds[("none", "dist_opt")][0] - lo * base),
    }
    extra = {("selective", "dist_opt"): "host_floor_selective_s", ("full", "dist_opt"): "host_floor_full_s"}
    extra[("none", "fsdp2")] = "host_floor_fsdp_layer_s"
    for key, name in extra.items():
        if key in seconds:
            fields[name] = max(0.0, slope(key) - base)
    return fields, fit


def _part_layers(device, spec, sz: Sizes, hw: HardwareProfile) -> Part:
    if spec.num_layers < 2:
        return {}, {}, {"layer_anchor": f"not measured: {spec.name} has one layer (the anchor differences two)"}
    opt: dict[str, list] = {"dist_opt": [], "fsdp2": []}
    secs = {
        m: runtime_layer_seconds(
            device, spec, sz.anchor_tokens, m, sz.repeats, opt_out=opt["dist_opt"] if m == "none" else None
        )
        for m in RECOMPUTE_MODES
    }
    secs["fsdp2"] = runtime_layer_seconds(
        device, spec, sz.anchor_tokens, "none", sz.repeats, optimizer="fsdp2", opt_out=opt["fsdp2"]
    )
    fields, fit = anchor_fit(hw, spec, sz.anchor_tokens, secs)
    o_fields, o_fit = optimizer_anchor_fit(hw, spec, opt)
    floor = {k: cut_model_seconds(device, spec, sz.floor_tokens, *k, repeats=sz.repeats) for k in FLOOR_RUNS}
    f_fields, f_fit = host_floor_fit(spec, floor)
    f_fit["tokens"] = sz.floor_tokens
    lo, hi = _anchor_layers(spec)
    what = (
        f"one {fit['layer']} layer of {spec.name} in the lite runtime, {sz.anchor_tokens} tokens ({hi} - {lo} layers)"
    )
    sources = {k: f"{_BY}{what}, fitted" for k in fields}
    sources |= {
        k: f"{_BY}the runtime's optimizer_step + zero_grad on {spec.name} cut to {lo} and {hi} layers, less the "
        "update's HBM bytes"
        for k in o_fields
    }
    sources |= {
        k: f"{_BY}forward_backward of {spec.name} cut to {lo} and {hi} layers at {sz.floor_tokens} tokens (the host "
        "floor), fitted slope / intercept"
        for k in f_fields
    }
    return (
        fields | o_fields | f_fields,
        sources,
        {"layer_anchor": fit, "optimizer_anchor": o_fit, "host_floor_anchor": f_fit},
    )


def calibrate(device="cuda", spec=None, base=None, quick: bool = False) -> HardwareProfile:
    """Measure ``device`` and return the base profile with the measured fields replaced (:data:`MEASURED_FIELDS`),
    ``name`` = ``<device> (calibrated)``, ``sources`` naming each measurement and ``measured`` holding every raw
    figure. ``spec``: the model whose shapes are measured (a :class:`~mlite.models.ModelSpec` or a catalog name /
    config path; default ``tiny-dense``); ``base``: see :func:`resolve_base`; ``quick``: the :data:`QUICK` sizes
    (seconds), which a CPU always uses (a CPU profile is a smoke test)."""
    import torch

    from ..models import from_hf_config

    device = check_device(device)
    base_profile = resolve_base(base, device)
    if spec is None or isinstance(spec, str):
        spec = from_hf_config(spec or "tiny-dense")
    cuda = _is_cuda(device)
    sz = FULL if cuda and not quick else QUICK
    if cuda:
        torch.cuda.set_device(torch.device(device))
    peak = base_profile.peak_bf16_flops
    t0 = time.perf_counter()
    measured: dict = {
        "device": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "spec": spec.name,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "base": base_profile.name,
        "quick": quick,
        "sizes": "full" if sz is FULL else "quick",
        "peak_bf16_flops_used": peak,
    }
    if not cuda:
        measured["note"] = (
            f"measured on CPU against the {base_profile.name} profile's GPU peak: only a smoke test of mlite "
            "calibrate, not a profile to predict GPU step times with"
        )
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for part in PARTS:
        v, s, m = part(device, spec, sz, peak)
        values |= v
        sources |= s
        measured |= m
    interim = profile_from_dict(base_profile.to_dict() | values, "mlite calibrate")
    v, s, m = _part_layers(device, spec, sz, interim)
    values |= v
    sources |= s
    measured |= m
    measured["seconds"] = time.perf_counter() - t0
    measured["replaced"] = [k for k in MEASURED_FIELDS if k in values]
    for k, x in values.items():
        if not (math.isfinite(x) and x >= 0):
            raise MliteError(f"mlite calibrate: measured {k} = {x!r} is not a finite non-negative number")
    doc = base_profile.to_dict() | values
    doc["name"] = f"{device_name(device)} (calibrated)"
    doc["sources"] = dict(base_profile.sources) | sources
    doc["measured"] = measured
    return profile_from_dict(doc, "mlite calibrate")
