"""Activation and transient memory of the kit's lite runtime (``mlite.runtime``: FSDP2, bf16), per token.

Derived from what the lite modules save for the backward rather than from Megatron's fused layers, and held against
``mlite.runtime.saved`` (tests/test_memory_lite.py; the GPU rows in bench/results/gpu_memory.csv).
Notation: h hidden, a / kv query / key-value heads, hd head dim, f FFN width, E experts, k top-k, fe expert width,
fs shared-expert width; bytes per token; ``norm(d)`` is what an RMSNorm keeps: its input and a fp32 rstd
(2d + 4 for bf16 input with the fused CUDA kernel, 4d + 4 for the zero-centred Qwen3.5 norm, which runs on a fp32
copy; the CPU composite keeps fp32 copies: 8d + 4).

  block          norm(h) x 2 + mixer + MLP
  attention      2h (projection input) + q/k norms + 2(a + 2kv)hd (SDPA q, k, v) + 2a*hd (output) + 4a (fp32 LSE);
                 output-gated: + 4a*hd (sigmoid output and gated product)
  dense MLP      2h + 8f (input, gate and up outputs, SiLU output, product)
  MoE            2h + 4E (fp32 router probabilities) + k(6h + 8fe + 30) + 4; shared expert + 8fs (+ 2h + 2 gate)
  Gated DeltaNet 2h + 10 cd (short conv: input, three shifted copies, SiLU input; cd = 2H*K + HV*V) + 10 HV
                 + 8 H*K + 8 H (fp32 l2-norm copies) + chunk kernel (fp32; C = chunk: 16 HV*C + 48 HV*K + 12 HV*V
                 + 16 HV + 4 HV*K^2/C + 8 HV*K*V/C, the 24 HV*K being the operand copies torch.matmul makes when it
                 folds the chunked tensors into bmm) + 20 HV*V + 4 HV (gated output norm, fp32) + 2 HV*V (out_proj)
  recompute      full: 2h per block (its input); selective: attention drops the LSE, Gated DeltaNet the chunk
                 kernel's intermediates
  root           norm(h) + 4*rot (cos/sin) + fused linear cross-entropy: 2h per loss token (d hidden) and
                 d weight (V*h*4 fp32 when the loss runs in several chunks, else V*h*2)
Transients (the peak is the largest of three moments):
  end of forward   the cross-entropy chunk: chunk*V*6 (fp32 logits and their bf16 copy) + the d-weight accumulator
                   (twice V*h*4 while addmm writes a new one; single chunk: V*h*2)
  start of backward  d weight scaled (V*h*4 + V*h*2 bf16 cast; single chunk V*h*2 x 2)
  block backward   FSDP2 unit: 4U (unsharded bf16 params, current + prefetched) + 2U (unsharded bf16 grads) +
                   4U + 4U/d (fp32 reduce-scatter input and output), U the largest block's parameters; full
                   recompute adds one block's activations
  always           the root's unsharded bf16 parameters (embedding, final norm, lm_head: not resharded after forward)
Sharded gradients are freed by ``zero_grad``; they exist at the peak only from the second micro-batch on.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models.chunks import GDN_TORCH_CHUNK, ce_chunk_rows


@dataclass(frozen=True, slots=True)
class LiteDims:
    """What the lite formulas need besides the spec."""

    tokens: int
    """Tokens per micro-batch."""
    recompute: str
    """none | selective | full."""
    device: str = "cuda"
    """``cuda`` (fused RMSNorm, flash output kept as a view) or ``cpu`` (composite RMSNorm)."""
    act_bytes: int = 2
    """Bytes of an activation element: the parameter dtype (2 for bf16 runs, 4 for fp32 CPU runs)."""


def _zero_centered(spec) -> bool:
    return spec.architecture in ("qwen3_next", "qwen3_5_moe")


def _norm(d: int, zc: bool, dims: LiteDims) -> float:
    if dims.device == "cpu":
        return 8 * d + 4
    return (4 if zc else dims.act_bytes) * d + 4


def _head_norm(heads: int, hd: int, zc: bool, dims: LiteDims) -> float:
    if dims.device == "cpu":
        return 8 * heads * hd + 4 * heads
    return (4 if zc else dims.act_bytes) * heads * hd + 4 * heads


def _has(spec, suffix: str) -> bool:
    for layer in spec.main_layers:
        for g in layer.groups:
            if g.name.endswith(suffix):
                return True
    return False


def attention_per_token(spec, gated: bool, dims: LiteDims) -> float:
    h, a, kv, hd = spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    ab = dims.act_bytes
    zc = _zero_centered(spec)
    x = ab * h + ab * (a + 2 * kv) * hd + ab * a * hd + (0 if dims.recompute == "selective" else 4 * a)
    if _has(spec, "self_attn.q_norm.weight"):
        x += _head_norm(a, hd, zc, dims) + _head_norm(kv, hd, zc, dims)
    if gated:
        x += 2 * ab * a * hd
    return x


def gdn_per_token(spec, dims: LiteDims) -> float:
    h = spec.hidden_size
    H, e = spec.linear_num_key_heads, spec.linear_num_value_heads
    K, V = spec.linear_key_head_dim, spec.linear_value_head_dim
    C = GDN_TORCH_CHUNK[dims.device]
    ab = dims.act_bytes
    cd = 2 * H * K + e * V
    kernel = 16 * e * C + 48 * e * K + 12 * e * V + 16 * e + 4 * e * K * K / C + 8 * e * K * V / C
    l2norm = 8 * H * K + 8 * H  # fp32 q, k copies and their rsqrt
    x = ab * h + 5 * ab * cd + ab * e + 8 * e + l2norm + 20 * e * V + 4 * e + ab * e * V
    return x + (0 if dims.recompute == "selective" else kernel)


def mlp_per_token(spec, kind: str, ab: int = 2) -> float:
    h = spec.hidden_size
    if kind == "none":
        return 0.0
    if kind == "dense":
        return ab * h + 4 * ab * spec.ffn_hidden_size
    E, k, fe, fs = spec.num_experts, spec.moe_router_topk, spec.moe_ffn_hidden_size, spec.shared_expert_ffn_hidden_size
    x = ab * h + 4 * E + k * (3 * ab * h + 4 * ab * fe + 28 + ab) + 4
    if fs:
        x += 4 * ab * fs
        if _has(spec, "shared_expert_gate.weight"):
            x += ab * h + ab
    return x


def block_per_token(spec, layer, dims: LiteDims) -> dict[str, float]:
    """Bytes per token one decoder block keeps, by component."""
    h = spec.hidden_size
    if dims.recompute == "full":
        return {"layer_inputs": dims.act_bytes * h}
    zc = _zero_centered(spec)
    out = {"norms": 2 * _norm(h, zc, dims)}
    if layer.attention == "gdn":
        out["linear_attention"] = gdn_per_token(spec, dims)
    else:
        out["attention"] = attention_per_token(spec, layer.attention == "gated_full", dims)
    out["moe" if layer.mlp != "dense" else "mlp"] = mlp_per_token(spec, layer.mlp, dims.act_bytes)
    return out


def root_parts(spec, dims: LiteDims) -> tuple[dict, dict]:
    """(activations kept by the root, transients of the loss) for one micro-batch."""
    h, V, T, ab = spec.hidden_size, spec.vocab_size, dims.tokens, dims.act_bytes
    rot = int(spec.head_dim * float(spec.config.get("partial_rotary_factor", 1.0)))
    multi = ce_chunk_rows(V) < T
    dw = V * h * (4 if multi else ab)
    acts = {"root_norm_rope": T * (_norm(h, _zero_centered(spec), dims) + 2 * ab * rot), "loss": T * ab * h + dw}
    chunk = min(T, ce_chunk_rows(V))
    logits = 4 + (ab if ab < 4 else 0)  # fp32 logits and, for bf16 runs, their bf16 copy
    transients = {"ce_forward": chunk * V * logits + (2 * dw if multi else dw), "loss_backward": dw + V * h * ab}
    return acts, transients


def unit_transient(unit_params: float, shard: int) -> float:
    """FSDP2 bytes for the unit being processed: gathered params (current + prefetched), its grads, fp32 RS."""
    return 4 * unit_params + 2 * unit_params + 4 * unit_params + 4 * unit_params / max(1, shard)


_BLOCK_ORDER = ("input_layernorm", "self_attn", "linear_attn", "post_attention_layernorm", "mlp")
"""The lite decoder block's submodules in registration order (``named_parameters`` walks them so)."""


