"""The batch decoder of plain verl lines (mlite.logs.formats.fastverl) changes speed only: every record, value (bit for bit)
and line number equals what the general parser gives, for values float() reads in any spelling, and for lines that
must not take the fast path (they go back to the general parser)."""

from __future__ import annotations

import math
import random
import re
import struct

from mlite.logs import iter_records, resolve_inputs
from mlite.logs.formats import fastverl
from mlite.logs.formats.verl_console import parse_body
from mlite.logs.scan import reader as reader_mod


def test_the_batch_decoder_is_on():
    """msgspec is a core dependency: the batch decoder must be on (every test below runs it)."""
    assert fastverl.available()


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _tokens(rnd: random.Random, n: int) -> list[str]:
    """Numbers as loggers print them, plus the hard cases of decimal -> binary rounding."""
    out = []
    for _ in range(n):
        k = rnd.randint(1, 24)
        digits = "".join(rnd.choice("0123456789") for _ in range(k)).lstrip("0") or "0"
        r = rnd.random()
        if r < 0.3:
            p = rnd.randint(0, len(digits))
            t = (digits[:p] or "0") + "." + (digits[p:] or "0")
        elif r < 0.6:
            t = digits[0] + "." + (digits[1:] or "0") + rnd.choice("eE") + str(rnd.randint(-330, 310))
        elif r < 0.7:
            t = repr(rnd.uniform(-1, 1) * 10 ** rnd.randint(-310, 308))
        elif r < 0.8:
            x = rnd.uniform(1, 2) * 10 ** rnd.randint(-300, 300)
            # the decimal halfway between two neighbouring doubles: round-half-even decides
            from decimal import Decimal

            t = format((Decimal(x) + Decimal(math.nextafter(x, math.inf))) / 2, "e")
        else:
            t = digits
        if rnd.random() < 0.4 and not t.startswith("-"):
            t = "-" + t
        out.append(t)
    out += ["5e-324", "2.4703282292062328e-324", "1.7976931348623157e308", "1e-400", "-1e-400", "0", "-0", "-0.0"]
    out += ["-0e5", "18446744073709551616", "9007199254740993", "1e309", "NaN", "nan", "inf", "-inf", "Infinity"]
    return out


def test_decode_matches_float_bit_for_bit():
    tokens = _tokens(random.Random(7), 40000)
    bodies = [f"m/{i % 50}:{t}".encode() for i, t in enumerate(tokens)]
    for start in range(0, len(bodies), 500):  # a batch, then each line of a failed batch alone
        chunk = bodies[start : start + 500]
        got = fastverl.decode(chunk)
        rows = [got[i] if got else (fastverl.decode([b]) or [None])[0] for i, b in enumerate(chunk)]
        for body, d in zip(chunk, rows):
            keys, vals, bad = parse_body(body.decode())
            if d is None:
                continue  # the general parser reads it (nan, inf, -0, out of range...)
            assert not bad and list(d) == keys
            assert [_bits(v) for v in d.values()] == [_bits(v) for v in vals], body


TRICKY = [
    "a:1 - b:2.5 - c:-3e-7",
    "a:-0 - b:1",  # integer -0: float() keeps the sign, msgspec does not
    "a:-0.0 - b:-0e3",
    "a:nan - b:inf - c:-inf - d:NaN",
    "a:1 - a:2",  # a repeated key: both values are rows of the export
    ":1 - b:2",  # empty key
    "a:1 -  b:2",  # a space outside the separators
    "a: 1 - b:2",
    "a:1\t - b:\t2",
    "a\tb:1",
    'a":1 - b:2',
    "a\\u0041:1",  # a JSON escape must stay the text it is
    "a:1) - b:2",
    "a:np.float64(0.5) - b:np.int64(3)",
    "a:np.float64(0.5)) - b:2",
    "a:np.float32(0.5) - b:1",
    "k:np.inp.float64(t64(0.5) - j:1) - m:2",  # removing one repr must not make another
    "a:np.float64(1) - b:2)",
    "a:np.float64(1) - np.x:2",
    "a:np.float64(1e-06) - b:np.float64(nan)",
    "a:1},{ - b:2",
    "a:{} - b:[1]",
    "a:true - b:false - c:null",
    "a:1_000 - b:+1 - c:.5 - d:1. - e:0x10 - f:01",
    "a:1 [repeated 3x across cluster]",
    "a:1 - b:2 - ",
    "a:1 - b",
    "a:\x1b[0m1",
    "a:１ - b:2",  # a full-width digit: float() reads it
    "mé/trique:0.25 - b:1",
    "a:1e400 - b:123456789012345678901234567890",
    "a:1\x0c - b:2",
]


def _write_log(tmp_path, bodies: list[str], *, tail: str = "") -> str:
    lines = []
    for i, body in enumerate(bodies, 1):
        lines.append("\x1b[36m(TaskRunner pid=1)\x1b[0m some chatter about the rollout")
        lines.append(f"\x1b[36m(TaskRunner pid=1)\x1b[0m step:{i} - {body}")
    path = tmp_path / "verl_tricky_synthetic.log"
    path.write_bytes(("\n".join(lines) + "\n" + tail).encode("utf-8", "surrogateescape"))
    return str(path)


