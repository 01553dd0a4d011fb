"""Fuzzing the readers: truncated lines, random bytes, invalid UTF-8, CRLF, gzip and a million lines never
crash them and never lose a valid line. The oracle is the generator's truth (what was written)."""

from __future__ import annotations

import gzip
import math
import random

import pytest

from mlite.logs import iter_records, read_log, resolve_inputs
from mlite.synth import GenSpec, generate


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        x == y or (math.isnan(x) and math.isnan(y)) for x, y in ((a[k], b[k]) for k in a)
    )


def _assert_subsequence(truth, parsed) -> None:
    """Every truth record appears among the parsed records, in order, with identical values."""
    it = iter(parsed)
    for step, values in truth:
        for rec in it:
            if rec.step == step and _same(rec.values, values):
                break
        else:
            raise AssertionError(f"record of step {step} lost")


def _records(path):
    [src] = resolve_inputs([path])
    return list(iter_records(src))


def _fuzz_lines(lines: list[bytes], rng: random.Random, rate: float = 0.3) -> tuple[list[bytes], int]:
    """Insert junk between the lines: truncated copies of metric lines, random bytes, invalid UTF-8."""
    out, bad = [], 0
    for ln in lines:
        out.append(ln)
        if rng.random() >= rate:
            continue
        kind = rng.randrange(4)
        at = ln.find(b"step:")
        if kind == 0 and 0 <= at < len(ln) - 5:  # a writer killed mid-line (not prose ending "step by step:")
            cut = rng.randrange(at + 5, len(ln))
            out.append(ln[:cut])
            bad += 1
        elif kind == 1:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randrange(8, 200))).replace(b"\n", b"\x00"))
        elif kind == 2:
            out.append(b"(WorkerDict pid=7) caf\xe9 \xff\xfe\xc3( invalid utf-8 \xed\xa0\x80 surrogate")
        else:
            out.append(b"\x1b[31m" + bytes(rng.randrange(32, 127) for _ in range(rng.randrange(1, 80))) + b"\x1b[0m ")
    return out, bad


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_verl_console_survives_junk(tmp_path, seed):
    spec = GenSpec(steps=40, seed=seed, precision=("repr", "3f", "np")[seed % 3], noise=0.5)
    truth = generate(spec, tmp_path / "clean.log")
    rng = random.Random(seed)
    lines, bad = _fuzz_lines(truth.path.read_bytes().split(b"\n"), rng)
    fuzzed = tmp_path / "fuzzed.log"
    fuzzed.write_bytes(b"\n".join(lines))
    _assert_subsequence(truth.records, _records(fuzzed))
    run = read_log(fuzzed)
    assert run.skipped_lines <= bad
    # the same file with CRLF line ends and gzip-compressed
    crlf = tmp_path / "fuzzed_crlf.log.gz"
    crlf.write_bytes(gzip.compress(b"\r\n".join(lines)))
    _assert_subsequence(truth.records, _records(crlf))


def test_invalid_utf8_inside_metric_lines(tmp_path):
    p = tmp_path / "bad_utf8.log"
    p.write_bytes(
        b"\xff\xfe(TaskRunner pid=1) step:1 - a/x:1.5 - b\xe9:2.0\n"
        b"\xc3(TaskRunner pid=1) step:2 - a/x:np.float64(2.5) - b\xe9:nan\n"
    )
    run = read_log(p)
    assert run.series("a/x").tolist() == [1.5, 2.5]
    key = next(m for m in run.metrics if m.startswith("b"))
    assert "\ufffd" in key and run.wide.loc[1, key] == 2.0 and math.isnan(run.wide.loc[2, key])
    assert {e.kind for e in run.events} == {"nan"}


def test_random_binary_file_does_not_crash(tmp_path):
    rng = random.Random(0)
    p = tmp_path / "random.bin.log"
    p.write_bytes(bytes(rng.randrange(256) for _ in range(300_000)))
    run = read_log(p)
    assert run.num_steps == 0 and run.events[0].kind == "no_metrics"


def test_truncated_gzip_keeps_what_was_read(tmp_path):
    truth = generate(GenSpec(steps=30, seed=4, noise=0), tmp_path / "a.log")
    whole = gzip.compress(truth.path.read_bytes())
    p = tmp_path / "cut.log.gz"
    p.write_bytes(whole[: len(whole) * 2 // 3])
    run = read_log(p)
    assert 0 < run.num_steps < 30 and run.notes and "gzip" in run.notes[0]
    _assert_subsequence(truth.records[: run.num_steps - 1], _records(p))


def test_megatron_and_jsonl_survive_junk(tmp_path):
    rng = random.Random(5)
    for spec, name in (
        (GenSpec(format="megatron", steps=30, seed=5, val_every=5), "m.log"),
        (GenSpec(format="verl_jsonl", steps=30, seed=6, nan_from=20), "j.jsonl"),
    ):
        truth = generate(spec, tmp_path / name)
        lines, _ = _fuzz_lines(truth.path.read_bytes().split(b"\n"), rng, rate=0.5)
        fuzzed = tmp_path / ("fz_" + name)
        fuzzed.write_bytes(b"\r\n".join(lines))
        recs = _records(fuzzed)
        if spec.format == "megatron":  # validation values share the step of their iteration line
            merged: dict = {}
            for st, vals in truth.records:
                merged.setdefault(st, {}).update(vals)
            got: dict = {}
            for r in recs:
                got.setdefault(r.step, {}).update(r.values)
            assert all(_same(got[st], vals) or vals.items() <= got[st].items() for st, vals in merged.items())
        else:
            _assert_subsequence(truth.records, recs)


def test_a_million_lines(tmp_path):
    """1,000,000 lines of Ray chatter with a metric line every 100: every record found, exact values."""
    rng = random.Random(7)
    noise = [
        b"(WorkerDict pid=1609, ip=10.0.0.2) INFO metrics.py:455] Avg throughput: 12.5 tokens/s",
        b"\x1b[36m(TaskRunner pid=14640)\x1b[0m [response] Let's do it step by step:",
        b"Training Progress:  23%|##3       | 101/435 [01:20<53:37,  9.84s/it]\r",
    ]
    lines, truth = [], []
    for i in range(10_000):
        vals = {"actor/pg_loss": rng.uniform(-1, 1), "actor/grad_norm": rng.uniform(0.5, 3), "actor/ppo_kl": 1e-3}
        lines.append(
            b"(TaskRunner pid=1) step:%d - " % (i + 1) + " - ".join(f"{k}:{v!r}" for k, v in vals.items()).encode()
        )
        truth.append((i + 1, vals))
        lines.extend(noise[0 if j % 33 else 1] if j % 2 else noise[2] for j in range(99))
    assert len(lines) == 1_000_000
    p = tmp_path / "million.log"
    p.write_bytes(b"\n".join(lines) + b"\n")
    run = read_log(p)
    assert run.num_lines == 1_000_000 and run.num_steps == 10_000 and run.skipped_lines == 0
    w = run.wide
    for step, vals in truth[::997]:
        assert w.loc[step, "actor/pg_loss"] == vals["actor/pg_loss"]
        assert w.loc[step, "actor/grad_norm"] == vals["actor/grad_norm"]
    assert len(run.tidy) == 30_000
