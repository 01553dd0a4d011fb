"""Muon's optimizer state and Newton-Schulz workspace on one pipeline rank.

Which parameters Muon owns (ISEEKYAN/Megatron-LM ``experimental/lite/megatron/lite/primitive/optimizers/
muon_routing.py`` @ 7bafd490, ``tag_muon_parameter_metadata``): a trainable tensor with two dimensions that is not
the embedding or the output layer; everything else (embeddings, output layer, norms, biases, 1-D router biases)
falls back to the scalar optimizer, AdamW (``muon_scalar_optimizer="adam"``). Megatron-Core's
``get_megatron_muon_optimizer`` (NVIDIA/Megatron-LM ``megatron/core/optimizer/muon.py`` @ 025c931a) splits the same
way (not an embedding / output parameter and not 1-D), so the router's 2-D weight is Muon's. Here that is
:attr:`mlite.models.spec.ParamGroup.matrix`; fused routed experts ``(experts, out, in)`` are ``experts`` matrices of
``(out, in)``. A tensor whose shape the spec does not describe counts as AdamW's (two moments: the estimate errs high).

State per shard element, with the distributed optimizer's sharding as for Adam (no PAO, no offload: refused):
Muon matrices 4 (one fp32 momentum buffer, ``exp_avg``) + 4 (fp32 master of a bf16 parameter); AdamW rest 4 + 4 + 4.

Newton-Schulz workspace (:func:`ns_workspace_bytes`), for the largest matrix the rank updates, derived from the
lite runtime's update (:mod:`mlite.runtime.optim.muon`, which follows Emerging-Optimizers ``newton_schulz`` @
0001f6e2: transpose to k x l with k = min(rows, cols), Frobenius normalisation in fp32, iterations in bf16 with
``muon_fp32_matmul_prec="medium"`` or fp32 with ``"high"``, each step ``A = X Xᵀ`` (k x k), ``B = b A + c A A``
(k x k), ``X' = a X + B X`` (k x l), result back in fp32). Alive at once, e = bytes of the iteration dtype:

* the gathered full fp32 update G (4kl), always;
* while normalising and casting: the fp32 normalised copy (4kl) and, in bf16, its cast (2kl);
* in an iteration: X, A, B and X' (e·kl + 2e·k² + e·kl);
* at the end, the fp32 result beside the last X (4kl, + e·kl in bf16).

So 4kl + max(4kl + 2kl, 2ekl + 2ek², 4kl + ekl) in bf16 (e = 2), 4kl + max(4kl, 8kl + 8k²) in fp32 (e = 4: the
casts are no-ops, the normalised copy is the iterate).

The lite runtime's whole step (:meth:`mlite.runtime.optim.muon.DistributedMuon.step_async`, one matrix at a time,
:func:`lite_step_bytes`): the zero count, :data:`UPDATE_CHUNK` elements at a time (on CUDA ``count_nonzero``'s bool
mask and int64 copy, 9 bytes per element); G, into which the scaled gradient, the momentum and the update are written
in place (no fp32 gradient copy); Newton-Schulz (the workspace above, G included); G freed, the master updated from
the result, the result freed; the bf16 parameter written as ``round_bf16`` of the master :data:`UPDATE_CHUNK`
elements at a time (:data:`ROUND_BF16_BYTES` of integer temporaries per element). No two phases overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from .optimizer import UPDATE_CHUNK

ROUND_BF16_BYTES = 23
"""Temporaries per element of :func:`mlite.runtime.optim.master.split_fp32` (``round_bf16``) alive at once, at its
``torch.where``: ``low``, ``up``, ``hi``, ``hi - 0x10000`` and the result (int32, 4 each), ``rem`` (int16, 2) and
the ``hi > 0x7FFF`` mask (bool, 1); measured by tests/test_muon.py on the lite runtime's step."""
COUNT_ZEROS_BYTES = 9
"""CUDA ``torch.count_nonzero`` temporaries per element: the ``!= 0`` bool mask and its int64 copy for the sum."""

EMBEDDING_COMPONENTS = ("embedding", "lm_head")
"""Components Muon leaves to AdamW although their tensors are 2-D (``is_embedding_or_output_parameter``)."""