def _records(path: str, fast: bool, monkeypatch) -> list[tuple]:
    monkeypatch.setattr(reader_mod.fastverl, "available", lambda: fast)
    [src] = resolve_inputs([path])
    return [(r.step, r.line, [(k, _bits(v)) for k, v in r.values.items()]) for r in iter_records(src)]


def test_tricky_lines_same_records_as_general_parser(tmp_path, monkeypatch):
    path = _write_log(tmp_path, TRICKY * 3, tail="step:999 - a:1 - b:2")  # and a last line without newline
    slow = _records(path, False, monkeypatch)
    decoded = []
    real = fastverl.decode
    monkeypatch.setattr(fastverl, "decode", lambda bodies: decoded.append(real(bodies)) or decoded[-1])
    fast = _records(path, True, monkeypatch)
    assert sum(len(d) for d in decoded if d) >= 10  # the batch decoder did read most lines
    assert fast == slow
    assert len(slow) > 2 * len(TRICKY) and slow[-1][0] == 999


def test_each_tricky_line_alone_and_in_a_clean_batch(tmp_path, monkeypatch):
    clean = [f"x/{j}:{j / 7!r} - y:{j}" for j in range(40)]
    for body in TRICKY:
        path = _write_log(tmp_path, clean[:20] + [body] + clean[20:])
        assert _records(path, True, monkeypatch) == _records(path, False, monkeypatch), body


def test_export_and_check_unchanged(tmp_path, monkeypatch):
    from mlite.logs import export_csv, read_log

    path = _write_log(tmp_path, TRICKY + [f"loss:{1 / (j + 1)!r} - lr:1e-06" for j in range(30)])
    outs = []
    for fast in (False, True):
        monkeypatch.setattr(reader_mod.fastverl, "available", lambda f=fast: f)
        csv = tmp_path / f"out_{fast}.csv"
        export_csv([path], str(csv), progress=False)
        run = read_log(path)
        outs.append((csv.read_text(), run.tidy.to_csv(), [e.to_dict() for e in run.events], run.skipped_lines))
    assert outs[0] == outs[1]


def test_numpy_head_search_and_line_count_match_bytes_find(tmp_path, monkeypatch):
    """mlite.logs.formats.npscan (large blocks) finds the same heads and line numbers as the bytes.find loop, line numbers
    stay Python ints (the CLI's JSON), on a log with prose 'step:' and several heads or 'global_step:' per line."""
    from mlite.logs import read_log
    from mlite.logs.formats import npscan

    rnd = random.Random(3)
    lines = []
    for i in range(1, 3000):
        r = rnd.random()
        if r < 0.3:
            lines.append(f"(TaskRunner pid=9) step:{i} - loss:{rnd.random()!r} - training/global_step:{i} - x:1")
        elif r < 0.35:
            lines.append(f"step:{i} - a:1 step:{i} - b:2")
        elif r < 0.5:
            lines.append("Let's solve it step by step: first step:x then step:")
        elif r < 0.55:
            lines.append(f"global_step:{i} and then step:{i} - c:3")
        else:
            lines.append("(WorkerDict pid=3) " + "chatter " * rnd.randint(1, 40))
    path = tmp_path / "verl_heads_synthetic.log"
    path.write_text("\n".join(lines) + "\nstep:9999 - z:1")
    assert path.stat().st_size > npscan.MIN_BYTES
    calls = []
    real = npscan.verl_heads
    monkeypatch.setattr(npscan, "verl_heads", lambda *a: calls.append(1) or real(*a))
    out = []
    for limit in (1 << 16, 1 << 60):  # numpy on every block, then never
        monkeypatch.setattr(npscan, "MIN_BYTES", limit)
        recs = _records(str(path), True, monkeypatch)
        assert all(type(step) is int and type(line) is int for step, line, _ in recs)
        run = read_log(path)
        out.append((recs, [e.to_dict() for e in run.events], run.num_lines))
        assert bool(calls) == (limit == 1 << 16)
        calls.clear()
    assert out[0] == out[1] and len(out[0][0]) > 900


def test_numpy_unwrap_equals_bytes_unwrap():
    """The numpy unwrapping of numpy reprs (long texts) accepts only texts the bytes version accepts, with the same
    result: random texts from the pieces that matter (reprs, broken reprs, parentheses, separators, newlines), and
    a long block of real-looking lines (both accept it)."""
    pieces = [b"np.float64(", b"np.int64(", b")", b" - ", b"\n", b"a", b":", b"1", b"(", b"np.", b" ", b"-"]
    pieces += [b"np.float6", b"4(", b"n", b"p", b"np.int32("]
    rnd = random.Random(11)
    accepted = 0
    for _ in range(60000):
        text = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 9)))
        got = fastverl.unwrap_numpy_np(text)
        if got is not None:
            accepted += 1
            assert got == fastverl.unwrap_numpy_bytes(text), text
    assert accepted > 1000
    lines = [
        f"a/{j}:np.float64({rnd.random()!r}) - b:{j} - n:np.int64({j}) - c:np.float64(-{j}e-3)".encode()
        for j in range(3000)
    ]
    text = b"\n".join(lines)
    assert len(text) >= fastverl._NP_COUNT_BYTES
    assert fastverl.unwrap_numpy_np(text) == fastverl.unwrap_numpy_bytes(text) is not None


