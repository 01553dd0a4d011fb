"""Megatron-LM console lines (``megatron/training/training.py::training_log`` and ``evaluate_and_print_results``).

Iteration lines::

     [2025-04-13 23:41:20] iteration       20/    1000 | consumed samples:          320 | elapsed time per
     iteration (ms): 820.7 | learning rate: 4.000000E-05 | global batch size:    16 | lm loss: 1.072453E+01 |
     loss scale: 131072.0 | grad norm: 3.874 | num zeros: 71.0 | number of skipped iterations:   6 | ...

Validation blocks (between dashed rulers)::

     validation loss at iteration 50 [on validation set] | lm loss value: 8.889540E+00 | lm loss PPL: 7.255679E+03 |

Both may sit behind any launcher prefix (``[default3]:``, ``3: ``, ``[host:rank]:``) since the reader searches
for the ``iteration`` / ``validation loss at`` words. A record ends with ``|``; one that was hard-wrapped over
several physical lines (a terminal or a copy into an issue cut it anywhere, inside a field name or a number) is
joined again by :func:`join_continuation` while the next line does not start a record of its own. Fields
become lower_snake metric names
(:data:`FIELD_NAMES`); validation values become ``val/<name>`` (``test/<name>`` for the test set) and PPL
``val/<name>_ppl``. An fp16 iteration that was skipped prints no ``lm loss`` / ``grad norm``: the record
simply lacks them.
"""

from __future__ import annotations

import re

from ..input.text import clean
from . import verl_console
from .registry import ConsoleReader, Head, LogFormat

NAME = "megatron"
"""The format's name."""

MARKERS = ("iteration", "validation loss at")
"""Words the reader searches for before any regex runs."""

FIELD_NAMES = {
    "consumed samples": "consumed_samples",
    "consumed tokens": "consumed_tokens",
    "elapsed time per iteration (ms)": "elapsed_time_per_iteration_ms",
    "throughput per gpu (tflop/s/gpu)": "throughput_per_gpu",
    "learning rate": "learning_rate",
    "decoupled learning rate": "decoupled_learning_rate",
    "global batch size": "global_batch_size",
    "lm loss": "lm_loss",
    "loss scale": "loss_scale",
    "grad norm": "grad_norm",
    "num zeros": "num_zeros",
    "params norm": "params_norm",
    "number of skipped iterations": "skipped_iterations",
    "number of nan iterations": "nan_iterations",
}
"""Megatron's printed field -> metric name (lower-cased keys); other fields become lower_snake generically."""

