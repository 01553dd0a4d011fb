"""Batch decoding of plain verl console metric lines: a block's ``step:N - key:value - ...`` bodies become one JSON
array of objects (``' - '`` -> ``,<tab>"``, ``:`` -> ``":``), decoded in one call by msgspec's C decoder into
``{key: float}`` dicts, without one Python string or ``float()`` call per value.

The result must be exactly what :func:`verl_console.parse_body` gives a line, so a batch is only accepted when
every line is one the pure-Python fast path would have read (each space part of a `` - `` separator, one ``:`` per
segment, no empty or repeated key, every value a number) and the JSON text cannot mean anything else: no ``"``,
``\\``, tab or CR in it, numpy reprs unwrapped under the same conditions as :func:`verl_console.unwrap_numpy`. JSON's
number grammar is a subset of ``float()``'s and msgspec rounds correctly (bit-identical to ``float()``; checked by
``tests/test_logs_fastverl.py``), except an integer ``-0`` (msgspec gives ``0.0``), which sends the batch back.
A batch that fails any check returns None: the caller retries its lines one by one and reads the ones that still
fail with the general parser, so the fast path changes speed only, never a record.
"""

from __future__ import annotations

import re

from . import verl_console

try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec is a dependency; without it every line takes the general parser
    msgspec = None  # type: ignore[assignment]

_DECODE = msgspec.json.Decoder(list[dict[str, float]]).decode if msgspec is not None else None
_DECODE_ERRORS = (msgspec.DecodeError,) if msgspec is not None else ()

HEAD_RE = re.compile(verl_console.HEAD_RE.pattern.encode())
"""The head of a verl metric line (bytes version of :data:`verl_console.HEAD_RE`)."""
WORD_BEFORE = frozenset(verl_console.WORD_CHARS.encode())
"""Bytes that, before ``step:``, make it part of a word (:data:`verl_console.WORD_CHARS`), not a head."""


_STRIP = frozenset(b" -\r")


_NP_COUNT_BYTES = 64 << 10
"""Longer texts have their tabs counted by numpy (faster than ``bytes.count`` once imported)."""


def separators_np(text: bytes) -> tuple[bytes, int] | None:
    """``(text.replace(b" - ", b',\\t"'), number of separators)`` from the ``-`` positions found by numpy (one
    comparison, then the separators written in place into one copy): faster than the replace and the tab count on
    long texts. None when two separators overlap (`` - - ``: the text is no plain line anyway) or a value is an
    integer ``-0`` (``:-0`` not followed by ``.``, ``e``, ``E`` or a digit: what :func:`decode` rejects)."""
    import numpy as np

    a = np.frombuffer(text, np.uint8)
    n = len(a)
    dash = np.flatnonzero(a == 45)
    dash = dash[(dash >= 1) & (dash + 1 < n)]
    z = dash[(a[dash - 1] == 58) & (a[dash + 1] == 48)]  # ':-0'
    if len(z):
        nxt = a[np.minimum(z + 2, n - 1)]
        more = (nxt == 46) | (nxt == 101) | (nxt == 69) | ((nxt >= 48) & (nxt <= 57))
        if bool(((z + 2 >= n) | ~more).any()):
            return None  # an integer -0 (msgspec gives +0.0)
    d = dash[(a[dash - 1] == 32) & (a[dash + 1] == 32)]
    if len(d) > 1 and bool((np.diff(d) == 2).any()):
        return None
    out = a.copy()
    out[d - 1] = 44
    out[d] = 9
    out[d + 1] = 34
    return out.tobytes(), len(d)


def unwrap_numpy_bytes(text: bytes) -> bytes | None:
    """:func:`verl_console.unwrap_numpy`'s fast case on lines joined by newlines (``np.float64(`` / ``np.int64(``
    removed, then a ``)`` before `` - `` or at a line's end), or None when a line is not that case."""
    t = text.replace(b"np.float64(", b"")
    # every '(' opens one of these reprs in the text as it was (summed over the lines: true on each line)
    if (len(text) - len(t)) // 11 + text.count(b"np.int64(") != text.count(b"("):
        return None
    t = t.replace(b"np.int64(", b"")
    if b"np." in t:
        return None
    t = t.replace(b") - ", b" - ").replace(b")\n", b"\n")
    return t[:-1] if t.endswith(b")") else t


_NP_FLOAT = b"np.float64"
_NP_INT = b"np.int64"


