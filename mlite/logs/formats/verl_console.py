"""verl's console metric lines: ``step:N - key:value - key:value ...``.

verl's ``LocalLogger`` prints one line per step (``verl/utils/logger/aggregate_logger.py``): values as
``{v:.3f}`` before 2025-07-04, as ``pprint.pformat(v)`` since (full precision, ``nan``, ``inf``, and with
numpy >= 2 ``np.float64(0.1)`` / ``np.int64(5)``). In a Slurm ``.out`` the line may sit behind a Ray prefix
``(TaskRunner pid=..)`` and ANSI colours, follow a tqdm bar on the same line (``...7.03s/it]step:2 - ...``),
end with Ray's ``[repeated Nx across cluster]``, or be hard-wrapped by a terminal onto several physical lines.

:func:`parse_line` reads one (clean) line; :func:`join_continuation` decides whether the next physical line is
the wrapped rest of a metric line.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..input.blockio import blocks
from ..input.source import LogSource, open_binary
from ..input.text import clean, parse_value, parse_value_prefix, strip_ansi
from .registry import ConsoleReader, Head, LogFormat

NAME = "verl"
"""The format's name."""

MARKER = "step:"
"""Every metric line contains this; the readers search for it before any regex runs."""

HEAD_RE = re.compile(r"step:(\d+) - ")
"""The head of a verl metric line (:mod:`.fastverl` and :mod:`.npscan` search its bytes)."""
WORD_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/."
"""Characters that, before ``step:``, make it part of a word (``global_step:``), not a head."""
_WORD_BEFORE = frozenset(WORD_CHARS)


def _markers(text: str) -> list[re.Match]:
    """``step:N - `` heads in ``text`` that start a metric line (not ``global_step:5`` or prose)."""
    out = []
    i = text.find(MARKER)
    while i != -1:
        if i == 0 or text[i - 1] not in _WORD_BEFORE:
            m = HEAD_RE.match(text, i)
            if m:
                out.append(m)
        i = text.find(MARKER, i + 5)
    return out


def parse_body(body: str, *, lenient_tail: bool = True) -> tuple[list[str], list[float], bool]:
    """``key:value - key:value ...`` -> (keys, values, malformed).

    ``malformed`` is True when a segment was dropped (no ``key:value`` shape or not a number); the valid
    segments are returned anyway. With ``lenient_tail`` the last value may have junk glued after it (a tqdm
    bar written without a newline); its leading number is kept.
    """
    body = body.rstrip()
    if not body:
        return [], [], False
    if "np." in body:
        body = unwrap_numpy(body)
    nsep = body.count(" - ")
    if body.count(" ") == 2 * nsep:  # fast path: every space is a separator's, no ':' inside keys or values
        flat = body.replace(" - ", ":").split(":")
        if len(flat) == 2 * nsep + 2:
            keys = flat[0::2]
            if all(keys):
                try:
                    return keys, list(map(float, flat[1::2])), False
                except ValueError:
                    pass
    keys = []
    vals: list[float] = []
    bad = False
    parts = body.split(" - ")
    last = len(parts) - 1
    for i, seg in enumerate(parts):
        key, sep, tok = seg.partition(":")
        key = key.strip()
        if not sep or not key or " " in key:
            bad = True
            continue
        v = parse_value(tok)
        if v is None and i == last and lenient_tail:
            v = parse_value_prefix(tok)
        if v is None:
            bad = True
            continue
        keys.append(key)
        vals.append(v)
    return keys, vals, bad


_NP_RE = re.compile(r"\b(?:np|numpy)\.(?:float|int|uint)\w*\(([^()]*)\)")


def unwrap_numpy(body: str) -> str:
    """``k:np.float64(0.5) - n:np.int64(3)`` -> ``k:0.5 - n:3`` (numpy >= 2 scalar reprs)."""
    n = body.count("np.")
    if n == body.count("(") == body.count("np.float64(") + body.count("np.int64("):
        body = body.replace("np.float64(", "").replace("np.int64(", "").replace(") - ", " - ")
        return body[:-1] if body.endswith(")") else body
    return _NP_RE.sub(lambda m: m.group(1), body)


