"""SFT data for the lite runtime: the shipped tokenizer, verl-format parquet datasets, ChatML rendering with the
loss on assistant tokens, and packing into :class:`~mlite.runtime.batch.PackedBatch`es per DP rank.

Everything is offline: the tokenizer is ``data/tokenizer/tokenizer.json`` (``tokenizers``), datasets are parquet
files read with pyarrow (``data/datasets/<name>/<split>.parquet`` or any path with a ``messages`` column of
``{role, content}`` lists, as verl's SFT trainer reads them).

Rendering (ChatML, as Qwen / verl)::

    <|im_start|>{role}\\n{content}<|im_end|>\\n      (per message)

Targets: the content tokens of every assistant message and its closing ``<|im_end|>``; headers, the newline after
``<|im_end|>``, system and user messages are context only.

Batches: :func:`sft_batches` shuffles the samples with ``seed + epoch`` (same on every rank), gives rank ``r`` of
``world`` the samples ``r, r + world, ...``, and packs them greedily in order into micro-batches of at most
``tokens_per_microbatch`` tokens; every step yields ``num_microbatches`` batches on every rank (epochs roll over
forever), so all ranks run the same number of collectives.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import MliteError
from ..paths import dataset_file, tokenizer_file
from .batch import PackedBatch

DEFAULT_DATASET = "tiny_sft"
"""Dataset shipped in ``data/datasets/``."""
ROLES = ("system", "user", "assistant", "tool")
"""Roles a message may have."""


def tokenizer_path() -> Path:
    return tokenizer_file()


@dataclass(frozen=True)
class Sample:
    """One tokenised conversation."""

    input_ids: tuple[int, ...]
    """ChatML token ids."""
    target_mask: tuple[bool, ...]
    """True for tokens the model learns to produce (assistant content + its ``<|im_end|>``)."""


class ChatTokenizer:
    """A ``tokenizers.Tokenizer`` with ChatML rendering."""

    def __init__(self, path: str | Path | None = None):
        from tokenizers import Tokenizer

        p = Path(path) if path is not None else tokenizer_path()
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise MliteError(
                f"tokenizer: {p} not found; run '.venv/bin/python data/make_dataset.py' or pass the "
                "path of a tokenizer.json"
            )
        self.path = p
        self.tok = Tokenizer.from_file(str(p))
        ids = {s: self.tok.token_to_id(s) for s in ("<|im_start|>", "<|im_end|>", "<|pad|>")}
        missing = [s for s, i in ids.items() if i is None]
        if missing:
            raise MliteError(f"tokenizer: {p} lacks the special tokens {missing} the ChatML template needs")
        self.im_start_id, self.im_end_id, self.pad_id = ids["<|im_start|>"], ids["<|im_end|>"], ids["<|pad|>"]
        self.eos_id = self.im_end_id
        self._nl = self.encode("\n")
        self._headers: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def _header(self, role: str) -> list[int]:
        if role not in self._headers:
            self._headers[role] = [self.im_start_id] + self.encode(f"{role}\n")
        return self._headers[role]

    def render(self, messages: Sequence[dict], *, add_generation_prompt: bool = False) -> Sample:
        """Token ids and target mask of a conversation (see the module docstring)."""
        ids: list[int] = []
        mask: list[bool] = []
        for i, m in enumerate(messages):
            try:
                role, content = m["role"], m["content"]
            except (KeyError, TypeError):
                raise MliteError(f"messages[{i}]: expected a dict with 'role' and 'content', got {m!r:.80}") from None
            if role not in ROLES:
                raise MliteError(f"messages[{i}].role: '{role}' is not one of {', '.join(ROLES)}")
            head = self._header(role)
            body = self.encode(str(content)) + [self.im_end_id]
            learn = role == "assistant"
            ids += head + body + self._nl
            mask += [False] * len(head) + [learn] * len(body) + [False] * len(self._nl)
        if add_generation_prompt:
            head = self._header("assistant")
            ids += head
            mask += [False] * len(head)
        return Sample(tuple(ids), tuple(mask))

    def chat_text(self, messages: Sequence[dict]) -> str:
        """The rendered conversation as text."""
        return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def load_tokenizer(path: str | Path | None = None) -> ChatTokenizer:
    """The shipped 512-token tokenizer (or the ``tokenizer.json`` at ``path``)."""
    return ChatTokenizer(path)


def dataset_path(name_or_path: str | Path = DEFAULT_DATASET, split: str = "train") -> Path:
    """``data/datasets/<name>/<split>.parquet`` for a dataset name, or the given parquet path (or folder)."""
    return dataset_file(name_or_path, split)


def load_sft_dataset(
    name_or_path: str | Path = DEFAULT_DATASET,
    split: str = "train",
    *,
    messages_key: str = "messages",
    limit: int | None = None,
) -> list[list[dict]]:
    """Conversations of a verl-format SFT parquet file (a ``messages`` column of ``{role, content}`` lists)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = dataset_path(name_or_path, split)
    if not p.is_file():
        raise MliteError(f"dataset: {p} not found; give a dataset name under data/datasets/ or a .parquet path")
    try:
        table = pq.read_table(p, columns=[messages_key])
    except (pa.ArrowException, OSError) as e:  # not parquet, unreadable, or no such column (ArrowInvalid)
        raise MliteError(
            f"dataset: cannot read column '{messages_key}' of {p} ({str(e).splitlines()[0][:160]})"
        ) from None
    rows = table.column(messages_key).to_pylist()
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise MliteError(f"dataset: {p} has no rows")
    return rows