_ITER_RE = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_VAL_RE = re.compile(
    r"\bvalidation loss at (?:iteration\s+(\d+)|the end of training for (\w+) data)"
    r"(?:\s+on\s+(\w+)\s+set)?\s*\|"
)
_SNAKE_RE = re.compile(r"[^0-9a-z]+")
_FULL_SEG_RE = re.compile(
    r"\s*[A-Za-z][\w ()/.,\-]*:\s*[-+]?(?:\d[\w.+\-]*|\.\d[\w.+\-]*|nan|inf|NAN|INF|NaN)"
    r"(?: \d+(?:\.\d+)?[dhms])*(?: [A-Za-z][\w/]*)?\s*"
)
_PART_SEG_RE = re.compile(r"\s*(?:[A-Za-z][\w ()/.,\-]*(?::\s*[-+]?[\w.+\-]*)?)?\s*")
_UNIT_RE = re.compile(r"([-+]?(?:\d[\d.]*(?:[eE][-+]?\d+)?|\.\d+))\s+(ms|s|sec|us|GB|GiB|MB|MiB|TFLOP/s(?:/GPU)?)")
"""A number and the unit printed after it (``21392.5 ms``)."""
_DURATION_RE = re.compile(r"(?:(\d+)d)? ?(?:(\d+)h)? ?(?:(\d+)m)? ?(?:(\d+(?:\.\d+)?)s)?")
"""A duration in days, hours, minutes and seconds (``1d 6h 54m 11s``, ``7h 59m 54s``): ms-swift's ``megatron sft``
prints its ``elapsed time`` / ``remaining time`` fields so (https://github.com/modelscope/ms-swift/issues/6836,
log 48)."""
_DURATION_S = (86400.0, 3600.0, 60.0, 1.0)
OTHER_LABELS = frozenset({"memory(gib)", "elapsed time", "remaining time", "load_balancing_loss", "z_loss"})
"""Fields other trainers add to Megatron's line (ms-swift's ``memory(GiB)`` and durations, log 48; Megatron-Core's MoE
losses, logs 45 and 49): known for rejoining a wrapped record, named generically (:func:`field_name`)."""
MAX_MTP_LAYERS = 8
"""Megatron-Core's per-MTP-layer losses (``mtp_1 loss``, logs 46 and 49) known for rejoining, up to this depth."""
_PAREN_RE = re.compile(r"\s*\(")
_UNIT_LABEL_RE = re.compile(r"\s*\([^)]*\)$")
_KNOWN_LABELS = (
    frozenset(FIELD_NAMES)
    | {_UNIT_LABEL_RE.sub("", k) for k in FIELD_NAMES}  # the label a unit after the number leaves (split_unit)
    | {"lm loss value", "lm loss ppl"}
    | OTHER_LABELS
    | {f"mtp_{i} loss" for i in range(1, MAX_MTP_LAYERS + 1)}
)
_DURATION_CUT_RE = re.compile(r":\s*(?:\d+[dhm] )*\d+[dhm]$")
"""A record cut between two parts of a duration (``elapsed time: 1d 6h`` / ``54m 11s | ...``)."""
_NUMBER_CUT_RE = re.compile(r":\s*[-+]?(?:\d[\d.]*(?:[eE][-+]?\d+)?|\.\d+)$")
_UNIT_START_RE = re.compile(r"(?:ms|s|sec|us|GB|GiB|MB|MiB|TFLOP/s(?:/GPU)?)(?=\s|\||$)")
"""A record cut between a number and its unit (``elapsed time per iteration: 21392.5`` / ``ms | ...``)."""
_LAUNCHER_RE = re.compile(r"\s*(?:\[default\d+\]:|\[[\w.-]+:\d+\]:|\d+: |\([^)]*pid=\d+|\[\d{4}-\d\d-\d\d )")
MAX_WRAP_LINES = 16
"""Physical lines one record may be wrapped over (the reader stops joining after that)."""


def field_name(label: str) -> str:
    """``elapsed time per iteration (ms)`` -> ``elapsed_time_per_iteration_ms``; also when a rejoined wrap lost the
    space before the parenthesis (``throughput per GPU(TFLOP/s/GPU)``)."""
    low = " ".join(_PAREN_RE.sub(" (", label.lower()).split())
    return FIELD_NAMES.get(low) or _SNAKE_RE.sub("_", low).strip("_")


def split_unit(label: str, tok: str) -> tuple[str, str]:
    """``(label, number)`` of a field whose number has its unit after it: ``elapsed time per iteration`` /
    ``21392.5 ms`` -> ``elapsed time per iteration (ms)`` / ``21392.5``, the label Megatron-LM prints with the
    unit in it (so both spellings are one metric); a duration (``1d 6h 54m 11s``) comes back in seconds under
    ``label (s)``; other tokens come back as they are."""
    m = _UNIT_RE.fullmatch(tok)
    if m is not None:
        return f"{label.rstrip()} ({m.group(2)})", m.group(1)
    d = _DURATION_RE.fullmatch(tok)
    if d is not None and tok and any(g is not None for g in d.groups()):
        secs = sum(float(g) * k for g, k in zip(d.groups(), _DURATION_S, strict=True) if g is not None)
        return f"{label.rstrip()} (s)", repr(secs)
    return label, tok


def parse_fields(rest: str) -> tuple[list[str], list[float], bool]:
    """``label: value | label: value | ...`` -> (labels, values, malformed); a cut last segment is not malformed,
    and a number with its unit after it (:func:`split_unit`) is a value."""
    keys: list[str] = []
    vals: list[float] = []
    bad = False
    segs = rest.split("|")
    for i, seg in enumerate(segs):
        seg = seg.strip()
        if not seg:
            continue
        label, sep, tok = seg.rpartition(":")
        if not sep or not label.strip():
            bad = bad or i < len(segs) - 1  # a cut last segment is a truncated line
            continue
        try:
            v = float(tok)
        except ValueError:
            label, tok = split_unit(label, tok.strip())
            try:
                v = float(tok)
            except ValueError:
                bad = True
                continue
        keys.append(label)
        vals.append(v)
    return keys, vals, bad


