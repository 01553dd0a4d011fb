"""PackedBatch: layout properties, shifting, splitting by whole sequences, one-line validation errors."""

from __future__ import annotations

import pytest
import torch

from mlite.errors import MliteError
from mlite.runtime.batch import IGNORE_INDEX, PackedBatch


def _batch(lens=(3, 5, 1, 4), with_mask=False):
    T = sum(lens)
    ids = torch.arange(10, 10 + T)
    labels = torch.arange(100, 100 + T)
    mask = (torch.arange(T) % 3 != 0) if with_mask else None
    return PackedBatch(ids, labels, torch.tensor(lens), loss_mask=mask)


def test_layout_properties():
    b = _batch()
    assert b.num_tokens == 13 and b.num_sequences == 4 and b.max_seqlen == 5
    assert b.cu_seqlens.dtype == torch.int32
    assert b.cu_seqlens.tolist() == [0, 3, 8, 9, 13]
    assert b.seq_lens.dtype == torch.int32
    assert b.positions().tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0, 0, 1, 2, 3]
    given = torch.arange(13) * 7
    assert PackedBatch(b.input_ids, b.labels, b.seq_lens, position_ids=given).positions() is given


def test_targets_fold_loss_mask():
    b = _batch(with_mask=True)
    t = b.targets()
    for i in range(b.num_tokens):
        assert t[i] == (b.labels[i] if b.loss_mask[i] else IGNORE_INDEX)
    assert b.num_loss_tokens() == int(b.loss_mask.sum())


def test_from_sequences_shifts_within_each_sequence():
    seqs = [[5, 6, 7], [8], [9, 10]]
    masks = [[False, True, True], [True], [False, False]]
    b = PackedBatch.from_sequences(seqs, masks)
    assert b.input_ids.tolist() == [5, 6, 7, 8, 9, 10]
    # label of t = next token of the same sequence if that token is a target; last token of a sequence: ignored
    assert b.labels.tolist() == [6, 7, -100, -100, -100, -100]
    b2 = PackedBatch.from_sequences(seqs)
    assert b2.labels.tolist() == [6, 7, -100, -100, 10, -100]
    assert b2.lengths == (3, 1, 2)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_split_whole_sequences_and_roundtrip(m):
    b = _batch(lens=(3, 5, 1, 4), with_mask=True)
    parts = b.split(m)
    assert len(parts) == m
    assert all(p.num_sequences >= 1 for p in parts)
    back = PackedBatch.concat(parts)
    for name in ("input_ids", "labels", "seq_lens", "loss_mask"):
        assert torch.equal(getattr(back, name), getattr(b, name)), name
    assert torch.equal(back.positions(), b.positions())
    for p in parts:  # every part is a valid batch on its own
        assert p.cu_seqlens[-1] == p.num_tokens
        assert p.positions().tolist() == [i for n in p.lengths for i in range(n)]


def test_split_balances_tokens():
    b = PackedBatch.from_sequences([[1] * n for n in (10, 10, 10, 10, 1, 1, 1, 1)])
    sizes = [p.num_tokens for p in b.split(2)]
    assert sum(sizes) == 44 and max(sizes) <= 24  # best contiguous split is 20 | 24


def test_to_keeps_content():
    b = _batch(with_mask=True)
    c = b.to("cpu")
    assert torch.equal(c.input_ids, b.input_ids) and c.lengths == b.lengths
    assert torch.equal(c.cu_seqlens, b.cu_seqlens)


def _one_line(exc: pytest.ExceptionInfo, *needles: str) -> None:
    msg = str(exc.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, (n, msg)


@pytest.mark.parametrize(
    "kwargs, needles",
    [
        (dict(labels=torch.zeros(12, dtype=torch.long)), ("labels", "(13,)")),
        (dict(seq_lens=torch.tensor([3, 5, 1])), ("seq_lens", "sum to 9", "13")),
        (dict(seq_lens=torch.tensor([3, 0, 6, 4])), ("seq_lens", "entry 1")),
        (dict(seq_lens=torch.tensor([], dtype=torch.int32)), ("seq_lens",)),
        (dict(input_ids=torch.zeros(1, 13, dtype=torch.long)), ("input_ids", "1-D")),
        (dict(input_ids=torch.zeros(13)), ("input_ids", "integer")),
        (dict(loss_mask=torch.ones(13)), ("loss_mask", "bool")),
        (dict(loss_mask=torch.ones(12, dtype=torch.bool)), ("loss_mask", "(13,)")),
        (dict(position_ids=torch.zeros(13, 2, dtype=torch.long)), ("position_ids",)),
        (dict(labels=torch.full((13,), -5)), ("labels", "-100")),
        (dict(input_ids=torch.full((13,), -1)), ("input_ids", "negative")),
    ],
)
def test_validation_errors_are_one_line(kwargs, needles):
    base = dict(input_ids=torch.arange(13), labels=torch.arange(13), seq_lens=torch.tensor([3, 5, 1, 4]))
    base.update(kwargs)
    with pytest.raises(MliteError) as e:
        PackedBatch(**base)
    _one_line(e, *needles)


def test_split_errors():
    b = _batch()
    with pytest.raises(MliteError) as e:
        b.split(5)
    _one_line(e, "num_microbatches", "4 sequences")
    with pytest.raises(MliteError) as e:
        b.split(0)
    _one_line(e, "num_microbatches")