def tokenize_dataset(
    conversations: Sequence[Sequence[dict]], tokenizer: ChatTokenizer, *, max_length: int | None = None
) -> list[Sample]:
    """Render every conversation; ``max_length`` truncates (from the end) longer ones."""
    out = []
    for conv in conversations:
        s = tokenizer.render(conv)
        if max_length is not None and len(s.input_ids) > max_length:
            s = Sample(s.input_ids[:max_length], s.target_mask[:max_length])
        out.append(s)
    return out


def pack(samples: Sequence[Sample]) -> PackedBatch:
    """Pack samples into one :class:`PackedBatch` (labels shifted within each sample)."""
    return PackedBatch.from_sequences([s.input_ids for s in samples], [s.target_mask for s in samples])


def pack_samples(samples: Sequence[Sample], tokens_per_microbatch: int) -> list[PackedBatch]:
    """Greedy in-order packing into batches of at most ``tokens_per_microbatch`` tokens (longer samples are cut)."""
    if tokens_per_microbatch < 2:
        raise MliteError(f"tokens_per_microbatch: {tokens_per_microbatch} is too small; use at least a few hundred")
    batches: list[PackedBatch] = []
    cur: list[Sample] = []
    used = 0
    for s in samples:
        if len(s.input_ids) > tokens_per_microbatch:
            s = Sample(s.input_ids[:tokens_per_microbatch], s.target_mask[:tokens_per_microbatch])
        if cur and used + len(s.input_ids) > tokens_per_microbatch:
            batches.append(pack(cur))
            cur, used = [], 0
        cur.append(s)
        used += len(s.input_ids)
    if cur:
        batches.append(pack(cur))
    return batches


def sft_batches(
    samples: Sequence[Sample],
    *,
    tokens_per_microbatch: int,
    num_microbatches: int = 1,
    rank: int = 0,
    world: int = 1,
    seed: int = 0,
) -> Iterator[list[PackedBatch]]:
    """Endless per-rank iterator: each item is one optimizer step's ``num_microbatches`` micro-batches."""
    if world < 1 or not 0 <= rank < world:
        raise MliteError(f"rank/world: rank {rank} is not in [0, {world})")
    if len(samples) < world:
        raise MliteError(f"dataset: {len(samples)} samples cannot feed {world} data-parallel ranks")
    if num_microbatches < 1:
        raise MliteError(f"num_microbatches: {num_microbatches} is not a positive integer")
    epoch, pending = 0, []
    while True:
        order = list(range(len(samples)))
        random.Random(seed * 100_003 + epoch).shuffle(order)
        mine = [samples[i] for i in order[rank::world]]
        for b in pack_samples(mine, tokens_per_microbatch):
            pending.append(b)
            if len(pending) == num_microbatches:
                yield pending
                pending = []
        epoch += 1


def sft_iterator(
    *,
    dataset: str | Path = DEFAULT_DATASET,
    split: str = "train",
    tokenizer: str | Path | None = None,
    tokens_per_microbatch: int = 1024,
    num_microbatches: int = 1,
    rank: int = 0,
    world: int = 1,
    seed: int = 0,
    max_length: int | None = None,
) -> Iterator[list[PackedBatch]]:
    """Load, tokenise and batch a dataset in one call (see :func:`sft_batches`)."""
    tok = load_tokenizer(tokenizer)
    samples = tokenize_dataset(load_sft_dataset(dataset, split), tok, max_length=max_length or tokens_per_microbatch)
    return sft_batches(
        samples,
        tokens_per_microbatch=tokens_per_microbatch,
        num_microbatches=num_microbatches,
        rank=rank,
        world=world,
        seed=seed,
    )