def parse_headed(head_re: re.Pattern, text: str) -> tuple[int, list[str], list[float], bool] | None:
    """``head_re`` (its group 1 the step) then ``| Name: value |`` fields -> ``(step, metric names, values,
    malformed)``; None when ``text`` holds no head."""
    text = clean(text)
    m = head_re.search(text)
    if not m:
        return None
    labels, vals, bad = parse_fields(text[m.end() :])
    return int(m.group(1)), [field_name(k) for k in labels], vals, bad


STEP_FIELD = "global_step"
"""NeMo 2's field that counts the optimizer steps of the run (its ``iteration i/N`` restarts at 0 each epoch)."""


def parse_iteration(text: str) -> tuple[int, list[str], list[float], bool] | None:
    """An iteration line -> ``(iteration, metric names, values, malformed)``; None when ``text`` is not one.

    NeMo 2's lines (``Training epoch 1, iteration 0/999 | lr: 2.999e-06 | ... | global_step: 19 |
    reduced_train_loss: 11.03 | ...``, log 42) are stored at their ``global_step``: the iteration counts within
    the epoch, and an epoch change is not a restart."""
    rec = parse_headed(_ITER_RE, text)
    if rec is None or STEP_FIELD not in text or STEP_FIELD not in rec[1]:
        return rec
    _, names, vals, bad = rec
    i = names.index(STEP_FIELD)
    g = vals[i]
    if g != g or g < 0 or g != int(g):
        return rec
    return int(g), names[:i] + names[i + 1 :], vals[:i] + vals[i + 1 :], bad


def parse_validation(text: str, last_step: int | None) -> tuple[int, list[str], list[float], bool] | None:
    """A ``validation loss at ...`` line -> ``(iteration, val/... names, values, malformed)``; None if not one.

    ``at the end of training`` lines carry no iteration: they are put at ``last_step`` (0 when unknown).
    """
    text = clean(text)
    m = _VAL_RE.search(text)
    if not m:
        return None
    step = int(m.group(1)) if m.group(1) is not None else (last_step or 0)
    split = (m.group(2) or m.group(3) or "validation").lower()
    prefix = "test/" if split.startswith("test") else "val/"
    labels, vals, bad = parse_fields(text[m.end() :])
    names = []
    for label in labels:
        low = " ".join(label.lower().split())
        if low.endswith(" ppl"):
            names.append(prefix + field_name(low[:-4]) + "_ppl")
        elif low.endswith(" value"):
            names.append(prefix + field_name(low[:-6]))
        else:
            names.append(prefix + field_name(low))
    return step, names, vals, bad


def _rest(text: str) -> str | None:
    m = _ITER_RE.search(text) or _VAL_RE.search(text)
    return text[m.end() :] if m else None


def _segments_ok(rest: str) -> bool:
    """Complete ``label: value`` segments between ``|``, then at most one cut segment."""
    segs = rest.split("|")
    last = segs.pop()
    for seg in segs:
        if not seg.strip():
            continue
        if not _FULL_SEG_RE.fullmatch(seg):
            return False
        label, _, tok = seg.rpartition(":")
        try:
            float(split_unit(label, tok.strip())[1])
        except ValueError:
            return False
    return bool(_PART_SEG_RE.fullmatch(last))


def _label_at_end(text: str) -> str:
    seg = text.rsplit("|", 1)[-1]
    return "" if ":" in seg else seg.lstrip()