def ns_workspace_bytes(rows: int, cols: int, prec: str = "medium") -> int:
    """Peak bytes of one Newton-Schulz orthogonalisation of a ``rows x cols`` matrix (see the module docstring)."""
    k, n = min(rows, cols), max(rows, cols)
    kl, kk = k * n, k * k
    if prec == "high":
        return 4 * kl + max(4 * kl, 8 * kl + 8 * kk)
    e = 2
    return 4 * kl + max(4 * kl + 2 * kl, 2 * e * kl + 2 * e * kk, 4 * kl + e * kl)


@dataclass(frozen=True, slots=True)
class MuonShare:
    """The Muon part of one rank's local parameters."""

    dense: float
    """Local dense parameters in Muon's matrices (sharded over DP x CP like the rest)."""
    expert: float
    """Local routed-expert parameters in Muon's matrices (sharded over EDP)."""
    largest: tuple[int, int]
    """``(rows, cols)`` of the largest matrix the rank updates (TP-local: Megatron's ``muon_tp_mode="blockwise"``
    orthogonalises each TP block); ``(0, 0)``: none."""


def _local_matrix(g, tp: int, etp: int) -> tuple[int, int]:
    """``(rows, cols)`` of one matrix of a group on one rank (TP / ETP splits its ``tp_dim``)."""
    shape = list(g.shape)
    split = etp if g.parallel == "expert" else tp if g.parallel == "tp" else 1
    if g.tp_dim is not None and split > 1:
        shape[g.tp_dim] = max(1, shape[g.tp_dim] // split)
    return shape[-2], shape[-1]


def muon_share(sp, plan) -> MuonShare:
    """The Muon matrices among the layers of stage ``sp`` (:class:`mlite.memory.params.StageParams`) on ``plan``:
    local dense and expert elements (as :func:`mlite.memory.params.stage_params` counts them) and the largest."""
    p = plan.parallel
    tp, etp, ep = p.tp, p.etp_size, p.ep
    dense = expert = 0.0
    largest = (0, 0)
    for layer, n in sp.layer_kinds:
        for g in layer.groups:
            if g.checkpoint_only or not g.matrix:
                continue
            r, c = _local_matrix(g, tp, etp)
            if g.parallel == "expert":
                expert += n * g.numel / (ep * etp)
            elif g.parallel == "tp":
                dense += n * g.numel / tp
            else:
                dense += n * g.numel
            if r * c > largest[0] * largest[1]:
                largest = (r, c)
    return MuonShare(dense, expert, largest)


def lite_step_bytes(sp, prec: str = "medium", bf16_params: bool = True, cuda: bool = True) -> int:
    """Peak transient bytes of the lite runtime's Muon step over the matrices of stage ``sp`` (one GPU: the lite
    runtime has no TP or EP), the module docstring's phases, none overlapping, per Muon tensor as the runtime
    processes it -- a stack of routed experts ``(experts, rows, cols)`` is one batched Newton-Schulz, so its
    workspace is ``experts x`` :func:`ns_workspace_bytes` -- the largest of: Newton-Schulz; the chunked
    ``round_bf16`` of bf16 parameters (``ROUND_BF16_BYTES x min(UPDATE_CHUNK, numel)``: the loop over
    ``range(0, n, CHUNK)`` at the end of ``DistributedMuon.step_async``); on CUDA the chunked zero count
    (``COUNT_ZEROS_BYTES x min(UPDATE_CHUNK, numel)``, :func:`mlite.runtime.optim.muon.count_zeros`)."""
    out = 0
    for layer, _ in sp.layer_kinds:
        for g in layer.groups:
            if g.checkpoint_only or not g.matrix:
                continue
            rows, cols = g.shape[-2], g.shape[-1]
            chunk = min(UPDATE_CHUNK, g.numel)
            out = max(
                out,
                g.numel // (rows * cols) * ns_workspace_bytes(rows, cols, prec),
                ROUND_BF16_BYTES * chunk if bf16_params else 0,
                COUNT_ZEROS_BYTES * chunk if cuda else 0,
            )
    return out