def lite_tensors(spec) -> list[tuple[int, bool]]:
    """``(numel, decay)`` of every trainable tensor of the lite runtime's model, in its ``named_parameters`` order
    (embedding, each block's input norm, attention, post-attention norm, MLP, the final norm, an untied lm_head);
    ``decay``: the tensor has two or more dimensions (the runtime's ``_decay``: not a bias, not 1-D). The spec
    describes no shape for the embedding, the lm_head or the norms: the first two are matrices, the others 1-D.
    :func:`mlite.options.optimizers.mfsdp_split_sizes` reads it (the whole-tensor offload split)."""

    def one(g) -> tuple[int, bool]:
        matrix = len(g.shape) >= 2 or g.component in ("embedding", "lm_head")
        return g.numel, matrix and not g.name.endswith(".bias")

    def rank(g) -> int:
        head = g.name.split(".", 1)[0]
        return _BLOCK_ORDER.index(head) if head in _BLOCK_ORDER else len(_BLOCK_ORDER)

    pre = [g for g in spec.pre if not g.checkpoint_only]
    post = [g for g in spec.post if not g.checkpoint_only]
    out = [one(g) for g in pre]
    for layer in spec.main_layers:
        out += [one(g) for g in sorted((g for g in layer.groups if not g.checkpoint_only), key=rank)]
    return out + [one(g) for g in post]
