"""``PackedBatch``: sequences packed back to back (THD layout) with ``cu_seqlens``, as Megatron Lite feeds its models.

One micro-batch is a flat token stream ``input_ids[T]`` holding ``N`` sequences of lengths ``seq_lens[N]``; attention
and the Gated DeltaNet recurrence never cross a sequence boundary. ``labels`` are already shifted: the label of token
``t`` is the token that follows it in the same sequence, ``-100`` where nothing is learned (the last token of each
sequence, prompt tokens, padding). ``loss_mask`` (optional) switches more positions off.

Validation happens at construction and raises :class:`~mlite.errors.MliteError` with one line naming the field. Value
checks (lengths summing to ``T``, non-negative ids) run on CPU tensors only, so moving a batch to a GPU never syncs.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..errors import MliteError

IGNORE_INDEX = -100
"""Label value that contributes no loss (the PyTorch / Hugging Face convention)."""

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _tensor(name: str, value, dtype: torch.dtype | None = None) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value, dtype=dtype)
    except (TypeError, ValueError, RuntimeError) as e:
        raise MliteError(f"PackedBatch.{name}: cannot be read as a tensor ({e}); pass a 1-D integer tensor") from None


@dataclass(eq=False)
class PackedBatch:
    """One micro-batch of sequences packed back to back."""

    input_ids: torch.Tensor
    """``LongTensor[T]``: token ids of all sequences, concatenated."""
    labels: torch.Tensor
    """``LongTensor[T]``: already-shifted targets (label of token t = next token of its sequence); -100 = ignored."""
    seq_lens: torch.Tensor
    """``IntTensor[N]``: length of each sequence, summing to T (stored as int32)."""
    loss_mask: torch.Tensor | None = None
    """``BoolTensor[T]`` or None: False switches a position's loss off (on top of label -100)."""
    position_ids: torch.Tensor | None = None
    """``LongTensor[T]`` or None: RoPE positions; None means 0..len-1 within each sequence."""
    _lens: tuple[int, ...] = field(default=(), init=False, repr=False)
    _cu: torch.Tensor | None = field(default=None, init=False, repr=False)
    _loss_idx: torch.Tensor | None = field(default=None, init=False, repr=False)
    _n_loss: int | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.input_ids = _tensor("input_ids", self.input_ids, torch.long)
        self.labels = _tensor("labels", self.labels, torch.long)
        self.seq_lens = _tensor("seq_lens", self.seq_lens, torch.int32)
        if self.loss_mask is not None:
            self.loss_mask = _tensor("loss_mask", self.loss_mask, torch.bool)
        if self.position_ids is not None:
            self.position_ids = _tensor("position_ids", self.position_ids, torch.long)
        self._validate()

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        ids, labels, lens = self.input_ids, self.labels, self.seq_lens
        if ids.dim() != 1 or ids.dtype not in _INT_DTYPES:
            raise MliteError(
                f"PackedBatch.input_ids: expected a 1-D integer tensor [T], got {tuple(ids.shape)} "
                f"{ids.dtype}; flatten the sequences into one token stream"
            )
        if ids.numel() == 0:
            raise MliteError("PackedBatch.input_ids: empty; a batch needs at least one token")
        T = ids.numel()
        if labels.dim() != 1 or labels.dtype not in _INT_DTYPES or labels.numel() != T:
            raise MliteError(
                f"PackedBatch.labels: expected an integer tensor of shape ({T},) like input_ids, got "
                f"{tuple(labels.shape)} {labels.dtype}; give one (already shifted) label per token"
            )
        if lens.dim() != 1 or lens.dtype not in _INT_DTYPES or lens.numel() == 0:
            raise MliteError(
                f"PackedBatch.seq_lens: expected a non-empty 1-D integer tensor [N], got "
                f"{tuple(lens.shape)} {lens.dtype}; give the length of each packed sequence"
            )
        for name in ("loss_mask", "position_ids"):
            t = getattr(self, name)
            if t is None:
                continue
            ok_dtype = t.dtype == torch.bool if name == "loss_mask" else t.dtype in _INT_DTYPES
            if t.dim() != 1 or t.numel() != T or not ok_dtype:
                want = "a bool tensor" if name == "loss_mask" else "an integer tensor"
                raise MliteError(
                    f"PackedBatch.{name}: expected {want} of shape ({T},) like input_ids, got "
                    f"{tuple(t.shape)} {t.dtype}; or leave it None"
                )
        if lens.dtype != torch.int32:
            self.seq_lens = lens = lens.to(torch.int32)
        if ids.dtype != torch.long:
            self.input_ids = ids.long()
        if labels.dtype != torch.long:
            self.labels = labels.long()
        if self.position_ids is not None and self.position_ids.dtype != torch.long:
            self.position_ids = self.position_ids.long()
        self._lens = tuple(int(x) for x in lens.tolist())
        if min(self._lens) <= 0:
            bad = next(i for i, n in enumerate(self._lens) if n <= 0)
            raise MliteError(
                f"PackedBatch.seq_lens: entry {bad} is {self._lens[bad]}; every sequence needs at "
                "least one token (drop empty sequences)"
            )
        if sum(self._lens) != T:
            raise MliteError(
                f"PackedBatch.seq_lens: lengths sum to {sum(self._lens)} but input_ids has {T} tokens; "
                "seq_lens must cover the token stream exactly"
            )
        if ids.device.type == "cpu":
            if int(ids.min()) < 0:
                raise MliteError("PackedBatch.input_ids: negative token id; ids must be in [0, vocab_size)")
            if bool(((labels < 0) & (labels != IGNORE_INDEX)).any()):
                raise MliteError(
                    f"PackedBatch.labels: negative label other than {IGNORE_INDEX}; use "
                    f"{IGNORE_INDEX} for positions without loss"
                )

    # ------------------------------------------------------------------ views
    @property
    def num_tokens(self) -> int:
        """T, the number of packed tokens."""
        return self.input_ids.numel()

    @property
    def num_sequences(self) -> int:
        """N, the number of packed sequences."""
        return len(self._lens)

    @property
    def lengths(self) -> tuple[int, ...]:
        """Sequence lengths as Python ints (no device sync)."""
        return self._lens

    @property
    def max_seqlen(self) -> int:
        """Length of the longest sequence."""
        return max(self._lens)

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    @property
    def cu_seqlens(self) -> torch.Tensor:
        """``int32[N+1]`` cumulative sequence lengths (0, len0, len0+len1, ..., T), on the batch's device."""
        if self._cu is None or self._cu.device != self.input_ids.device:
            cu = [0]
            for n in self._lens:
                cu.append(cu[-1] + n)
            self._cu = torch.tensor(cu, dtype=torch.int32).to(self.input_ids.device)
        return self._cu

    def positions(self) -> torch.Tensor:
        """``position_ids`` if given, else 0..len-1 restarting at every sequence (``LongTensor[T]``)."""
        if self.position_ids is not None:
            return self.position_ids
        dev = self.input_ids.device
        starts = torch.repeat_interleave(
            self.cu_seqlens[:-1].long(), self.seq_lens.to(dev), output_size=self.num_tokens
        )
        return torch.arange(self.num_tokens, device=dev) - starts

    def targets(self) -> torch.Tensor:
        """Labels with ``loss_mask`` folded in: -100 wherever no loss is taken."""
        if self.loss_mask is None:
            return self.labels
        return self.labels.masked_fill(~self.loss_mask, IGNORE_INDEX)

    def loss_index(self) -> torch.Tensor:
        """``long[n]``: positions that contribute to the loss. Computed on CPU before :meth:`to` moves the batch,
        so a model on GPU gets it without a device sync."""
        if self._loss_idx is None:
            self._loss_idx = (self.targets() != IGNORE_INDEX).nonzero().squeeze(1)
            self._n_loss = int(self._loss_idx.numel())
        return self._loss_idx

    def num_loss_tokens(self) -> int:
        """Number of positions that contribute to the loss (no sync once :meth:`loss_index` is known)."""
        if self._n_loss is None:
            self._n_loss = int(self.loss_index().numel())
        return self._n_loss

    # ------------------------------------------------------------------ transforms
    def to(self, device, non_blocking: bool = False) -> PackedBatch:
        """The same batch on ``device`` (no re-validation, no sync)."""
        device = torch.device(device)
        if self.input_ids.device.type == "cpu":
            self.loss_index()  # on the host, before moving: the model then needs no sync for it
        out = object.__new__(PackedBatch)
        for name in ("input_ids", "labels", "seq_lens", "loss_mask", "position_ids", "_loss_idx"):
            t = getattr(self, name)
            setattr(out, name, None if t is None else t.to(device, non_blocking=non_blocking))
        out._lens = self._lens
        out._n_loss = self._n_loss
        out._cu = None if self._cu is None else self._cu.to(device, non_blocking=non_blocking)
        return out

    def split(self, num_microbatches: int) -> list[PackedBatch]:
        """Split into ``num_microbatches`` batches of whole sequences, contiguous and balanced by token count."""
        m, n = int(num_microbatches), self.num_sequences
        if m < 1:
            raise MliteError(f"num_microbatches: {num_microbatches} is not a positive integer")
        if m > n:
            raise MliteError(
                f"num_microbatches: cannot split {n} sequences into {m} micro-batches (whole sequences "
                f"only); use at most {n} micro-batches or pack more sequences"
            )
        cu = [0]
        for x in self._lens:
            cu.append(cu[-1] + x)
        total, bounds = cu[-1], [0]
        for i in range(1, m):
            target = total * i / m
            j = bisect.bisect_left(cu, target)
            if j > 0 and (j > n or abs(cu[j - 1] - target) <= abs(cu[j] - target)):
                j -= 1
            j = min(max(j, bounds[-1] + 1), n - (m - i))
            bounds.append(j)
        bounds.append(n)
        return [self._slice(bounds[i], bounds[i + 1], cu) for i in range(m)]

    def _slice(self, s0: int, s1: int, cu: list[int]) -> PackedBatch:
        t0, t1 = cu[s0], cu[s1]
        out = object.__new__(PackedBatch)
        out.input_ids = self.input_ids[t0:t1]
        out.labels = self.labels[t0:t1]
        out.seq_lens = self.seq_lens[s0:s1]
        out.loss_mask = None if self.loss_mask is None else self.loss_mask[t0:t1]
        out.position_ids = None if self.position_ids is None else self.position_ids[t0:t1]
        out._lens = self._lens[s0:s1]
        out._cu = None
        out._loss_idx = out._n_loss = None
        return out

    @classmethod
    def concat(cls, batches: Sequence[PackedBatch]) -> PackedBatch:
        """Pack several batches into one (sequence order kept)."""
        if not batches:
            raise MliteError("PackedBatch.concat: no batches given")

        def cat(name):
            ts = [getattr(b, name) for b in batches]
            if all(t is None for t in ts):
                return None
            if name == "loss_mask":
                ts = [torch.ones_like(b.input_ids, dtype=torch.bool) if t is None else t for b, t in zip(batches, ts)]
            elif name == "position_ids":
                ts = [b.positions() if t is None else t for b, t in zip(batches, ts)]
            return torch.cat(ts)

        return cls(cat("input_ids"), cat("labels"), cat("seq_lens"), cat("loss_mask"), cat("position_ids"))

    @classmethod
    def from_sequences(
        cls, sequences: Sequence[Sequence[int]], target_masks: Sequence[Sequence[bool]] | None = None
    ) -> PackedBatch:
        """Pack token lists, shifting labels within each sequence.

        ``target_masks[i][j]`` says whether token ``j`` of sequence ``i`` is learned (e.g. assistant tokens): the
        label of position ``j-1`` is token ``j`` when it is a target, else -100. Without masks every next token is
        a target. The last position of each sequence always gets -100.
        """
        if not sequences:
            raise MliteError("PackedBatch.from_sequences: no sequences given")
        ids, labels = [], []
        for i, seq in enumerate(sequences):
            seq = [int(t) for t in seq]
            if not seq:
                raise MliteError(f"PackedBatch.from_sequences: sequence {i} is empty")
            mask = None if target_masks is None else list(target_masks[i])
            if mask is not None and len(mask) != len(seq):
                raise MliteError(
                    f"PackedBatch.from_sequences: target_masks[{i}] has {len(mask)} entries for {len(seq)} tokens"
                )
            nxt = seq[1:]
            if mask is not None:
                nxt = [t if m else IGNORE_INDEX for t, m in zip(nxt, mask[1:])]
            ids.extend(seq)
            labels.extend(nxt + [IGNORE_INDEX])
        lens = [len(s) for s in sequences]
        return cls(
            torch.tensor(ids, dtype=torch.long),
            torch.tensor(labels, dtype=torch.long),
            torch.tensor(lens, dtype=torch.int32),
        )

    def __repr__(self) -> str:
        return (
            f"PackedBatch(num_tokens={self.num_tokens}, num_sequences={self.num_sequences}, "
            f"max_seqlen={self.max_seqlen}, device={self.device})"
        )
