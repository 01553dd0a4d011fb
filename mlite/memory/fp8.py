"""FP8 compute weights on one rank: the GEMM weights' FP8 data, their block scales and their columnwise copy, the
rest of the parameters in BF16 (:mod:`mlite.options.precision` names the profiles, :mod:`mlite.models.quantized`
which tensors are quantized, their shapes on a rank and the scale formulas).

Bytes per quantized r x c matrix on the rank (before the optimizer sharding over d, which splits them like every
other parameter under fsdp2):

- ``hopper_blockwise_fp8_weight``: data ``r*c`` (E4M3, 1 B) + scales ``ceil(r/128)*ceil(c/128)*4`` (fp32 per
  128x128 block); the columnwise (transposed) copy Hopper's backward needs: the same again.
- ``mxfp8_fp8_weight``: data ``r*c`` + scales ``r*ceil(c/32)`` (E8M0, 1 B per 1x32 row block); the columnwise copy:
  ``r*c`` + ``ceil(r/32)*c``.

Non-quantized parameters (embedding, output layer, routers, norms, hyper-connections, biases) stay BF16 (2 B). The
FP32 master, the FP32 main gradients and the FP32 moments are the profile's parameter contract
(:func:`mlite.memory.optimizer.state_bytes`); the FSDP2 all-gather stays BF16 (the contract's "BF16 parameter
all-gather; no FP8 parameter gather").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import MliteError
from ..models.quantized import blockwise_scale_bytes, is_quantized, local_matrices, mxfp8_scale_bytes


@dataclass(frozen=True, slots=True)
class Fp8Stage:
    """The quantized weights of one pipeline rank, before optimizer sharding, dense and expert apart."""

    dense: float
    """Quantized elements of dense (TP-split or replicated) weights (sharded over DP x CP)."""
    expert: float
    """Quantized elements of routed-expert weights (sharded over EDP)."""
    dense_scales: float
    """Scale bytes of the rowwise data of the dense weights."""
    expert_scales: float
    """Scale bytes of the rowwise data of the expert weights."""
    dense_col_scales: float
    """Scale bytes of the columnwise copy of the dense weights (its data: ``dense`` bytes)."""
    expert_col_scales: float
    """Scale bytes of the columnwise copy of the expert weights."""


def scale_bytes(weights: str, r: int, c: int) -> tuple[int, int]:
    """``(rowwise, columnwise)`` scale bytes of one r x c matrix stored as ``weights`` (``blockwise``/``mxfp8``)."""
    if weights == "blockwise":
        b = blockwise_scale_bytes(r, c)
        return b, b
    return mxfp8_scale_bytes(r, c), mxfp8_scale_bytes(c, r)


def check_shapes(spec, precision: str) -> None:
    """FP8 bytes need the tensors' shapes, which the kit's native inventories carry; a model read on transformers'
    meta device (``source="transformers-meta"``) has none, and is refused rather than counted as BF16."""
    if spec.source != "native":
        raise MliteError(
            f"precision: {precision} needs the tensor shapes of {spec.name}'s GEMM weights, which the kit has only "
            f"for its native inventories ({spec.name} is read on transformers' meta device); use --precision bf16 "
            "or hopper_blockwise_bf16_weight"
        )


def fp8_stage(sp, plan, weights: str) -> Fp8Stage:
    """The quantized weights of the layers of pipeline rank ``sp`` (a :class:`~mlite.memory.params.StageParams`) on
    ``plan``'s TP / EP / ETP; the embedding and head parts hold none."""
    p = plan.parallel
    acc = {"dense": 0.0, "expert": 0.0, "ds": 0.0, "es": 0.0, "dc": 0.0, "ec": 0.0}
    for layer, n in sp.layer_kinds:
        for g in layer.groups:
            if not is_quantized(g):
                continue
            count, r, c = local_matrices(g, p.tp, p.ep, p.etp_size)
            row, col = scale_bytes(weights, r, c)
            kind = "expert" if g.parallel == "expert" else "dense"
            acc[kind] += n * count * r * c
            acc[kind[0] + "s"] += n * count * row
            acc[kind[0] + "c"] += n * count * col
    return Fp8Stage(acc["dense"], acc["expert"], acc["ds"], acc["es"], acc["dc"], acc["ec"])


def fp8_param_bytes(q: Fp8Stage, dense: float, expert: float, d_dense: float, d_exp: float, columnwise: bool) -> dict:
    """Parameter bytes of a rank by part: ``fp8_data``, ``fp8_scales``, ``fp8_columnwise`` (data + scales of the
    second copy), ``bf16_params`` (the rest), for ``dense`` / ``expert`` parameters held at shard divisors
    ``d_dense`` / ``d_exp`` (1, 1: held whole)."""
    data = q.dense / d_dense + q.expert / d_exp
    scales = q.dense_scales / d_dense + q.expert_scales / d_exp
    col = data + q.dense_col_scales / d_dense + q.expert_col_scales / d_exp if columnwise else 0.0
    rest = (dense - q.dense) / d_dense + (expert - q.expert) / d_exp
    return {"fp8_data": data, "fp8_scales": scales, "fp8_columnwise": col, "bf16_params": 2 * rest}
