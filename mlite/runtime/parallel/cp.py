"""Context parallelism: the sequence split over the CP group in load-balanced chunks; attention by all-gathering
K/V; Gated DeltaNet by all-gathering its input sequence.

Split of a packed micro-batch (THD, as Megatron-Core's ``get_batch_on_this_cp_rank`` for packed sequences): every
sequence is padded at its end to a multiple of ``2*CP`` tokens (``2*CP*TP`` with TP, so that TP divides every
rank's stream) (pad tokens: id 0, label -100, loss off, positions
continuing the sequence; causality keeps them from touching any real token), then cut into ``2*CP`` equal chunks;
CP rank ``i`` holds chunks ``i`` and ``2*CP-1-i`` of every sequence (the causal work is then the same on every
rank), so its local stream is ``[seq0 chunk i, seq0 chunk 2CP-1-i, seq1 chunk i, ...]`` with global RoPE positions.
Every CP rank of a DP replica gets the same micro-batch (data rank = DP rank) and takes its share here; the loss
is summed over local loss tokens and reduced over DP x CP by the runtime.

Attention: each rank computes q, k, v for its tokens; k and v are all-gathered over CP (the gathered rows are
rank-major and :attr:`CPBatch.gather_perm` puts them back in sequence order), and the local queries attend to the
full keys under the causal mask of their positions inside the padded sequence. Backward reduce-scatters the K/V
gradients.

Gated DeltaNet: a forward pre-hook all-gathers the mixer's input ``[T_local, h]`` into the full padded stream and
the layer runs on whole sequences; a forward hook keeps this rank's rows of the output. Every CP rank runs the
recurrence on the full sequence (no state passing between ranks); the gradient of the gathered input is
reduce-scattered, and each rank's parameter gradients come from its own output rows only, so FSDP2's reduction
over DP x CP sums them correctly.

The split metadata of the micro-batch being run is held by :class:`ContextParallel` while the runtime is inside
:meth:`ContextParallel.active` (forward and backward, so full recompute sees it too).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ...errors import MliteError
from ..batch import IGNORE_INDEX, PackedBatch
from .comm import all_gather_dim0

MASK_MAX_ELEMS = 4096 * 4096
"""Largest ``[T_local, T_full]`` mask built for one attention call; beyond it attention runs one call per sequence."""


@dataclass(eq=False)
class CPBatch:
    """How one packed micro-batch is laid out over the CP ranks (host tensors; device copies cached)."""

    cp: int
    """CP size."""
    rank: int
    """This rank's CP index."""
    full_lengths: tuple[int, ...]
    """Padded sequence lengths (multiples of 2*CP)."""
    local_lengths: tuple[int, ...]
    """This rank's tokens per sequence (full length / CP)."""
    local_index: torch.Tensor
    """``long[T_local]``: position in the padded full stream of each local token."""
    gather_perm: torch.Tensor
    """``long[T_full]``: row of the rank-major all-gathered tensor holding each full-stream token."""
    seq_pos: torch.Tensor
    """``long[T_full]``: index of each full-stream token inside its padded sequence."""
    seq_id: torch.Tensor
    """``long[T_full]``: sequence of each full-stream token."""
    _dev: dict = field(default_factory=dict, repr=False)

    @property
    def full_tokens(self) -> int:
        return sum(self.full_lengths)

    def on(self, name: str, device) -> torch.Tensor:
        """Tensor ``name`` on ``device`` (copied once)."""
        key = (name, str(device))
        if key not in self._dev:
            self._dev[key] = getattr(self, name).to(device)
        return self._dev[key]

    def full_pack(self, device):
        """PackInfo of the padded full stream (for layers that run on whole sequences)."""
        from ..models.common import PackInfo

        key = ("pack", str(device))
        if key not in self._dev:
            self._dev[key] = PackInfo.build(self.full_tokens, device, lengths=self.full_lengths)
        return self._dev[key]

    def mask(self, device) -> torch.Tensor:
        """``bool[T_local, T_full]``: local query may attend to full key (same sequence, not in its future)."""
        key = ("mask", str(device))
        if key not in self._dev:
            li = self.local_index
            qs, qp = self.seq_id[li], self.seq_pos[li]
            m = (qs[:, None] == self.seq_id[None, :]) & (self.seq_pos[None, :] <= qp[:, None])
            self._dev[key] = m.to(device)
        return self._dev[key]


def chunk_index(full_lengths: tuple[int, ...], cp: int, rank: int) -> list[int]:
    """Full-stream positions CP rank ``rank`` holds: chunks ``rank`` and ``2*cp-1-rank`` of every sequence."""
    out: list[int] = []
    off = 0
    for n in full_lengths:
        c = n // (2 * cp)
        for j in (rank, 2 * cp - 1 - rank):
            out.extend(range(off + j * c, off + (j + 1) * c))
        off += n
    return out


