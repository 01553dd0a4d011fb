"""Compute time of one micro-batch on one rank: GEMMs, attention, routed experts, routing, elementwise work, the loss.

Every term is a roofline on the hardware profile (:class:`~mlite.time.hardware.HardwareProfile`):

* a GEMM of (M x K) @ (K x N) takes ``max(2MNK / (peak x gemm_efficiency), bytes / HBM) + gemm_overhead_s``; its
  backward is two GEMMs of the same FLOPs (data and weight gradients). The shapes come from the model's own weight
  tensors (:class:`~mlite.models.spec.ParamGroup`): N x K = the tensor's local elements, K = the model width, so the
  FLOPs are exactly :func:`mlite.models.flops.flops_per_token`'s;
* routed experts: one grouped GEMM per expert tensor over the local experts, each expert with ``tokens x topk x EP /
  experts`` rows (balanced routing), at ``grouped_gemm_efficiency``; small groups become weight-read bound;
* the attention core at the flash kernel's rates (forward FLOPs of :func:`mlite.models.flops.attention_flops`,
  backward 2.5 x the forward's: the flash backward recomputes the scores); a Gated DeltaNet layer at the chunk
  kernel's own rate where the profile gives ``gdn_efficiency`` (backward 2 x the forward's FLOPs);
* a layer's norms, rotary, activation, residual adds and the token permutation of MoE layers as bytes moved at
  ``hbm_bytes_per_s x elementwise_efficiency`` (the byte counts are in :func:`layer_bytes`; ``mlite calibrate`` fits
  the efficiency to one layer of the runtime, so it also carries what the layer's rooflines leave out); the
  embedding gradient, the final norm and the cross-entropy at the copy rate ``hbm_bytes_per_s``;
* a layer is never faster than the host's kernel launches (``kernels x kernel_launch_s``, eager PyTorch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..models.flops import attention_flops

MATRIX = (
    "attention",
    "linear_attention",
    "dense_mlp",
    "shared_experts",
    "routed_experts",
    "lm_head",
    "hyper_connections",
    "other",
)
"""Components whose weight tensors are GEMM operands (vectors among them are left out by size)."""
BWD_ATTENTION = 2.5
"""Flash-attention backward FLOPs over its forward's (five matmuls of the score size against two)."""
BWD_GDN = 2.0
"""Chunked Gated DeltaNet backward FLOPs over its forward's (the chunk recurrence run back for dq, dk, dv, dg, dbeta
against one forward pass; the rate :attr:`~mlite.time.hardware.HardwareProfile.gdn_efficiency` was fitted with it)."""
CE_BYTES = {False: 16, True: 18}
"""Bytes moved per logit by the cross-entropy, forward + backward: unfused (bf16 logits read, fp32 softmax written and
read, bf16 gradient written); fused and chunked as the lite runtime runs it (fp32 logits written, read for the
log-sum-exp, ``softmax - onehot`` written and read by the two gradient GEMMs), plus its fp32 weight-gradient
accumulator (:func:`head_cost`)."""
KERNELS_FWD = {"dense": 14, "moe": 26}
"""Non-GEMM kernels one layer's forward launches (norms, rotary, activation, adds; routing and permutation)."""


@dataclass
class Cost:
    """Seconds of one phase, by kind of work, and the kernels it launches."""

    parts: dict = field(default_factory=dict)
    """Kind -> seconds (``gemm``, ``attention``, ``experts``, ``routing``, ``elementwise``, ``loss``)."""
    kernels: float = 0.0
    """Kernels launched (the host floor)."""

    def add(self, kind: str, seconds: float, kernels: float = 1.0) -> None:
        self.parts[kind] = self.parts.get(kind, 0.0) + seconds
        self.kernels += kernels

    def merge(self, other: Cost, times: float = 1.0) -> None:
        for n, v in other.parts.items():
            self.parts[n] = self.parts.get(n, 0.0) + v * times
        self.kernels += other.kernels * times

    @property
    def gpu_s(self) -> float:
        return sum(self.parts.values())

    def seconds(self, hw) -> float:
        """GPU time, or the host's launch time when that is longer."""
        return max(self.gpu_s, self.kernels * hw.kernel_launch_s)