def parse_line(text: str) -> list[tuple[int, list[str], list[float], bool]]:
    """Every metric line in one physical line of text (usually one): ``(step, keys, values, malformed)``.

    ``text`` may still carry ANSI codes, a Ray prefix, carriage-return progress bars and Ray's repeat note.
    """
    if "\r" in text:
        out = []
        for piece in text.split("\r"):
            if MARKER in piece:
                out.extend(parse_line(piece))
        return out
    text = clean(text)
    heads = _markers(text)
    out = []
    for j, m in enumerate(heads):
        end = heads[j + 1].start() if j + 1 < len(heads) else len(text)
        keys, vals, bad = parse_body(text[m.end() : end])
        out.append((int(m.group(1)), keys, vals, bad))
    return out


def parse_clean_line(text: str) -> list[tuple[int, list[str], list[float], bool]]:
    """:func:`parse_line` for a line that starts with its ``step:N - `` head (the reader cut the prefix off): one
    head, no carriage return, no ANSI code, no Ray repeat note is parsed without the general clean-up."""
    if "\r" in text or "\x1b" in text or "[repeated " in text:
        return parse_line(text)
    m = HEAD_RE.match(text)
    if m is None:
        return parse_line(text)
    i = text.find(MARKER, m.end())
    while i != -1:
        if text[i - 1] not in _WORD_BEFORE:
            return parse_line(text)  # a second head on the line (or prose): the general path splits it
        i = text.find(MARKER, i + 5)
    keys, vals, bad = parse_body(text[m.end() :])
    return [(int(m.group(1)), keys, vals, bad)]


def first_head(text: str) -> int:
    """Offset of the first ``step:N - `` head in raw ``text``, or -1."""
    i = text.find(MARKER)
    while i != -1:
        if (i == 0 or text[i - 1] not in _WORD_BEFORE) and HEAD_RE.match(text, i):
            return i
        i = text.find(MARKER, i + 5)
    return -1


def has_marker(text: str) -> bool:
    """True when ``text`` (raw: ANSI codes allowed) holds a ``step:N - `` metric head."""
    if MARKER not in text:
        return False
    return bool(_markers(text)) or ("mstep:" in text and "\x1b" in text and bool(_markers(clean(text))))


_PARTIAL_RE = re.compile(
    r"[^\s:]+(?::(?:[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d*)?|\.\d*)?"
    r"|np?(?:\.[\w.]*(?:\([-+0-9.eEnaif]*\)?)?)?|[-+]?(?:na?n?|in?f?|Na?N?)))?"
)


_CUT_HEAD_RE = re.compile(r"(?<![\w/.])step:\d+(?: -)?\s*$")


def is_candidate(text: str) -> bool:
    """True when ``text`` holds a metric head, or ends with one a terminal wrap cut (``...step:12 -``)."""
    if MARKER not in text:
        return False
    if has_marker(text):
        return True
    end = text.rstrip()[-24:]
    return MARKER in end and end[-1:] in "-0123456789" and bool(_CUT_HEAD_RE.search(strip_ansi(text)))


def _segments_ok(text: str) -> bool:
    """Complete ``key:value`` segments, then at most one cut segment (the wrap may go on)."""
    segs = text.split(" - ")
    last = segs.pop().rstrip(" -")
    if segs:
        keys, _, bad = parse_body(" - ".join(segs), lenient_tail=False)
        if bad or not keys:
            return False
    return not last or bool(_PARTIAL_RE.fullmatch(last))


def join_continuation(line: str, nxt: str) -> str | None:
    """``line + nxt`` when ``nxt`` is the hard-wrapped rest of metric line ``line`` (ANSI-free), else None.

    A terminal that wraps at a fixed width splits the physical line anywhere (inside the head, a key, a
    value or a `` - `` separator) and the rest carries no prefix. ``nxt`` is accepted when it has no
    whitespace except inside separators, starts no metric line of its own, and joined to ``line`` gives
    complete ``key:value`` segments followed by at most one segment that may still be cut (``nxt`` may wrap
    again). A wrap inside the word ``step`` of the head is not recognised.
    """
    if "\x1b" in nxt:
        nxt = strip_ansi(nxt)
    nxt = nxt.rstrip("\r\n")
    if not nxt.strip():
        return None
    if " " in nxt.replace(" - ", "").strip(" -") or "\t" in nxt or "\r" in nxt:
        return None
    base = line.rstrip("\r\n")
    if (base.endswith(" -") and not nxt.startswith(" ")) or (nxt.startswith("- ") and not base.endswith(" ")):
        base += " "  # the wrap fell on a separator whose space a copy-paste tool trimmed
    heads = _markers(base)
    if MARKER in nxt:
        own = _markers(nxt)
        tail = base[base.rfind(" - ") + 3 :] if " - " in base else base
        glued_key = bool(base) and base[-1] in _WORD_BEFORE and ":" not in tail and heads
        if own and not (glued_key and own[0].start() == 0):
            return None
    if heads:
        start = heads[-1].end()
        cut = base.rfind(" - ")
        if cut + 3 > start:
            start = cut + 3
        return base + nxt if _segments_ok(base[start:] + nxt) else None
    m = _CUT_HEAD_RE.search(base)
    if not m:
        return None
    joined = base + nxt
    own = _markers(joined[m.start() :])
    if not own or own[0].start() != 0:
        return None
    return joined if _segments_ok(joined[m.start() + own[0].end() :]) else None


