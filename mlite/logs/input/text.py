"""Text clean-up shared by the readers: ANSI colour codes, Ray's ``[repeated Nx across cluster]`` notes,
Ray / launcher line prefixes, and numeric value tokens as verl and Megatron print them."""

from __future__ import annotations

import math
import re

ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
"""CSI sequences (colours, cursor moves), OSC sequences (terminal titles, hyperlinks) and 2-byte escapes."""

REPEATED_RE = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
"""Ray's log de-duplication note appended to a line (everything after it is Ray's own hint text)."""

PREFIX_RE = re.compile(
    r"^(?:"
    r"\((?:[\w.:<>-]+(?: [\w.:<>-]+)*)?(?:,? ?pid=\d+)?(?:, ip=[\w.:-]+)?\) ?"  # Ray: (TaskRunner pid=1, ip=..) (raylet)
    r"|\[default\d+\]:"  # torchrun --tee: [default3]:
    r"|\[rank\d+\]: ?"  # a rank of torch.distributed: [rank1]: Traceback ... (log 41)
    r"|\[[\w.-]+:\d+\]: ?"  # [host:rank]:
    r"|\s*\d+: "  # srun --label: 3:
    r")+"
)
"""Prefixes that Ray and the launchers put in front of a process's line (one or several stacked)."""

GUTTER_RE = re.compile(r"^\s*\d{1,7}(?: {2,}|\t)(?=\S)")
"""Line numbers that a copy of a log carries in front of every line (`` 111  [rank1]: Traceback ...``, log 41):
not a prefix of a process, so :func:`split_prefix` drops them before it reads one."""

_WRAPPED_RE = re.compile(r"^(?:np|numpy)\.(?:float|int|uint|longlong|double|half|single)\w*\((.*)\)$")
_TENSOR_RE = re.compile(r"^tensor\(([^,()]*)")
_BOOLS = {"True": 1.0, "False": 0.0, "np.True_": 1.0, "np.False_": 0.0, "true": 1.0, "false": 0.0}
_NUM_PREFIX_RE = re.compile(r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)", re.IGNORECASE)


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (cheap when there is none)."""
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def strip_repeated(text: str) -> str:
    """``text`` without Ray's ``[repeated Nx across cluster]`` tail."""
    return REPEATED_RE.sub("", text) if "[repeated " in text else text


def clean(text: str) -> str:
    """ANSI codes and Ray's repeat note removed, trailing whitespace and CR stripped."""
    return strip_repeated(strip_ansi(text)).rstrip()


def split_prefix(text: str) -> tuple[str, str]:
    """``(prefix, rest)``: the Ray / launcher prefix of an ANSI-free line and what follows it (line numbers of a
    copied log before it dropped: :data:`GUTTER_RE`)."""
    if text[:1].isdigit() or text[:1] == " ":
        text = GUTTER_RE.sub("", text, count=1)
    m = PREFIX_RE.match(text)
    if not m:
        return "", text
    return m.group(0).strip(), text[m.end() :]


def parse_value(token: str) -> float | None:
    """A printed metric value as float64, or None when it is not a number.

    Accepts plain Python reprs (``0.25``, ``nan``, ``-inf``, ``1e-06``, ``5``), verl's 3-decimal values,
    numpy >= 2 scalar reprs (``np.float64(0.1)``, ``np.int64(5)``), torch scalars (``tensor(0.5, ...)``),
    booleans, and Megatron's ``1.072453E+01`` / ``NAN``.
    """
    try:
        return float(token)
    except ValueError:
        pass
    tok = token.strip()
    m = _WRAPPED_RE.match(tok) or _TENSOR_RE.match(tok)
    if m:
        try:
            return float(m.group(1))
        except ValueError:
            return _BOOLS.get(m.group(1).strip())
    return _BOOLS.get(tok)


def parse_value_prefix(token: str) -> float | None:
    """The number at the start of ``token`` when something is glued after it (a tqdm bar), else None."""
    m = _NUM_PREFIX_RE.match(token.strip())
    if not m:
        return None
    try:
        return float(m.group(0))
    except ValueError:  # pragma: no cover - the regex only matches float syntax
        return None


def is_finite(x: float) -> bool:
    """``math.isfinite`` (re-exported so the readers import one module)."""
    return math.isfinite(x)