def gemm_s(
    hw, m: float, n: float, k: float, efficiency: float | None = None, bytes_per_el: int = 2, fp8: bool = False
) -> float:
    """One GEMM (M x K) @ (K x N) on the roofline, plus the profile's fixed cost (``fp8``: at the fp8 peak, operands
    of one byte, the output bf16)."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    eff = hw.gemm_efficiency if efficiency is None else efficiency
    flops = 2.0 * m * n * k
    if fp8:
        peak, traffic = hw.peak_fp8_flops or hw.peak_bf16_flops, (m * k + k * n) + 2 * m * n
    else:
        peak, traffic = hw.peak_bf16_flops, bytes_per_el * (m * k + k * n + m * n)
    return max(flops / (peak * eff), traffic / hw.hbm_bytes_per_s) + hw.gemm_overhead_s


def _gdn_rate(hw, layer) -> bool:
    """A Gated DeltaNet layer on a profile that knows the chunk kernel's own rate (else flash attention's)."""
    return layer.attention == "gdn" and hw.gdn_efficiency > 0


def _bw(hw) -> float:
    return hw.hbm_bytes_per_s * hw.elementwise_efficiency


@dataclass(frozen=True)
class Shard:
    """How one rank splits a micro-batch and the weights."""

    tokens: float
    """Tokens of the micro-batch on this rank before the TP split (micro_batch_size x seq_len / CP)."""
    tp: int
    """Tensor-parallel size."""
    sp: bool
    """Sequence parallel: norms and adds on tokens / TP."""
    ep: int
    """Expert-parallel size."""
    etp: int
    """Expert tensor-parallel size."""
    seq_len: int
    """Full sequence length (the attention context)."""
    fused_ce: bool = False
    """Cross-entropy fused with the output layer."""
    fp8: bool = False
    """The linear layers' GEMMs in fp8 (:attr:`mlite.time.knobs.Knobs.gemm_dtype`); their bf16 inputs are cast first."""

    @property
    def sp_tokens(self) -> float:
        return self.tokens / self.tp if self.sp else self.tokens


def _local(g, spec, sh: Shard) -> float:
    """Elements of a weight tensor on this rank (TP, vocab and expert splits)."""
    if g.parallel in ("tp", "vocab"):
        return g.numel / sh.tp
    if g.parallel == "expert":
        return g.numel / (sh.ep * sh.etp)
    return float(g.numel)


def _is_matrix(g, spec) -> bool:
    return g.component in MATRIX and g.numel >= 4 * spec.hidden_size and not g.checkpoint_only


def layer_bytes(spec, layer, sh: Shard) -> float:
    """Bytes the forward of one layer moves outside GEMMs and the attention kernel, per micro-batch on this rank.

    Two norms (read + write bf16 over the width), two residual adds (two reads, one write), rotary on the local query
    and key heads (read + write), the MLP activation (SwiGLU reads 2 x width, writes width); MoE layers add the router
    softmax / top-k, the permutation and its inverse (read + write ``topk`` copies of each token, twice) and the
    weighted combine."""
    h = spec.hidden_size
    t_sp = sh.sp_tokens
    t = sh.tokens
    b = 2 * 2 * h * t_sp * 2 + 2 * 3 * h * t_sp * 2  # norms + residual adds
    heads = (spec.num_attention_heads + spec.num_key_value_heads) / sh.tp
    if layer.attention not in ("none", "mamba2", "gdn"):
        b += 2 * heads * spec.head_dim * t * 2
    if layer.mlp == "dense" and spec.ffn_hidden_size:
        b += 3 * spec.ffn_hidden_size / sh.tp * t * 2
    if layer.mlp in ("moe", "hash_moe"):
        k = spec.moe_router_topk
        b += t_sp * spec.num_experts * 4 * 3  # router logits fp32, softmax, top-k
        b += 2 * 2 * k * h * t_sp * 2  # permute and unpermute (read + write each)
        b += 3 * k * h * t_sp * 2  # weighted combine
        b += 3 * k * t_sp * spec.moe_ffn_hidden_size / sh.etp * 2  # expert activation
        if spec.shared_expert_ffn_hidden_size:
            b += 3 * spec.shared_expert_ffn_hidden_size / sh.tp * t * 2
    return b


