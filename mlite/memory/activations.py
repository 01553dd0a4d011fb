"""Activation memory per layer and micro-batch (bytes), per component.

Two sets of formulas. For GQA attention, dense MLP and MoE layers the default is what Megatron-Core's local-spec
modules keep for the backward (``mcore_*`` below: derived from its source, equal byte for byte to Megatron-Core on
the CPU in ``tests/test_mcore_oracle.py`` and on an H200 in ``bench/mcore_memory.py``). The Korthikanti et al. 2022
components (``attention_bytes``, ``mlp_bytes``, ``gpt_layer_bytes``) remain for the paper's GPT cases, for MLA, DSA,
Gated DeltaNet and DeepSeek-V4 layers, and when ``recompute_modules`` are set; they are not validated against
Megatron-Core.

Korthikanti components:

Notation: s local sequence length (seq_len / CP), b micro-batch, h hidden, a heads, t TP, D = s*b tokens.
Everything is bf16 (2 bytes) unless noted; dropout masks are 1 byte. For a GPT layer (MHA, GeLU FFN 4h, dropout)
the components add up to the paper's ``s*b*h*(34 + 5*a*s/h)``; with TP and no sequence parallelism the unsplit part
is 10*s*b*h (two norm inputs, the QKV and FC1 inputs, two dropout masks); with sequence parallelism all of it is
divided by t. Selective recompute drops the attention-core term; full recompute keeps only each layer's input
(2*s*b*h, /t with SP). Flash attention never stores the s^2 scores (it keeps a fp32 log-sum-exp per head and token).

Per layer kind:
  GQA attention   QKV input 2Dh* + Q 2D*a*dh + K,V 2D*kv*dh each + out-proj input 2D*a*dv (+ output gate 4D*a*dh
                  for gated attention, + Q/K norm inputs 2D*(a+kv)*dh)      (* = not split by TP without SP)
  MLA             Q/KV down inputs 2Dh*, latent norm and up-proj inputs 4D*(q_lora + kv_lora)*, rope key 2D*dr*,
                  Q, K 2D*a*(dn+dr) each, V and out-proj input 2D*a*dv each
  DSA indexer     index queries 2D*ih*idh, keys 2D*idh, weights 2D*ih, top-k indices 8D*topk (int64)
  Gated DeltaNet  in-proj input 2Dh*, projections 2D*(2kd+2vd+2nv), conv input and output 2D*(2kd+vd) each, q/k/v
                  into the kernel 2D*(2kd+vd), gates g and beta fp32 8D*nv, chunk matrices fp32 4D*nv*64, output
                  and gated-norm output 2D*vd each
  dense MLP       FC1 input 2Dh*, SwiGLU: FC1 output 4D*ffn and FC2 input 2D*ffn (GeLU: 2D*ffn each)
  MoE             router probabilities fp32 4D*E*, per routed token copy (top_k of them): FC1 input 2Dh,
                  FC1 output 4D*f/etp, FC2 input 2D*f/etp; shared expert as a dense MLP of its width
  norms           two norm inputs 4Dh*
  DeepSeek-V4     hyper-connection streams: two fp32 inputs 8D*hc*h per layer (approximate: MLA-like attention)
Pipeline (1F1B): rank i holds min(PP - i, M) micro-batches in flight; interleaved (VPP > 1) multiplies by
1 + (PP-1)/(PP*VPP). Last stage: logits 2*D*V/t bf16 plus a fp32 copy 4*D*V/t for the loss unless fused, and a
fp32 logits gradient 4*D*V/t during its backward (transient). CP divides s; with unfused attention the score
matrices of a rank are (s/CP) x (s/CP) blocks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ActDims:
    """What the per-layer formulas need, resolved for one mesh and option set."""

    s: int
    """Local sequence length (seq_len / CP)."""
    b: int
    """Micro-batch size."""
    t: int
    """Tensor-parallel size."""
    etp: int
    """Expert tensor-parallel size."""
    sp: bool
    """Sequence parallelism on."""
    flash: bool
    """Flash attention (no score matrices)."""
    dropout: bool
    """Dropout masks stored."""
    recompute: str
    """none | selective | full."""
    modules: frozenset
    """Extra recomputed mlite modules."""
    mcore: bool = True
    """Megatron-Core's local-spec layers (what its modules save) for GQA attention, dense MLP and MoE; False: the
    Korthikanti components (the paper's cases)."""
    device: str = "cuda"
    """Where the norms run: ``cuda`` (torch's fused RMSNorm keeps its bf16 input and a fp32 rstd) or ``cpu`` (the
    composite keeps fp32 copies: the CPU oracle)."""


def _split(x: float, d: ActDims) -> float:
    """A tensor TP does not split (unless sequence parallelism is on)."""
    return x / d.t if d.sp else x


def attention_bytes(spec, kind: str, d: ActDims) -> dict[str, float]:
    """Attention activations of one layer by component (``attention``, ``attention_core``)."""
    D = d.s * d.b
    h, a, t = spec.hidden_size, spec.num_attention_heads, d.t
    out = {"attention": 0.0, "attention_core": 0.0}
    if kind == "none":
        return out
    if kind == "mamba2":
        # Mamba2 mixer: in_proj input 2h (split with SP), its output z|xBC|dt, the conv output, the scan output y and
        # the gated norm's input and output, the out_proj input (all bf16, split over TP with the heads)
        nh, di = spec.mamba_num_heads, spec.mamba_num_heads * spec.mamba_head_dim
        conv = di + 2 * spec.mamba_num_groups * spec.mamba_state_dim
        lin = (
            _split(2 * D * h, d) + (2 * D * (di + conv + nh) + 2 * D * conv + 2 * D * di + 4 * D * di + 2 * D * di) / t
        )
        return {"linear_attention": lin, "attention_core": 0.0, "attention": 0.0}
    if kind == "gdn":
        kd = spec.linear_num_key_heads * spec.linear_key_head_dim
        vd = spec.linear_num_value_heads * spec.linear_value_head_dim
        nv = spec.linear_num_value_heads
        core = 2 * D * (2 * kd + vd) + 8 * D * nv + 4 * D * nv * 64
        lin = _split(2 * D * h, d) + (2 * D * (2 * kd + 2 * vd + 2 * nv) + 4 * D * (2 * kd + vd) + 4 * D * vd) / t
        if "gdn" in d.modules:
            return {"linear_attention": _split(2 * D * h, d), "attention_core": 0.0, "attention": 0.0}
        return {"linear_attention": lin + core / t, "attention_core": 0.0, "attention": 0.0}
    if kind in ("mla", "dsa", "csa", "hca", "swa"):
        if kind in ("mla", "dsa"):
            dqk, dv = spec.head_dim, spec.v_head_dim
            qlr, kvlr, dr = spec.q_lora_rank or 0, spec.kv_lora_rank or 0, spec.qk_pos_emb_head_dim
            lin = _split(2 * D * h + 4 * D * (qlr + kvlr) + 2 * D * dr, d)
            lin += (2 * D * a * dqk * 2 + 2 * D * a * dv * 2) / t
            if kind == "dsa":
                cfg = spec.config
                ih, idh, topk = cfg.get("index_n_heads", 0), cfg.get("index_head_dim", 0), cfg.get("index_topk", 0)
                lin += _split(2 * D * ih * idh + 2 * D * idh + 2 * D * ih + 8 * D * min(topk, d.s), d)
        else:  # DeepSeek-V4 compressed attention: single-KV-head MLA-like core plus grouped output projection
            dqk = dv = spec.head_dim
            qlr = spec.q_lora_rank or 0
            cfg = spec.config
            og, olr = cfg.get("o_groups", 1), cfg.get("o_lora_rank", 0)
            lin = (
                _split(2 * D * h + 4 * D * qlr + 4 * D * dqk, d)
                + (2 * D * a * dqk + 2 * D * a * dv + 2 * D * og * olr) / t
            )
            lin += _split(8 * D * spec.hc_mult * h, d)
        heads_core = a
    else:  # full / gated_full GQA
        dh, kv = spec.head_dim, spec.num_key_value_heads
        lin = _split(2 * D * h, d) + (2 * D * a * dh + 4 * D * kv * dh + 2 * D * a * dh) / t
        if kind == "gated_full":
            lin += 4 * D * a * dh / t
        qk_norm = any(g.name.endswith(("q_norm.weight", "q_a_layernorm.weight")) for g in _first_layer_groups(spec))
        if qk_norm:
            lin += 2 * D * (a + kv) * dh / t
        if d.dropout:
            lin += _split(D * h, d)  # post-attention dropout mask
        heads_core = a
    # attention core
    if "attention" in d.modules:
        return {"attention": _split(2 * D * h, d), "attention_core": 0.0}
    if d.flash:
        core = 4 * D * heads_core / t  # fp32 log-sum-exp
    else:
        core = (5 if d.dropout else 2) * heads_core * d.s * d.s * d.b / t
    if d.recompute == "selective" or "core_attn" in d.modules:
        core = 0.0 if not d.flash else core
    out["attention"] = lin
    out["attention_core"] = core
    return out


def _first_layer_groups(spec):
    for layer in spec.main_layers:
        return layer.groups
    return ()


def mlp_bytes(spec, kind: str, d: ActDims, *, gated: bool = True) -> dict[str, float]:
    """MLP / MoE activations of one layer by component."""
    D = d.s * d.b
    h, t = spec.hidden_size, d.t
    fc1 = 4 if gated else 2
    if kind == "none":
        return {"mlp": 0.0}
    if kind == "dense":
        ffn = spec.ffn_hidden_size
        x = _split(2 * D * h, d) + (fc1 * D * ffn + 2 * D * ffn) / t
        if d.dropout:
            x += _split(D * h, d)
        if "mlp" in d.modules:
            x = _split(2 * D * h, d)
        return {"mlp": x}
    k, f, E = spec.moe_router_topk, spec.moe_ffn_hidden_size, spec.num_experts
    tokens = D / t if d.sp else D
    routed = k * tokens * (2 * h + (4 * f + 2 * f) / d.etp)
    if "moe_act" in d.modules:
        routed -= k * tokens * 2 * f / d.etp
    router = 4 * tokens * E
    shared = (fc1 * D * spec.shared_expert_ffn_hidden_size + 2 * D * spec.shared_expert_ffn_hidden_size) / t
    x = _split(2 * D * h, d) + routed + router + shared
    if "moe" in d.modules or "mlp" in d.modules:
        x = _split(2 * D * h, d)
    return {"moe": x}


def layer_bytes(spec, layer, d: ActDims) -> dict[str, float]:
    """All activations one layer keeps for its backward, by component. Full recompute keeps only each layer's
    input at its checkpoint boundary (megatron/core ``transformer/transformer_block.py`` ``_checkpointed_forward``,
    uniform, one layer per checkpoint; ``tensor_parallel/random.py`` ``CheckpointFunction`` saves its inputs)."""
    D = d.s * d.b
    if d.recompute == "full":
        return {"layer_inputs": _split(2 * D * spec.hidden_size * max(1, spec.hc_mult), d)}
    mcore = d.mcore and not d.modules
    if mcore and layer.attention in ("full", "gated_full"):
        out = mcore_attention_bytes(spec, layer.attention, d)
    else:
        out = attention_bytes(spec, layer.attention, d)
    out.update(
        mcore_mlp_bytes(spec, layer.mlp, d)
        if mcore and layer.mlp in ("dense", "moe")
        else mlp_bytes(spec, layer.mlp, d)
    )
    norms = 2 * _split(norm_bytes(spec.hidden_size, d) * D, d) if mcore else _split(4 * D * spec.hidden_size, d)
    out["norms"] = 0.0 if "layernorm" in d.modules else norms
    return out


def layer_bytes_no_recompute(spec, layer, d: ActDims) -> float:
    """One layer's full activations (what full recompute rebuilds transiently during backward)."""
    full = ActDims(d.s, d.b, d.t, d.etp, d.sp, d.flash, d.dropout, "none", frozenset(), d.mcore, d.device)
    return sum(layer_bytes(spec, layer, full).values())


def gpt_layer_bytes(s: int, b: int, h: int, a: int, t: int, *, sp: bool, recompute: str) -> float:
    """Korthikanti et al.'s GPT layer (MHA, GeLU 4h FFN, dropout, unfused attention) through the same components."""
    from types import SimpleNamespace

    from ..models.spec import LayerSpec, ParamGroup

    layer = LayerSpec(0, "full", "dense", False, (ParamGroup("x", 1, "attention", "tp"),))
    spec = SimpleNamespace(
        hidden_size=h,
        num_attention_heads=a,
        num_key_value_heads=a,
        head_dim=h // a,
        v_head_dim=h // a,
        ffn_hidden_size=4 * h,
        hc_mult=1,
        main_layers=(layer,),
    )
    d = ActDims(s, b, t, 1, sp, False, True, recompute, frozenset(), mcore=False)
    if recompute == "full":
        return sum(layer_bytes(spec, layer, d).values())
    parts = attention_bytes(spec, "full", d)
    parts.update(mlp_bytes(spec, "dense", d, gated=False))
    parts["norms"] = _split(4 * s * b * h, d)
    return sum(parts.values())


# ----------------------------------------------------------------------------- Megatron-Core local spec
def norm_bytes(width: int, d: ActDims) -> float:
    """Bytes per token a torch RMSNorm over ``width`` keeps: bf16 input + fp32 rstd (CUDA's fused kernel), or two
    fp32 copies + rstd (the CPU composite)."""
    return 2 * width + 4 if d.device == "cuda" else 8 * width + 4


def _qk_norm(spec) -> bool:
    return any(g.name.endswith(("q_norm.weight", "q_a_layernorm.weight")) for g in _first_layer_groups(spec))


def mcore_attention_bytes(spec, kind: str, d: ActDims) -> dict[str, float]:
    """What Megatron-Core's local-spec ``SelfAttention`` keeps (``attention``) and its core (``attention_core``).

    Unfused (``DotProductAttention``): the scores come from ``baddbmm`` into bf16, are copied to fp32 for the
    softmax (``masked_softmax_fusion`` off: torch softmax), the fp32 softmax output is saved and its bf16 copy is
    saved by the ``bmm`` with V; K and V are expanded to all query heads (``repeat_interleave``) when GQA; the
    causal mask is a new bool s x s tensor per layer. V is a view of the fused QKV output, so for MHA (no expansion),
    under selective recompute (the checkpoint keeps q, k, v) and for flash the whole QKV output stays alive; so does
    it with qk-norm on CUDA (the fused RMSNorm keeps its input, a view of it). RoPE keeps bf16 cos and sin (s x
    rot) for q and for k per layer. With GQA and qk-norm on CUDA, q's reshape out of the grouped QKV layout is a
    copy that the fused q-norm keeps (on the CPU the composite norm keeps fp32 copies instead). Flash (TE /
    flash-attn kernels): q, k, v, the output (which is the out-projection's input) and a fp32 log-sum-exp per head
    and token; no score matrix.

    Sources (megatron/core): ``transformer/attention.py`` (``SelfAttention.get_query_key_value_tensors``, the RoPE
    calls, ``_checkpointed_attention_forward`` for selective recompute: ``checkpoint_core_attention``),
    ``transformer/dot_product_attention.py`` (``DotProductAttention.forward``: ``repeat_interleave`` of K and V,
    ``baddbmm`` into the global memory buffer, ``bmm`` with V), ``fusions/fused_softmax.py``
    (``FusedScaleMaskSoftmax.forward_torch_softmax``: ``input.float()``, torch softmax, the bf16 cast),
    ``transformer/utils.py`` (``get_default_causal_mask``), ``models/common/embeddings/rope_utils.py``
    (``_apply_rotary_pos_emb_bshd``: ``cos_`` / ``sin_`` in the input dtype), ``models/gpt/gpt_layer_specs.py``
    (``get_gpt_layer_local_spec``)."""
    D = d.s * d.b
    h, t, dh = spec.hidden_size, d.t, spec.head_dim
    a, kv = spec.num_attention_heads / t, spec.num_key_value_heads / t
    qk_norm = _qk_norm(spec)
    qkv = 2 * D * (a + 2 * kv) * dh * (1.5 if kind == "gated_full" else 1.0)  # gated: q projection doubled
    lin = _split(2 * D * h, d) + 2 * D * a * dh + 4 * 2 * d.s * dh  # QKV input, out-proj input, RoPE cos/sin
    if kind == "gated_full":
        lin += 4 * D * a * dh
    if d.dropout:
        lin += _split(D * h, d)
    held_by_norm = qk_norm and d.device == "cuda"
    if qk_norm:
        lin += 4 * D * (a + kv) if d.device == "cuda" else (8 * dh + 4) * D * (a + kv)
    if qk_norm and d.device == "cuda" and kv < a:
        lin += 2 * D * a * dh  # GQA: q's grouped-layout reshape is a copy, and the fused q-norm keeps it
    held = held_by_norm
    if held:
        lin += qkv
    core = 0.0
    if d.recompute == "selective":
        lin += 2 * D * a * dh + 2 * D * kv * dh + 4  # the checkpoint keeps q and k (after RoPE), v, an int32
        if not held:
            lin += qkv
        if d.flash:
            core = 0.0
    elif d.flash:  # the kernel's output is the out-projection's input (kept once)
        lin -= 2 * D * a * dh
        core = 2 * D * a * dh + 2 * D * kv * dh + 2 * D * a * dh + 4 * D * a + (0 if held else qkv)
    else:
        X = d.b * a * d.s * d.s
        core = 2 * D * a * dh * 2 + d.s * d.s + 6 * X + (X if d.dropout else 0)
        if kv < a:
            core += 2 * D * a * dh  # V expanded to all heads
        elif not held:
            core += qkv
    return {"attention": lin, "attention_core": core}


def attention_transient(spec, d: ActDims) -> float:
    """Unfused attention's working set on top of what one layer keeps, at its worst moment: the bf16 scores and
    their fp32 copy next to the softmax output in the forward, the fp32 gradients of the softmax in the backward
    (6 bytes per score derived, 8 measured); selective recompute rebuilds the kept 6 bytes per score first.
    Flash: none."""
    if d.flash:
        return 0.0
    X = d.b * spec.num_attention_heads / d.t * d.s * d.s
    # + 2 bytes per score: observed on the H200 (Megatron-Core 0.19.2, torch 2.11) beyond the derivation above
    return (14 if d.recompute == "selective" else 8) * X


def attention_buffer(spec, d: ActDims) -> float:
    """Megatron's global memory buffer ("mpu") that ``baddbmm`` reads: b x heads x s x s bf16, allocated at the
    first forward and kept for the life of the process (unfused attention only; megatron/core ``utils.py``
    ``GlobalMemoryBuffer``, reached through ``parallel_state.get_global_memory_buffer``)."""
    return 0.0 if d.flash else 2 * d.b * spec.num_attention_heads / d.t * d.s * d.s


def mcore_mlp_bytes(spec, kind: str, d: ActDims) -> dict[str, float]:
    """Megatron-Core's MLP (SwiGLU with ``bias_activation_fusion``: FC1 input, FC1 output, FC2 input) and MoE layer
    (the sum of :func:`mcore_moe_parts`) by component (``transformer/mlp.py``, ``transformer/moe/moe_layer.py``)."""
    D = d.s * d.b
    h, t = spec.hidden_size, d.t
    if kind == "none":
        return {"mlp": 0.0}
    if kind == "dense":
        ffn = spec.ffn_hidden_size
        x = _split(2 * D * h, d) + 6 * D * ffn / t
        if d.dropout:
            x += _split(D * h, d)
        return {"mlp": x}
    return {"moe": sum(mcore_moe_parts(spec, d).values())}


def mcore_moe_parts(spec, d: ActDims) -> dict[str, float]:
    """What one Megatron-Core MoE layer (local spec: ``TopKRouter``, ``MoEAllGatherTokenDispatcher``,
    ``SequentialMLP`` experts) keeps for the backward, by the module that saves it (the CPU oracle's split).

    Per token (D tokens; /t with sequence parallelism), sources under megatron/core/transformer/moe/:

    * ``router`` (``router.py`` ``TopKRouter``; ``moe_utils.py`` ``topk_routing_with_score_function``,
      ``switch_load_balancing_loss_func``): its input 2h (bf16, the gating GEMM's), the fp32 softmax scores 4E, the
      top-k probabilities 4k and two int64 top-k index tensors 16k; the aux loss keeps tokens-per-expert 8E and a
      fp32 scalar once per layer;
    * ``dispatcher`` (``token_dispatcher.py`` ``MoEAllGatherTokenDispatcher.token_dispatch`` / ``token_combine``;
      ``moe_utils.py`` ``permute`` / ``unpermute``): the routing map E (bool), the probabilities by expert 2E (bf16)
      and the sorted permutation indices 8k (int64);
    * ``experts`` (``experts.py`` ``SequentialMLP``), per routed token copy (top_k of them): its permuted input 2h,
      its bf16 probability 2, FC1 output 4f and FC2 input 2f (f / etp);
    * ``shared_experts`` (``shared_experts.py``): FC1 output and FC2 input of the shared width (its input is the
      router's, kept once)."""
    D = d.s * d.b
    h, t = spec.hidden_size, d.t
    k, f, E = spec.moe_router_topk, spec.moe_ffn_hidden_size, spec.num_experts
    tokens = D / t if d.sp else D
    parts = {
        "router": tokens * (2 * h + 4 * E + 20 * k) + 8 * E + 4,
        "dispatcher": tokens * (3 * E + 8 * k),
        "experts": k * tokens * (2 * h + 2 + 6 * f / d.etp),
    }
    fs = spec.shared_expert_ffn_hidden_size
    if fs:
        parts["shared_experts"] = 6 * D * fs / t
    return parts
