"""Megatron-Core's chunked optimizer-state offload (``chunked_optimizer_state_offload``): what stays on the GPU,
what the update restores, what the host holds, per rank (bytes; ``shard`` = the rank's optimizer-shard parameters).

The offloader (``ChunkedOptimizerStateOffloader``, NVIDIA/Megatron-LM ``megatron/core/optimizer/cpu_offloading/
chunked_optimizer_state_offload.py`` @ d48bd6be, added by #6244 = 9050d4c5fb; its README in the same folder) keeps a
parameter's moments and master as one atomic *bundle* in pinned host memory between updates:

- selection: bundles are picked in optimizer order (those with a separate master first) until their bytes reach
  ``ceil(fraction x all bundle bytes)`` (``_select_params_for_offload``), so the offloaded share is the fraction of
  the bytes, over by at most one bundle. Every bundle here has the same bytes per parameter (one param dtype), so
  ``selected = fraction x shard`` parameters.
- between steps (forward, backward, rollout) the GPU keeps the unselected bundles: ``(1 - fraction) x shard x
  (master + exp_avg + exp_avg_sq)``; the host keeps ``fraction x shard x (master + exp_avg + exp_avg_sq)`` in their
  own dtypes (PAO: int16 remainders, bf16 moments).
- the update restores every selected master in one window (``_schedule_master_h2d``: ``fraction x shard x master``,
  "not bounded by" the chunk size, ``optimizer_config.py``) and the moments chunk by chunk through two reusable
  staging slots (``_state_staging_slots``: H2D of chunk N+1 while chunk N steps, "about 2 *
  optimizer_state_offload_chunk_size_mb ... not one chunk", README). A chunk closes before the parameter that would
  take it past ``chunk_size_mb x 2**20`` bytes of moments (``_build_chunks``); a parameter is never split, so one
  larger than the target is a chunk of its own. The two slots hold at most ``min(S, 2 x max(C, L))`` (S the
  selected moments, C the target, L the largest parameter's moments; exact with one or two chunks, a bound with
  more); chunk size 0 is one chunk of S. The 256-byte alignment of each view in a slot is not counted.
- the masters go back to the host only when the training loop calls ``offload_for_forward()`` at the
  optimizer-to-forward boundary. Megatron Lite skipped it until ISEEKYAN/Megatron-LM#232 (merged 2026-09-20): the
  selected masters / PAO int16 remainders then stay on the GPU through rollout and forward/backward (and the update
  restores none). ``TrainingOptions.offload_master_for_forward=False`` models such a build.

The largest parameter shard L: the distributed optimizer gives each rank a contiguous range of each gradient bucket
(``max(40M, 1M x d)`` elements, Megatron-Core DDP's bucket; a tensor larger than a bucket has its own), so a tensor
of ``n`` local elements leaves at most ``max(n / d, min(n, bucket / d))`` on one rank; a routed expert is one tensor
per expert and projection (Megatron-Core's grouped MLP keeps ``weight0 .. weightN-1``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..options import rules

MIB = 2**20
"""Bytes of one MiB (Megatron-Core: ``optimizer_state_offload_chunk_size_mb * 1024 * 1024``)."""


@dataclass(frozen=True, slots=True)
class ChunkedOffload:
    """The chunked offload of one rank (bytes unless said)."""

    fraction: float
    """``optimizer_state_offload_fraction``."""
    chunk_bytes: float
    """Target moment bytes per chunk (0: all selected moments in one chunk)."""
    selected: float
    """Shard parameters whose bundle lives on the host."""
    largest_state: float
    """Moment bytes of the largest single parameter shard (a chunk never splits it)."""
    resident_masters: float
    """Selected masters / PAO remainders left on the GPU between steps (a build without ``offload_for_forward``)."""
    master_window: float
    """Selected masters restored for the update in one window (0 when they never left the GPU)."""
    state_window: float
    """Moments in the two staging slots during the update."""
    chunk_params: float
    """Shard parameters of the largest chunk (the optimizer steps one chunk at a time)."""
    host: float
    """Pinned host bytes: the selected bundles (masters and moments)."""

    def to_dict(self) -> dict:
        """The ``chunked_state_offload`` block of ``mlite memory --json`` (bytes as integers)."""
        return {
            "fraction": self.fraction,
            "chunk_bytes": round(self.chunk_bytes),
            "selected_params": round(self.selected),
            "largest_param_state": round(self.largest_state),
            "resident_masters": round(self.resident_masters),
            "master_window": round(self.master_window),
            "state_window": round(self.state_window),
            "host": round(self.host),
        }


def state_window(selected_state: float, chunk_bytes: float, largest: float) -> float:
    """Moment bytes the two staging slots hold during the update: all of them with chunk size 0 or when they fit
    one chunk, else ``min(S, 2 x max(C, L))`` (see the module docstring)."""
    if selected_state <= 0:
        return 0.0
    if chunk_bytes <= 0 or selected_state <= chunk_bytes:
        return selected_state
    return min(selected_state, 2 * max(chunk_bytes, largest))


def largest_shard(spec, plan, sp, d_dense: int, d_exp: int) -> float:
    """Elements of the largest single parameter shard on the rank of ``sp`` (a
    :class:`~mlite.memory.params.StageParams`), the atom of a chunk."""
    p = plan.parallel
    vocab_scale = plan.padded_vocab / spec.vocab_size if spec.vocab_size else 1.0
    groups = []
    if sp.has_embedding:
        groups += list(spec.pre)
    if sp.has_head:
        groups += list(spec.post)
    for layer, _n in sp.layer_kinds:
        groups += list(layer.groups)
    best = 0.0
    for g in groups:
        if g.checkpoint_only:
            continue
        if g.parallel == "expert":
            n, d = g.numel / max(spec.num_experts, 1) / p.etp_size, d_exp
        elif g.parallel == "tp":
            n, d = g.numel / p.tp, d_dense
        elif g.parallel == "vocab":
            n, d = g.numel * vocab_scale / p.tp, d_dense
        else:
            n, d = float(g.numel), d_dense
        bucket = max(40_000_000, 1_000_000 * d)
        best = max(best, n / d, min(n, bucket / d))
    return best


def chunked_offload(o, sb, shard: float, largest_numel: float) -> ChunkedOffload | None:
    """The chunked offload of a rank with ``shard`` optimizer-shard parameters under ``o`` (a
    :class:`~mlite.options.TrainingOptions`, ``sb`` its :class:`~mlite.memory.optimizer.StateBytes`); None when it is
    off (:func:`mlite.options.rules.chunked_offload_on`)."""
    if not rules.chunked_offload_on(o):
        return None
    frac = float(o.optimizer_state_offload_fraction)
    moments = sb.exp_avg + sb.exp_avg_sq
    selected = frac * shard
    chunk = o.optimizer_state_offload_chunk_size_mb * MIB
    largest = largest_numel * moments
    s = selected * moments
    window = state_window(s, chunk, largest)
    if chunk <= 0 or s <= chunk:
        chunk_params = selected
    else:
        chunk_params = min(selected, max(chunk, largest) / moments) if moments else 0.0
    masters = selected * sb.master
    stuck = 0.0 if o.offload_master_for_forward else masters
    return ChunkedOffload(
        fraction=frac,
        chunk_bytes=float(chunk),
        selected=selected,
        largest_state=largest,
        resident_masters=stuck,
        master_window=masters - stuck,
        state_window=window,
        chunk_params=chunk_params,
        host=selected * (sb.master + moments),
    )