def layer_forward(hw, spec, layer, sh: Shard, *, only: tuple[str, ...] | None = None) -> Cost:
    """Forward of one decoder layer (``only``: just these kinds, for selective recompute)."""
    c = Cost()
    t = sh.tokens
    want = (lambda k: True) if only is None else (lambda k: k in only)
    experts = [g for g in layer.groups if g.component == "routed_experts" and _is_matrix(g, spec)]
    if want("gemm"):
        for g in layer.groups:
            if g.component == "routed_experts" or not _is_matrix(g, spec):
                continue
            n = _local(g, spec, sh) / spec.hidden_size
            c.add("gemm", gemm_s(hw, t, n, spec.hidden_size, fp8=sh.fp8))
            if sh.fp8:  # the input's cast to fp8 (read bf16, write one byte)
                c.add("elementwise", 3 * t * spec.hidden_size / _bw(hw))
    if experts and want("experts"):
        e_local = spec.num_experts / sh.ep
        rows = sh.sp_tokens * sh.etp * spec.moe_router_topk * sh.ep / spec.num_experts
        for g in experts:
            n = _local(g, spec, sh) / e_local / spec.hidden_size
            one = gemm_s(hw, rows, n, spec.hidden_size, hw.grouped_gemm_efficiency, fp8=sh.fp8) - hw.gemm_overhead_s
            c.add("experts", e_local * one + hw.gemm_overhead_s)
    if layer.mlp in ("moe", "hash_moe") and want("routing"):
        router = sum(g.numel for g in layer.groups if g.component == "router")
        c.add(
            "routing",
            gemm_s(hw, sh.sp_tokens, router / spec.hidden_size, spec.hidden_size),
            KERNELS_FWD["moe"] - KERNELS_FWD["dense"],
        )
    if want("attention"):
        flops = attention_flops(spec, layer, sh.seq_len, True) * t / sh.tp
        if flops:
            eff = hw.gdn_efficiency if _gdn_rate(hw, layer) else hw.attention_efficiency
            c.add("attention", flops / (hw.peak_bf16_flops * eff))
    if want("elementwise"):
        c.add("elementwise", layer_bytes(spec, layer, sh) / _bw(hw), KERNELS_FWD["dense"])
    return c


def layer_backward(hw, spec, layer, sh: Shard) -> Cost:
    """Backward of one decoder layer: twice the forward's GEMM work, the flash backward, twice the bytes."""
    f = layer_forward(hw, spec, layer, sh)
    c = Cost()
    for k, v in f.parts.items():
        if k == "attention":
            flops = attention_flops(spec, layer, sh.seq_len, True) * sh.tokens / sh.tp
            if _gdn_rate(hw, layer):
                c.add(k, BWD_GDN * flops / (hw.peak_bf16_flops * hw.gdn_efficiency), 2)
            else:
                c.add(k, BWD_ATTENTION * flops / (hw.peak_bf16_flops * hw.attention_bwd_efficiency), 2)
        else:
            c.add(k, 2 * v, 0)
    c.kernels = 2 * f.kernels
    return c


def head_cost(hw, spec, sh: Shard, backward: bool) -> Cost:
    """Final norm, output layer GEMM and cross-entropy (forward, or backward with 2x the GEMM)."""
    from ..models.flops import output_projection

    c = Cost()
    t = sh.tokens
    v_local = output_projection(spec) / spec.hidden_size / sh.tp
    share = 0.6 if backward else 0.4
    if sh.fused_ce:
        # the lite runtime's fused, chunked linear + cross-entropy (mlite/runtime/models/loss.py): per chunk of
        # ce_chunk_rows tokens the fp32 logits GEMM, then (in the forward, when gradients are wanted) the two
        # gradient GEMMs into d hidden and the fp32 d weight accumulator, which each chunk reads and writes
        from ..models.chunks import ce_chunk_rows

        rows = ce_chunk_rows(spec.vocab_size)
        chunks = max(1, -(-int(t) // rows))
        per = min(rows, t)
        g = chunks * gemm_s(hw, per, v_local, spec.hidden_size)
        c.add("gemm", 2 * g if backward else g)
        logit_bytes = CE_BYTES[True] * t * v_local
        acc_bytes = chunks * 8 * v_local * spec.hidden_size + 12 * v_local * spec.hidden_size
        c.add("loss", share * (logit_bytes + acc_bytes) / hw.hbm_bytes_per_s, 4 * chunks)
    else:
        g = gemm_s(hw, t, v_local, spec.hidden_size)
        c.add("gemm", 2 * g if backward else g)
        c.add("loss", share * CE_BYTES[False] * t * v_local / hw.hbm_bytes_per_s, 4)
    c.add("elementwise", 4 * spec.hidden_size * sh.sp_tokens * 2 * (2 if backward else 1) / hw.hbm_bytes_per_s, 2)
    return c


def embedding_cost(hw, spec, sh: Shard, backward: bool) -> Cost:
    """The embedding lookup, or its gradient (a dense vocab x width gradient written and accumulated)."""
    c = Cost()
    h = spec.hidden_size
    if backward:
        c.add("elementwise", 12 * spec.vocab_size / sh.tp * h / hw.hbm_bytes_per_s, 3)
    else:
        c.add("elementwise", 2 * 2 * h * sh.tokens / hw.hbm_bytes_per_s, 1)
    return c