def split_batch(batch: PackedBatch, cp: int, rank: int, multiple: int | None = None) -> tuple[PackedBatch, CPBatch]:
    """This CP rank's share of ``batch`` (module docstring) and the layout needed to reassemble sequences.
    ``multiple``: pad every sequence to a multiple of it (default 2*CP; with TP, 2*CP*TP, so that TP divides each
    rank's stream for sequence parallelism)."""
    if batch.device.type != "cpu":
        raise MliteError("context parallel: split the PackedBatch on the host (before moving it to the device)")
    m = multiple or 2 * cp
    if m % (2 * cp):
        raise MliteError(f"context parallel: sequences must be padded to a multiple of 2*CP = {2 * cp}, got {m}")
    full = tuple(-(-n // m) * m for n in batch.lengths)
    pos = batch.positions()
    src: list[int] = []
    spos: list[int] = []
    sid: list[int] = []
    fpos: list[int] = []
    off = 0
    for s, (n, f) in enumerate(zip(batch.lengths, full)):
        src.extend(range(off, off + n))
        src.extend([-1] * (f - n))
        spos.extend(range(f))
        sid.extend([s] * f)
        last = int(pos[off + n - 1])
        fpos.extend(pos[off : off + n].tolist())
        fpos.extend(range(last + 1, last + 1 + f - n))
        off += n
    src_t = torch.tensor(src, dtype=torch.long)
    real = src_t >= 0
    take = src_t.clamp(min=0)
    ids = torch.where(real, batch.input_ids[take], torch.zeros_like(take))
    labels = torch.where(real, batch.labels[take], torch.full_like(take, IGNORE_INDEX))
    lmask = None if batch.loss_mask is None else batch.loss_mask[take] & real
    local = [torch.tensor(chunk_index(full, cp, r), dtype=torch.long) for r in range(cp)]
    T_local = local[0].numel()
    perm = torch.empty(sum(full), dtype=torch.long)
    for r, li in enumerate(local):
        perm[li] = torch.arange(r * T_local, (r + 1) * T_local)
    li = local[rank]
    fpos_t = torch.tensor(fpos, dtype=torch.long)
    mine = PackedBatch(
        ids[li],
        labels[li],
        torch.tensor([f // cp for f in full], dtype=torch.int32),
        None if lmask is None else lmask[li],
        fpos_t[li],
    )
    meta = CPBatch(
        cp=cp,
        rank=rank,
        full_lengths=full,
        local_lengths=tuple(f // cp for f in full),
        local_index=li,
        gather_perm=perm,
        seq_pos=torch.tensor(spos, dtype=torch.long),
        seq_id=torch.tensor(sid, dtype=torch.long),
    )
    return mine, meta


class ContextParallel:
    """CP over one group: splits micro-batches and provides the attention / Gated DeltaNet hooks."""

    def __init__(self, group, cp: int, rank: int, multiple: int | None = None):
        self.group, self.cp, self.rank, self.multiple = group, cp, rank, multiple or 2 * cp
        self.current: CPBatch | None = None

    def split(self, batch: PackedBatch) -> tuple[PackedBatch, CPBatch]:
        return split_batch(batch, self.cp, self.rank, self.multiple)

    @contextmanager
    def active(self, meta: CPBatch):
        """Run a micro-batch's forward and backward with ``meta`` as the current layout."""
        prev, self.current = self.current, meta
        try:
            yield
        finally:
            self.current = prev

    def _meta(self) -> CPBatch:
        if self.current is None:
            raise MliteError(
                "context parallel: a CP model ran outside ContextParallel.active(); feed it through "
                "the runtime's forward_backward, which splits every micro-batch over CP"
            )
        return self.current

    def gather_full(self, x: torch.Tensor) -> torch.Tensor:
        """``x[T_local, ...]`` of every CP rank -> ``[T_full, ...]`` in sequence order (differentiable)."""
        meta = self._meta()
        g = all_gather_dim0(x, self.group, self.cp)
        return g.index_select(0, meta.on("gather_perm", x.device))

    # ------------------------------------------------------------------ attention (all-gather K/V)
    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pack, scale: float) -> torch.Tensor:
        """Local ``q[T_l, Hq, D]`` against all-gathered ``k, v`` -> ``[T_l, Hq, D]`` (causal within sequences)."""
        meta = self._meta()
        kf, vf = self.gather_full(k), self.gather_full(v)
        gqa = q.shape[1] != k.shape[1]
        Tl, Tf = q.shape[0], kf.shape[0]
        if Tl * Tf <= MASK_MAX_ELEMS:
            qb, kb, vb = (x.transpose(0, 1)[None] for x in (q, kf, vf))
            o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=meta.mask(q.device), scale=scale, enable_gqa=gqa)
            return o[0].transpose(0, 1)
        outs, lo, fo = [], 0, 0
        for nl, nf in zip(meta.local_lengths, meta.full_lengths):
            li = meta.local_index[lo : lo + nl] - fo
            m = (torch.arange(nf)[None, :] <= li[:, None]).to(q.device)
            qb = q[lo : lo + nl].transpose(0, 1)[None]
            kb, vb = (x[fo : fo + nf].transpose(0, 1)[None] for x in (kf, vf))
            outs.append(
                F.scaled_dot_product_attention(qb, kb, vb, attn_mask=m, scale=scale, enable_gqa=gqa)[0].transpose(0, 1)
            )
            lo, fo = lo + nl, fo + nf
        return torch.cat(outs, dim=0)

    # ------------------------------------------------------------------ Gated DeltaNet (all-gather input)
    def gdn_pre_hook(self, module, args):
        x, rope, _pack = args
        meta = self._meta()
        return self.gather_full(x), rope, meta.full_pack(x.device)

    def gdn_post_hook(self, module, args, out):
        return out.index_select(0, self._meta().on("local_index", out.device))

    def install(self, model) -> None:
        """Point every attention layer at :meth:`attention` and hook every Gated DeltaNet layer."""
        from ..models.attention import Attention
        from ..models.deltanet import GatedDeltaNet

        for m in model.modules():
            if isinstance(m, Attention):
                m.cp_attention = self.attention
            elif isinstance(m, GatedDeltaNet):
                m.register_forward_pre_hook(self.gdn_pre_hook)
                m.register_forward_hook(self.gdn_post_hook, prepend=True)  # before TP's reduce-scatter