def join_continuation(text: str, nxt: str) -> str | None:
    """``text + nxt`` when ``nxt`` is the wrapped rest of the open Megatron record ``text``, else None.

    ``nxt`` must not start a record (an iteration or validation head, a launcher prefix), and the joined text must
    still be ``label: value |`` segments. After a record that ends with ``|`` only a line that starts with a known
    Megatron field (``elapsed time per iteration (ms): 820.7 | ...``) is its rest: the wrap fell on a separator.
    A wrap between two words whose space the copy trimmed (``learning`` /
    ``rate: ...``) is told from a wrap inside a word (``learn`` / ``ing rate: ...``) by the known field names.
    """
    base = clean(text)
    nxt = clean(nxt)
    if not nxt.strip() or _ITER_RE.search(nxt) or _VAL_RE.search(nxt) or _LAUNCHER_RE.match(nxt):
        return None
    if base.endswith("|"):  # complete, unless the wrap fell just after a separator: then a known field follows
        if _rest(base) is None:
            return None
        first = nxt.split("|", 1)[0]
        name, _, tok = first.rpartition(":")
        labels = {" ".join(k.lower().split()) for k in (name, split_unit(name, tok.strip())[0])}
        if not (_FULL_SEG_RE.fullmatch(first) and labels & _KNOWN_LABELS):
            return None
        joined = base + nxt
        rest = _rest(joined)
        return joined if rest is not None and _segments_ok(rest) else None
    joined = base + nxt
    if _rest(base) is None:  # the wrap fell inside the head: 'iteration      2' / '0/    1000 | lm loss: ...'
        m = _ITER_RE.search(joined) or _VAL_RE.search(joined)
        if m is None or m.end() <= len(base):
            return None
        return joined if _segments_ok(joined[m.end() :]) else None
    head = _label_at_end(base)
    last = base.rsplit("|", 1)[-1]
    if (nxt[:1].isdigit() and _DURATION_CUT_RE.search(last)) or (
        _UNIT_START_RE.match(nxt) and _NUMBER_CUT_RE.search(last)
    ):
        joined = base + " " + nxt  # the copy trimmed the space before a unit or between two parts of a duration
    elif head and nxt[:1].isalpha() and not base.endswith(" "):
        tail = nxt.split(":", 1)[0] if ":" in nxt.split("|", 1)[0] else ""
        glued, spaced = " ".join((head + tail).lower().split()), " ".join((head + " " + tail).lower().split())
        if spaced in _KNOWN_LABELS and glued not in _KNOWN_LABELS:
            joined = base + " " + nxt
    rest = _rest(joined)
    if rest is None or not _segments_ok(rest):
        return None
    if "|" not in nxt and not _plausible_tail(rest.rsplit("|", 1)[-1]):
        return None  # nothing of nxt completes a field: it is another line that happens to fit
    return joined


def _plausible_tail(seg: str) -> bool:
    """The cut last segment is ``label: <digits...>`` or the beginning of a known field name."""
    seg = " ".join(seg.lower().split())
    if ":" in seg:
        return True
    return any(label.startswith(seg) for label in _KNOWN_LABELS)


def shows_trainer(text: str) -> bool:
    """True when ``text`` (a file's head) names Megatron (its banner, ``pretrain_gpt``)."""
    return "megatron" in text.lower() or "pretrain_gpt" in text


def shows_records(text: str) -> bool:
    """True when ``text`` (a file's head) holds an iteration line."""
    return "iteration" in text and any(parse_iteration(ln) for ln in text.splitlines() if "iteration" in ln)


def sniff(head: Head) -> bool:
    """An iteration line before any verl line, or (no iteration line) Megatron's words and no verl line."""
    verl_at = verl_console.first_line(head)
    for i, ln in enumerate(head.lines):
        if "iteration" in ln and parse_iteration(ln):
            return verl_at is None or verl_at > i
    return verl_at is None and shows_trainer(head.text)


ROLES = {
    "loss": ("lm_loss", "lm loss", "lm-loss-training/lm loss", "reduced_train_loss"),
    "val_loss": ("val/lm_loss", "lm loss validation", "lm-loss-validation/lm loss validation", "val_loss"),
    "grad_norm": ("grad_norm", "grad-norm", "grad-norm/grad-norm"),
    "lr": ("learning_rate", "learning-rate", "learning-rate/learning-rate", "lr"),
    "throughput": ("throughput_per_gpu", "throughput"),
}
"""Console names (lower_snake) first, then the TensorBoard tags Megatron writes (``lm loss``, ``grad-norm``...),
then NeMo 2's console names (``reduced_train_loss``, ``lr``, ``val_loss``)."""

CONSOLE = ConsoleReader(grammar=NAME, shows=shows_records)
"""The console scan, Megatron's heads (``iteration``, ``validation loss at``)."""

FORMAT = LogFormat(
    name=NAME,
    label="Megatron-LM",
    reader=CONSOLE,
    sniff=sniff,
    rank=20,
    roles=ROLES,
    markers=shows_trainer,
    refine=True,
    no_metrics="no Megatron 'iteration N/M |' line: the job ended before its first log interval",
)
"""Megatron-LM's console log."""