def test_numpy_separators_equal_replace():
    """The numpy separator rewrite (long texts) gives bytes.replace's text and the number of separators, or None
    only where separators overlap."""
    pieces = [b" - ", b" ", b"-", b"a", b"1", b":", b"\n", b"--", b"  ", b"0", b".", b"e", b"E", b":-0"]
    rnd = random.Random(5)
    int_zero = re.compile(rb":-0(?![.eE0-9])")
    for _ in range(30000):
        text = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 10)))
        got = fastverl.separators_np(text)
        want = text.replace(b" - ", b',\t"')
        if got is None:
            assert b" - - " in text or int_zero.search(text), text
        else:
            assert got == (want, want.count(b"\t")), text
            assert not int_zero.search(text), text


def test_long_batch_numpy_paths_match_general_parser():
    """A batch long enough for the numpy rewrites (plain and numpy-repr values, hard tokens) decodes in one go to
    exactly what the general parser reads on each line; one integer -0 anywhere sends it back."""
    from mlite.logs.formats.verl_console import unwrap_numpy

    rnd = random.Random(13)
    tokens = [t for t in _tokens(rnd, 6000) if fastverl.decode([f"x:{t}".encode()])]
    lines = []
    for j in range(0, len(tokens) - 6, 6):
        parts = [f"k/{i}:{t}" if i % 3 else f"k/{i}:np.float64({t})" for i, t in enumerate(tokens[j : j + 6])]
        lines.append(" - ".join(parts + [f"n:np.int64({j})"]).encode())
    assert sum(map(len, lines)) >= fastverl._NP_COUNT_BYTES
    for batch in (lines, [b.replace(b"np.float64(", b"").replace(b"np.int64(", b"").replace(b")", b"") for b in lines]):
        got = fastverl.decode(batch)
        assert got is not None
        for body, d in zip(batch, got):
            keys, vals, bad = parse_body(unwrap_numpy(body.decode()))
            assert not bad and list(d) == keys
            assert [_bits(v) for v in d.values()] == [_bits(v) for v in vals], body
        assert fastverl.decode(batch[:-1] + [b"a:1 - z:-0"]) is None


def test_tricky_lines_through_the_large_block_paths(tmp_path, monkeypatch):
    """With every block 'large' (npscan's head search and the verl-only block loop) and every batch 'long' (the
    numpy rewrites), the tricky lines still give the general parser's records."""
    from mlite.logs.formats import npscan

    clean = [f"x/{j}:np.float64({j / 7!r}) - y:{j}" for j in range(40)]
    path = _write_log(tmp_path, clean + TRICKY * 3 + clean, tail="step:999 - a:1 - b:2")
    slow = _records(path, False, monkeypatch)
    monkeypatch.setattr(npscan, "MIN_BYTES", 1)
    monkeypatch.setattr(fastverl, "_NP_COUNT_BYTES", 1)
    assert _records(path, True, monkeypatch) == slow
    for body in TRICKY:
        path = _write_log(tmp_path, clean[:20] + [body] + clean[20:])
        monkeypatch.setattr(npscan, "MIN_BYTES", 1 << 60)
        want = _records(path, False, monkeypatch)
        monkeypatch.setattr(npscan, "MIN_BYTES", 1)
        assert _records(path, True, monkeypatch) == want, body


def test_head_lines_second_head_flag_matches_find_loop():
    """npscan.verl_head_lines' flag for a later non-word 'step:' on a head's line is what fastverl.line_body's find
    loop decides, on random lines of heads, prose 'step:', word-glued 'global_step:' and block edges."""
    from mlite.logs.formats import npscan

    rnd = random.Random(17)
    parts = ["step:1 - ", "step:", "global_step:3", " step:x", "a:1 - ", "/step:2", "(x)step:4 - ", "\n", " ", "-"]
    for _ in range(3000):
        block = "".join(rnd.choice(parts) for _ in range(rnd.randint(1, 12))).encode()
        heads, ends, seconds = npscan.verl_head_lines(block, 0)
        want, pos = [], 0
        for line in block.split(b"\n"):  # the first 'step:<digit>' of each line
            m = re.search(rb"step:[0-9]", line)
            if m:
                want.append(pos + m.start())
            pos += len(line) + 1
        assert heads == want and len(ends) == len(seconds) == len(heads), block
        for i, le, second in zip(heads, ends, seconds):
            assert le == (block.find(b"\n", i) if b"\n" in block[i:] else len(block))
            ls = block.rfind(b"\n", 0, i) + 1
            assert fastverl.line_body(block, ls, le, i, second) == fastverl.line_body(block, ls, le, i), block