def first_line(head: Head) -> int | None:
    """Index of the first verl metric line in ``head`` (None without one); kept in ``head.memo``."""
    if "first_line" not in head.memo:
        head.memo["first_line"] = next(
            (i for i, ln in enumerate(head.lines) if "step:" in ln and has_marker(ln)),
            None,
        )
    found = head.memo["first_line"]
    return found if isinstance(found, int) else None


def shows_records(text: str) -> bool:
    """True when ``text`` (a file's head) holds a metric line."""
    return "step:" in text and has_marker(text.replace("\r", "\n"))


_TRAINER_MARKERS = ("(TaskRunner", "(main_task", "(WorkerDict", "verl.", "verl/", "Training Progress")


def shows_trainer(text: str) -> bool:
    """True when ``text`` (the head of a log without metric lines) shows verl's workers or progress bar."""
    return any(m in text for m in _TRAINER_MARKERS)


_PROGRESS_RE = re.compile(rb"Training Progress:[^\n\r|]*\|[^\n\r|]*\|\s*(\d+)/(\d+)")


def last_progress(path: Path | None) -> str | None:
    """``N/M`` of the last ``Training Progress`` tqdm bar (only used for logs without metric lines)."""
    if path is None:
        return None
    last = None
    f, raw = open_binary(path)
    try:
        for block in blocks(f, raw, None, None):
            i = block.rfind(b"Training Progress")
            while i != -1:
                m = _PROGRESS_RE.match(block, i)
                if m:
                    last = m
                    break
                i = block.rfind(b"Training Progress", 0, i)
    finally:
        f.close()
        raw.close()
    if last is None:
        return None
    return f"{int(last.group(1))}/{int(last.group(2))}"


def no_metrics(source: LogSource) -> str:
    """Why a verl log has no metric line: the run ended first, or the console logger was off (the progress bar
    moved)."""
    progress = last_progress(source.events_path or source.metrics_path)
    if progress:
        return (
            f"no 'step:N - key:value' metric line although training progressed to {progress}: "
            f"trainer.logger probably lacks 'console' (a wandb-only run?)"
        )
    return "no 'step:N - key:value' metric line: the run ended before its first step"


ROLES = {
    "loss": ("train/loss", "actor/pg_loss", "critic/vf_loss"),
    "val_loss": ("val/loss",),
    "grad_norm": ("train/grad_norm", "actor/grad_norm", "critic/grad_norm"),
    "kl": ("actor/ppo_kl", "actor/kl_loss", "critic/kl"),
    "entropy": ("actor/entropy", "actor/entropy_loss"),
    "reward": ("critic/score/mean", "critic/rewards/mean"),
    "lr": ("train/lr", "actor/lr", "train/lr(1e-3)", "critic/lr"),
    "throughput": ("perf/throughput", "train/global_tokens", "perf/total_num_tokens"),
}
"""verl's metric names per role: SFT (``train/``), PPO / GRPO (``actor/``, ``critic/``), ``perf/``."""

CONSOLE = ConsoleReader(grammar=NAME, shows=shows_records)
"""The console scan, verl's heads (``step:N - ``)."""

FORMAT = LogFormat(
    name=NAME,
    label="verl console",
    reader=CONSOLE,
    sniff=lambda head: True,
    rank=100,
    roles=ROLES,
    markers=shows_trainer,
    refine=True,
    no_metrics=no_metrics,
)
"""verl's console log: the default of the sniff (a log no other format claims), refined by its first record."""