def unwrap_numpy_np(text: bytes) -> bytes | None:
    """:func:`unwrap_numpy_bytes` with numpy, for long texts: the ``(`` and ``.`` positions are found in two
    vectorised comparisons, and the reprs' bytes and their closing ``)`` are dropped by one boolean mask
    instead of seven bytes passes. Accepts a subset of what :func:`unwrap_numpy_bytes` accepts (every ``(``
    opens a repr and every ``np.`` starts one: unwrap_numpy's own fast-case test, summed over the lines), with the
    same result (``tests/test_logs_fastverl.py`` compares them)."""
    import numpy as np

    a = np.frombuffer(text, np.uint8)
    opens = np.flatnonzero(a == 40)
    pf = opens[opens >= 10]
    is_f = np.ones(len(pf), bool)
    for k, c in enumerate(_NP_FLOAT):
        is_f &= a[pf - 10 + k] == c
    pi = np.concatenate((opens[opens < 10], pf[~is_f]))  # the others must all be np.int64( reprs
    pf = pf[is_f]
    if len(pi):
        if (pi < 8).any():
            return None
        for k, c in enumerate(_NP_INT):
            if not (a[pi - 8 + k] == c).all():
                return None
    dots = np.flatnonzero(a == 46)
    dots = dots[dots >= 2]
    if int(np.count_nonzero((a[dots - 1] == 112) & (a[dots - 2] == 110))) != len(opens):
        return None  # an 'np.' that opens no repr: the general path's regex case
    n = len(a)
    keep = np.ones(n + 3, bool)  # (3 past the end: the bytes after a last ')')
    keep[(pf[:, None] + np.arange(-10, 1)).ravel()] = False
    if len(pi):
        keep[(pi[:, None] + np.arange(-8, 1)).ravel()] = False
    closes = np.flatnonzero(a == 41)  # a ')' before ' - ', a newline or the end goes: decided on the text as it
    if len(closes):  # is, the reprs' bytes still in, so the 3 bytes after each ')' must be none of theirs
        at = closes[:, None] + np.arange(1, 4)
        if not bool(keep[at].all()):
            return None  # a repr right after a ')': unwrap_numpy_bytes's order of replaces decides
        nxt = a[np.minimum(at, n - 1)]
        last = closes + 1 >= n
        drop = last | ((nxt[:, 0] == 10) & ~last)
        drop |= (closes + 3 < n) & (nxt[:, 0] == 32) & (nxt[:, 1] == 45) & (nxt[:, 2] == 32)
        keep[closes[drop]] = False
    return a[keep[:n]].tobytes()  # one mask for the reprs and their ')'s


def available() -> bool:
    """True when the batch decoder can run (msgspec importable)."""
    return _DECODE is not None


def line_body(block: bytes, ls: int, le: int, i: int, second: bool | None = None) -> tuple[int, int] | None:
    """``(step, body offset)`` of the line ``block[ls:le]`` whose first ``step:<digit>`` is at ``i``, when the
    general reader would parse it with :func:`verl_console.parse_clean_line`'s one-head path and join no next line
    to it; else None (the caller uses the general path). ``second``: whether a later ``step:`` on the line follows
    a non-word byte, when the caller knows (:func:`npscan.verl_head_lines`)."""
    if i > ls and block[i - 1] in WORD_BEFORE:
        return None
    m = HEAD_RE.match(block, i, le)
    if m is None:
        return None
    me = m.end()
    find = block.find
    if second is not None:
        if second:
            return None  # a second head on the line: the general path splits it
    else:
        j = find(b"step:", me, le)
        while j != -1:  # a second head on the line: the general path splits it
            if block[j - 1] not in WORD_BEFORE:
                return None
            j = find(b"step:", j + 5, le)
    if block[le - 1] == 13:  # CRLF / carriage-return progress: the general path
        return None
    p = le + 1
    n = len(block)
    if p >= n:  # the next line is in the next block: the general path keeps the line pending
        return None
    e = find(b"\n", p)
    e = n if e == -1 else e
    k = find(b" ", p, e)
    if k == -1:
        return None  # the next line may be the wrapped rest of this one
    if not (p < k < e - 1 and block[k - 1] not in _STRIP and block[k + 1] not in _STRIP):
        # the quick test (a space between two letters survives any ' - ' removal and the strip) does not decide
        nb = block[p:e]
        if b" " not in nb.replace(b" - ", b"").strip(b" -\r"):
            return None
    body_has_open = find(b"(", me, le) != -1
    if not body_has_open and find(b")", me, le) != -1:
        return None  # ')' without a numpy repr: the general path
    return int(m.group(1)), me


def decode(bodies: list[bytes]) -> list[dict[str, float]] | None:
    """The ``{key: value}`` of each body (``key:value - key:value ...``, what follows the ``step:N - `` head, as
    :func:`line_body` selected it: no ``)`` in a line without ``(``), or None when one of them is not a plain line
    (see the module docstring)."""
    if _DECODE is None or not bodies:
        return None
    text = b"\n".join(bodies)
    if b'"' in text or b"\\" in text or b"\r" in text or b"\t" in text:
        return None
    if b"(" in text:  # numpy >= 2 reprs: unwrap_numpy's fast case, on every line at once
        unwrapped = unwrap_numpy_np(text) if len(text) >= _NP_COUNT_BYTES else unwrap_numpy_bytes(text)
        if unwrapped is None:
            return None  # the general path's regex case
        text = unwrapped
    # ',<tab>"': the same length (a faster replace) and JSON white space; the tabs count the separators
    if len(text) < _NP_COUNT_BYTES:
        t = text.replace(b" - ", b',\t"')
        nsep = t.count(b"\t")
    else:
        sep = separators_np(text)
        if sep is None:
            return None
        t, nsep = sep
    if b" " in t:
        return None  # a space outside the separators (the general path strips and flags it)
    if b":-0" in t and len(text) < _NP_COUNT_BYTES:  # (separators_np looked for integer -0 already)
        k = t.find(b":-0")
        while k != -1:
            nxt = t[k + 3 : k + 4]
            if nxt not in (b".", b"e", b"E") and not nxt.isdigit():
                return None  # integer -0: msgspec gives +0.0
            k = t.find(b":-0", k + 3)
    t = b'[{"' + t.replace(b":", b'":').replace(b"\n", b'},{"') + b"}]"
    try:
        out = _DECODE(t)
    except _DECODE_ERRORS:
        return None
    if len(out) != len(bodies) or sum(map(len, out)) != nsep + len(bodies):
        return None  # a repeated key (parse_body keeps both values) or a line that was not one object
    for d in out:
        if "" in d:
            return None
    return out
