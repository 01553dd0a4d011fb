"""Write the tiny SFT dataset and the 512-token tokenizer the lite runtime trains on.

Run from the repository root: ``.venv/bin/python data/make_dataset.py`` (offline, about a second). Writes

* ``data/datasets/tiny_sft/train.parquet`` and ``val.parquet``: verl's SFT format, a ``messages`` column of
  ``{role, content}`` lists (plus ``data_source`` naming the task). Synthetic tasks a tiny model learns on a CPU:
  reverse a list of letters, sort digits, add two numbers, repeat words, pick the largest number. Some
  conversations have a system message, some have two turns.
* ``data/tokenizer/tokenizer.json``: a byte-level BPE (``tokenizers``) trained on the train split to exactly 512
  tokens: 4 special tokens (``<|pad|>`` 0, ``<|im_start|>`` 1, ``<|im_end|>`` 2, ``<|endoftext|>`` 3; the tiny
  configs' ``bos_token_id`` 1 and ``eos_token_id`` 2), the 256 byte symbols, and 252 merges.
  ``tokenizer_config.json`` beside it carries the ChatML chat template, so ``transformers`` can load the folder too.

Same seed, same files (the generator is ``random.Random(seed)``; BPE training is deterministic).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SPECIAL_TOKENS = ("<|pad|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>")
VOCAB_SIZE = 512
SYSTEM_PROMPTS = ("You are a helpful assistant.", "Answer with the result only.", "Be brief.")
WORDS = (
    "red",
    "blue",
    "green",
    "cat",
    "dog",
    "sun",
    "moon",
    "tree",
    "fish",
    "bird",
    "rock",
    "milk",
    "star",
    "rain",
    "leaf",
    "ship",
)
LETTERS = "abcdefghijklmnopqrstuvwxyz"
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _task(rng: random.Random) -> tuple[str, str, str]:
    """(task name, user prompt, answer)."""
    kind = rng.choice(("reverse", "sort", "add", "repeat", "max"))
    if kind == "reverse":
        items = [rng.choice(LETTERS) for _ in range(rng.randint(3, 7))]
        verb = rng.choice(("Reverse", "Reverse the letters", "Write backwards"))
        return kind, f"{verb}: {' '.join(items)}", " ".join(reversed(items))
    if kind == "sort":
        items = [rng.randint(0, 9) for _ in range(rng.randint(3, 7))]
        verb = rng.choice(("Sort", "Sort ascending", "Order"))
        return kind, f"{verb}: {' '.join(map(str, items))}", " ".join(map(str, sorted(items)))
    if kind == "add":
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        q = rng.choice((f"Add: {a} + {b}", f"What is {a} + {b}?", f"Sum {a} and {b}"))
        return kind, q, str(a + b)
    if kind == "repeat":
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 5))]
        verb = rng.choice(("Repeat", "Copy", "Say again"))
        return kind, f"{verb}: {' '.join(words)}", " ".join(words)
    items = rng.sample(range(100), rng.randint(3, 6))
    q = rng.choice((f"Largest of {' '.join(map(str, items))}?", f"Max: {' '.join(map(str, items))}"))
    return kind, q, str(max(items))


def conversation(rng: random.Random) -> dict:
    """One row: ``messages`` (system optional, one or two user/assistant turns) and ``data_source``."""
    messages = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    kinds = []
    for _ in range(2 if rng.random() < 0.2 else 1):
        kind, prompt, answer = _task(rng)
        kinds.append(kind)
        messages += [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
    return {"messages": messages, "data_source": "tiny_sft/" + "+".join(kinds)}


def make_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [conversation(rng) for _ in range(n)]


def write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    msg = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    table = pa.table(
        {
            "messages": pa.array([r["messages"] for r in rows], type=msg),
            "data_source": pa.array([r["data_source"] for r in rows], type=pa.string()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")


def train_tokenizer(rows: list[dict]):
    """Byte-level BPE with exactly :data:`VOCAB_SIZE` tokens, special tokens first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def corpus():
        for r in rows:
            for m in r["messages"]:
                yield f"{m['role']}\n"
                yield m["content"]

    tok.train_from_iterator(corpus(), trainer=trainer)
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise SystemExit(f"tokenizer has {tok.get_vocab_size()} tokens, expected {VOCAB_SIZE}: add more text")
    for i, s in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


def write_tokenizer(tok, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|pad|>",
        "unk_token": None,
        "additional_special_tokens": ["<|endoftext|>"],
        "model_max_length": 2048,
        "chat_template": CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT, help="the data/ folder to write into (default: this one)")
    ap.add_argument("--train", type=int, default=4000, help="train conversations")
    ap.add_argument("--val", type=int, default=256, help="validation conversations")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    train, val = make_rows(args.train, args.seed), make_rows(args.val, args.seed + 1)
    write_parquet(train, args.out / "datasets" / "tiny_sft" / "train.parquet")
    write_parquet(val, args.out / "datasets" / "tiny_sft" / "val.parquet")
    write_tokenizer(train_tokenizer(train), args.out / "tokenizer")
    print(
        f"wrote {len(train)} train / {len(val)} val conversations and a {VOCAB_SIZE}-token tokenizer under {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
