"""Shipped tokenizer and tiny SFT dataset, ChatML rendering (transformers' chat template as the oracle), packing
into per-rank micro-batches."""

from __future__ import annotations

import json
import sys

import pyarrow.parquet as pq
import pytest

from mlite.errors import MliteError
from mlite.models import load_config
from mlite.paths import data_dir
from mlite.runtime.batch import IGNORE_INDEX
from mlite.runtime.data import (
    dataset_path,
    load_sft_dataset,
    load_tokenizer,
    pack_samples,
    sft_batches,
    sft_iterator,
    tokenize_dataset,
)

DATA = data_dir()


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def convs():
    return load_sft_dataset("tiny_sft", "train")


def test_shipped_files_are_small_and_in_verl_format():
    files = (DATA / "tokenizer" / "tokenizer.json", dataset_path("tiny_sft", "train"), dataset_path("tiny_sft", "val"))
    for p in files:
        assert p.is_file() and p.stat().st_size < 1_000_000, p
    table = pq.read_table(dataset_path("tiny_sft", "train"))
    assert table.num_rows >= 2000 and "messages" in table.column_names
    rows = table.column("messages").to_pylist()
    for conv in rows[:200]:
        assert [m["role"] for m in conv if m["role"] != "system"][::2] == ["user"] * (len(conv) // 2)
        assert conv[-1]["role"] == "assistant" and all(set(m) == {"role", "content"} for m in conv)
    assert len(load_sft_dataset("tiny_sft", "val")) >= 100


def test_tokenizer_fits_tiny_configs(tok, convs):
    assert tok.vocab_size == 512
    for name in ("tiny-dense", "tiny-moe", "tiny-hybrid"):
        cfg = load_config(name)[1]
        assert cfg["vocab_size"] == tok.vocab_size
        assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (tok.im_start_id, tok.im_end_id)
    assert tok.pad_id == 0
    for conv in convs[:300]:  # byte-level BPE: every text round-trips
        for m in conv:
            assert tok.decode(tok.encode(m["content"])) == m["content"]


def test_render_matches_transformers_chat_template(tok, convs):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(DATA / "tokenizer"))
    assert (hf.bos_token_id, hf.eos_token_id, hf.pad_token_id) == (tok.im_start_id, tok.im_end_id, tok.pad_id)
    for conv in convs[:50]:
        ids = hf.apply_chat_template(conv, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        assert list(tok.render(conv).input_ids) == list(ids)
        assert tok.encode(tok.chat_text(conv)) == list(ids)


def test_targets_are_exactly_the_assistant_replies(tok, convs):
    for conv in convs[:200]:
        s = tok.render(conv)
        learned = tok.decode([t for t, m in zip(s.input_ids, s.target_mask) if m])
        assert learned == "".join(m["content"] + "<|im_end|>" for m in conv if m["role"] == "assistant")


def test_packing_respects_budget_and_shifts_labels(tok, convs):
    samples = tokenize_dataset(convs[:100], tok)
    batches = pack_samples(samples, 300)
    assert sum(b.num_sequences for b in batches) == 100
    assert all(b.num_tokens <= 300 for b in batches)
    b = batches[0]
    first = samples[0]
    n = len(first.input_ids)
    for t in range(n - 1):
        want = first.input_ids[t + 1] if first.target_mask[t + 1] else IGNORE_INDEX
        assert int(b.labels[t]) == want
    assert int(b.labels[n - 1]) == IGNORE_INDEX


def test_rank_iterators_are_deterministic_and_disjoint(tok, convs):
    samples = tokenize_dataset(convs[:400], tok)
    key = {s.input_ids: i for i, s in enumerate(samples)}

    def first_steps(rank, world, seed, steps=3, micro=2):
        it = sft_batches(samples, tokens_per_microbatch=256, num_microbatches=micro, rank=rank, world=world, seed=seed)
        out = []
        for _ in range(steps):
            step = next(it)
            assert len(step) == micro
            out.append([b.input_ids.tolist() for b in step])
        return out

    assert first_steps(0, 2, seed=7) == first_steps(0, 2, seed=7)
    assert first_steps(0, 2, seed=7) != first_steps(0, 2, seed=8)

    def seqs(rank):  # sample indices this rank saw in its first steps
        it = sft_batches(samples, tokens_per_microbatch=256, rank=rank, world=2, seed=7)
        seen = set()
        for _ in range(5):
            (b,) = next(it)
            ids, s = b.input_ids.tolist(), 0
            for n in b.lengths:
                seen.add(key[tuple(ids[s : s + n])])
                s += n
        return seen

    assert not seqs(0) & seqs(1)


def test_iterator_rolls_over_epochs():
    it = sft_iterator(split="val", tokens_per_microbatch=2048, seed=0)
    total = sum(next(it)[0].num_sequences for _ in range(30))
    assert total > len(load_sft_dataset("tiny_sft", "val"))  # more than one epoch, never stops


def test_bad_inputs_are_one_line(tok, tmp_path):
    with pytest.raises(MliteError, match="not found"):
        load_sft_dataset("no_such_dataset")
    bad = tmp_path / "bad.parquet"
    import pyarrow as pa

    pq.write_table(pa.table({"prompt": ["x"]}), bad)
    with pytest.raises(MliteError, match="messages"):
        load_sft_dataset(bad)
    with pytest.raises(MliteError, match=r"messages\[0\].role"):
        tok.render([{"role": "robot", "content": "hi"}])
    with pytest.raises(MliteError, match="tokenizer"):
        load_tokenizer(tmp_path / "missing.json")
    with pytest.raises(MliteError, match="rank"):
        next(
            sft_batches(
                tokenize_dataset(load_sft_dataset(split="val")[:4], tok), tokens_per_microbatch=64, rank=2, world=2
            )
        )


def test_make_dataset_reproduces_shipped_files(tmp_path):
    """The shipped files are exactly what ``data/make_dataset.py`` writes (same seed, same output)."""
    sys.path.insert(0, str(DATA))
    try:
        import make_dataset
    finally:
        sys.path.remove(str(DATA))
    assert make_dataset.main(["--out", str(tmp_path)]) == 0
    for split in ("train", "val"):
        new = pq.read_table(tmp_path / "datasets" / "tiny_sft" / f"{split}.parquet")
        assert new.equals(pq.read_table(dataset_path("tiny_sft", split))), split
    new_vocab = json.loads((tmp_path / "tokenizer" / "tokenizer.json").read_text())["model"]
    old_vocab = json.loads((DATA / "tokenizer" / "tokenizer.json").read_text())["model"]
    assert new_vocab == old_vocab
