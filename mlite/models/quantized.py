"""Block-quantized weights: which tensors of a model are FP8 GEMM weights, their shape on one rank, their block
scales, and the rollout-TP block rule.

Which weights: the GEMM weights of the attention projections, linear attention, dense MLPs and routed / shared
experts (and the MTP projections); the embedding, the output layer, routers, norms, hyper-connection mixers,
biases and every tensor the inventory gives no 2-D shape stay BF16. That is the fork's closed precision contract
(ISEEKYAN/Megatron-LM ``experimental/lite/megatron/lite/primitive/precision/hopper_blockwise.py`` @ 472a276f:
``_FP8_SITES`` = attention projection, dense MLP, MoE expert; ``_BF16_SITES`` = attention core, router, norm,
embedding, LM head) and the DeepSeek-V4 rollout checkpoint's (``docs/fp8-training-design.md`` @ 3412bffa: the
block-FP8 resync "distinguish[es] quantized weights from ignored router, norm, embedding, and other non-GEMM
weights"; ``examples/verl/README.md`` @ 037fdc43: ``resync_format=vllm_checkpoint``, block-FP8 128x128 linears).

Shapes are :attr:`~mlite.models.spec.ParamGroup.shape` (``(out, in)`` per matrix, ``(n, out, in)`` for the
stacked routed experts, as transformers holds them: scales are counted per such matrix; Transformer Engine's
fused ``linear_qkv`` / ``linear_fc1`` can hold one block row fewer where a width is not a multiple of 128) and the dimension tensor parallelism splits,
:attr:`~mlite.models.spec.ParamGroup.tp_dim`: the output of a column-parallel weight, the input of a row-parallel
one, as vLLM's ``ColumnParallelLinear`` / ``RowParallelLinear`` (``vllm/model_executor/layers/linear.py``) and
Megatron-Core's do.

Scales (bytes, per matrix of r x c): Hopper blockwise E4M3, one fp32 scale per 128x128 block:
``ceil(r/128) * ceil(c/128) * 4`` (TE ``Float8BlockScaling``, ``w_block_scaling_dim=2``; the contract's
"weights use 128x128 blocks"); MXFP8, one E8M0 byte per 32 consecutive values of a row: ``r * ceil(c/32)``
(TE ``MXFP8BlockScaling``; the design doc's "one E8M0 power-of-two scale per 32 consecutive values"). TE's padding
of the scale tensors to aligned shapes is not counted.

Rollout TP block rule (vLLM ``Fp8LinearMethod.create_weights`` / ``validate_fp8_block_shape`` in
``vllm/model_executor/layers/quantization/fp8.py`` and ``utils/fp8_utils.py``): with a ``weight_block_size`` of
``[block_n, block_k]``, a column-parallel weight's per-rank output (each output partition of a merged weight)
must be a multiple of ``block_n``, a row-parallel weight's per-rank input a multiple of ``block_k``; replicated
weights are not checked. A per-rank size of 0 (DeepSeek-V4's ``o_a_proj`` at TP 16: ``n_local_groups = o_groups //
tp = 0``) holds no block at all: vLLM 0.23 divides by the block count there (``ZeroDivisionError`` in
``deepgemm_post_process_fp8_weight_block``), newer vLLM raises the ``not divisible by weight quantization
block_n`` error. vllm-project/vllm#17569 was closed as not planned (a fundamental constraint), and the fork's
``docs/research/ds4_vllm_tp16_rollout_memory.md`` @ 017aa887 puts DeepSeek-V4's rollout TP ceiling at 8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import MliteError

QUANTIZED_COMPONENTS = ("attention", "linear_attention", "dense_mlp", "routed_experts", "shared_experts", "other")
"""Components whose 2-D weights are FP8 GEMM weights (the rest stay BF16; see the module docstring)."""

HOPPER_BLOCK = 128
"""Hopper blockwise FP8 weight block edge (128x128 blocks, fp32 scales)."""
MX_BLOCK = 32
"""MXFP8 block length (1x32 along a row, E8M0 byte scales)."""

DEEPSEEK_V4_BLOCK = 128
"""DeepSeek-V4's rollout checkpoint block size (the fork's ``vllm_checkpoint`` resync writes block-FP8 128x128)."""


def is_quantized(g) -> bool:
    """``g`` (a :class:`~mlite.models.spec.ParamGroup`) is an FP8 GEMM weight."""
    return not g.checkpoint_only and g.component in QUANTIZED_COMPONENTS and len(g.shape) >= 2


def matrices(g) -> tuple[int, int, int]:
    """``(count, rows, cols)`` of a quantized weight: ``(out, in)`` is one matrix, ``(n, out, in)`` n."""
    if len(g.shape) == 2:
        return 1, g.shape[0], g.shape[1]
    return g.shape[0], g.shape[1], g.shape[2]


def per_rank(size: int, tp: int, unit: int = 1, replicate: bool = False) -> int:
    """The size one of ``tp`` ranks holds of a dimension of ``size`` split in indivisible units of ``unit`` rows
    (vLLM's integer division: ``o_groups // tp`` whole groups); ``replicate``: with more ranks than units each
    rank holds one unit (vLLM's replicated KV heads)."""
    units = size // unit
    if replicate and tp >= units:
        return unit
    return (units // tp) * unit


def local_matrices(g, tp: int, ep: int, etp: int) -> tuple[float, int, int]:
    """``(count, rows, cols)`` of a quantized weight on one training rank: a ``tp`` weight split along its
    :attr:`tp_dim` by TP, routed experts spread over EP (count / EP) and split by ETP, ``rep`` whole."""
    n, r, c = matrices(g)
    dim = None if g.tp_dim is None else g.tp_dim - (len(g.shape) - 2)  # 0: rows, 1: cols of one matrix
    if g.parallel == "expert":
        n_local, split = n / ep, etp
    elif g.parallel == "tp":
        n_local, split = float(n), tp
    else:
        n_local, split = float(n), 1
    if split > 1 and dim == 0:
        r = per_rank(r // g.tp_parts, split, g.tp_unit) * g.tp_parts
    elif split > 1 and dim == 1:
        c = per_rank(c // g.tp_parts, split, g.tp_unit) * g.tp_parts
    return n_local, r, c


def blockwise_scale_bytes(r: int, c: int) -> int:
    """fp32 scale bytes of one r x c matrix in 128x128 blocks."""
    return math.ceil(r / HOPPER_BLOCK) * math.ceil(c / HOPPER_BLOCK) * 4


def mxfp8_scale_bytes(r: int, c: int) -> int:
    """E8M0 scale bytes of one r x c matrix quantized rowwise in 1x32 blocks."""
    return r * math.ceil(c / MX_BLOCK)


# ---------------------------------------------------------------------------------------------- rollout rule
@dataclass(frozen=True)
class BlockViolation:
    """One quantized weight a rollout TP would cut inside a block."""

    name: str
    """The tensor (checkpoint-style name within its layer)."""
    dim: str
    """``output`` (column-parallel) or ``input`` (row-parallel)."""
    size: int
    """The whole dimension."""
    per_rank: int
    """What one rank would hold of it."""
    block: int
    """The block edge it must be a multiple of."""


def rollout_weight_block(spec, weight_block_size: int | None) -> int:
    """The block edge of the rollout checkpoint's FP8 weights: ``weight_block_size`` when given (0: not
    block-quantized), else the model config's ``quantization_config.weight_block_size`` (its output edge), else
    :data:`DEEPSEEK_V4_BLOCK` for DeepSeek-V4 (whose rollout checkpoint the fork writes in block-FP8), else 0."""
    if weight_block_size is not None:
        return int(weight_block_size)
    wbs = _config_block(spec)
    if wbs:
        return wbs
    return DEEPSEEK_V4_BLOCK if spec.architecture == "deepseek_v4" else 0


def _config_block(spec) -> int:
    """The output edge of the config's ``quantization_config.weight_block_size`` (0: none)."""
    q = (getattr(spec, "config", None) or {}).get("quantization_config") or {}
    wbs = q.get("weight_block_size") if isinstance(q, dict) else None
    return int(wbs[0]) if wbs else 0


def block_violations(spec, tp: int, block: int, *, experts_split: bool = True) -> list[BlockViolation]:
    """The quantized weights of ``spec`` (main and MTP layers) that rollout TP ``tp`` leaves without a whole number
    of ``block`` x ``block`` blocks per rank (empty: TP ``tp`` keeps whole blocks). ``experts_split=False``: the
    engine runs expert parallelism, so routed experts stay whole on their ranks and are not checked."""
    if block <= 0 or tp <= 1:
        return []
    out: dict[str, BlockViolation] = {}
    for layer in spec.layers:
        for g in layer.groups:
            if not is_quantized(g) or g.tp_dim is None or g.parallel not in ("tp", "expert"):
                continue
            if g.parallel == "expert" and not experts_split:
                continue
            size = g.shape[g.tp_dim] // g.tp_parts
            local = per_rank(size, tp, g.tp_unit, g.tp_replicate)
            units = size // g.tp_unit
            whole = units % tp == 0 or (g.tp_replicate and tp % units == 0)
            if whole and local % block == 0 and local > 0:
                continue
            dim = "output" if g.tp_dim == len(g.shape) - 2 else "input"
            out.setdefault(g.name, BlockViolation(g.name, dim, size, local, block))
    return list(out.values())


def o_groups(spec) -> int:
    """DeepSeek-V4's output groups (``o_groups``; 0 for other models)."""
    if spec.architecture != "deepseek_v4":
        return 0
    return int((getattr(spec, "config", None) or {}).get("o_groups") or 0)


def rollout_tp_ok(spec, tp: int, block: int, *, experts_split: bool = True) -> bool:
    """TP ``tp`` passes both rollout rules (the block rule and DeepSeek-V4's ``o_groups``)."""
    g = o_groups(spec)
    return not (g and g % tp) and not block_violations(spec, tp, block, experts_split=experts_split)


def suggest_tp(spec, tp: int, block: int, *, experts_split: bool = True) -> int:
    """The largest TP below ``tp`` that divides it and passes both rules (1 always does)."""
    for t in range(tp - 1, 0, -1):
        if (
            tp % t == 0
            and spec.num_attention_heads % t == 0
            and rollout_tp_ok(spec, t, block, experts_split=experts_split)
        ):
            return t
    return 1


BLOCK_RULE_SOURCE = (
    "vLLM fp8.py/fp8_utils.py validate_fp8_block_shape; vllm-project/vllm#17569 closed as not planned; "
    "ISEEKYAN/Megatron-LM experimental/lite/docs/research/ds4_vllm_tp16_rollout_memory.md @ 017aa887"
)
"""Where the rollout TP block rule comes from (named in its refusal)."""
O_GROUPS_SOURCE = (
    "the mlite DeepSeek-V4 preflight (deepseek_v4_rollout_load_only.py, run_deepseek_v4_gsm8k_grpo.sh), "
    "ISEEKYAN/Megatron-LM experimental/lite/docs/research/ds4_vllm_tp16_rollout_memory.md @ 017aa887"
)
"""Where the DeepSeek-V4 ``o_groups`` rule comes from."""


def check_rollout_tp(
    spec, tp: int, weight_block_size: int | None = None, *, expert_parallel: bool = False, flag: str = "--rollout-tp"
) -> None:
    """Refuse a rollout TP that cuts a block of a quantized weight (the block rule) or, for DeepSeek-V4, does not
    divide ``o_groups`` (the mlite preflight), suggesting the largest TP below it that passes both. The block rule
    is checked first: it is the one vLLM itself enforces at load."""
    block = rollout_weight_block(spec, weight_block_size)
    if weight_block_size is not None:
        whence = "--rollout-weight-block"
    elif block and spec.architecture == "deepseek_v4" and not _config_block(spec):
        whence = "DeepSeek-V4's block-FP8 rollout checkpoint"
    else:
        whence = "the config's quantization_config; a BF16 rollout checkpoint has none"
    split = not expert_parallel
    bad = block_violations(spec, tp, block, experts_split=split)
    fix = suggest_tp(spec, tp, block, experts_split=split)
    if bad:
        v = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise MliteError(
            f"{flag} {tp}: block rule: {spec.name}'s {v.name} keeps {v.per_rank} of its {v.size} {v.dim} "
            f"rows per rank, not a whole number of {block}x{block} FP8 blocks ({whence}){more}; vLLM refuses the "
            f"block-quantized weights at load ({BLOCK_RULE_SOURCE}); use {flag} {fix}"
            + (" (vLLM expert parallelism keeps the experts whole)" if split and spec.num_experts else "")
        )
    g = o_groups(spec)
    if g and g % tp:
        raise MliteError(
            f"{flag} {tp}: o_groups rule: {spec.name}'s o_groups {g} is not divisible by the rollout TP "
            f"({O_GROUPS_SOURCE}); use {flag} {fix}"
        )
