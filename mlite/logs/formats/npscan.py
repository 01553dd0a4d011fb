"""Finding verl metric heads in a block with numpy: every ``step:`` followed by a digit, from one comparison of the
block seen as 16-bit words (the ``p:`` pair, at even and at odd offsets) and a check of the bytes around each hit,
instead of a ``bytes.find`` loop that stops at every ``step:`` of the prose. Gives exactly the offsets of the
reader's loop: the first such head of each line. numpy is imported on the first large block only."""

from __future__ import annotations

from .verl_console import WORD_CHARS

MIN_BYTES = 256 << 10
"""Smaller blocks are searched with ``bytes.find`` (importing numpy costs more than it saves)."""

_P_COLON = ord("p") | ord(":") << 8
"""``p:`` as a little-endian 16-bit word."""


_WORD_BYTES = WORD_CHARS.encode()
"""Bytes that, before ``step:``, make it part of a word (:data:`verl_console.WORD_CHARS`)."""


def verl_heads(block: bytes, start: int) -> list[int]:
    """Offsets ``i >= start`` of ``step:<digit>`` in ``block``, the first one of each line only."""
    return verl_head_lines(block, start)[0]


def verl_head_lines(block: bytes, start: int) -> tuple[list[int], list[int], list[bool]]:
    """:func:`verl_heads`, the end of each head's line (its newline's offset, ``len(block)`` for a last line
    without one: the search finds it anyway) and whether a later ``step:`` on that line follows a non-word byte
    (what :func:`fastverl.line_body` looks for with a ``find`` loop per line)."""
    import numpy as np

    n = len(block)
    a = np.frombuffer(block, np.uint8)
    even = np.flatnonzero(np.frombuffer(block, "<u2", n // 2) == _P_COLON) * 2
    odd = np.flatnonzero(np.frombuffer(block, "<u2", (n - 1) // 2, offset=1) == _P_COLON) * 2 + 1
    q = np.concatenate((even, odd))  # offsets of the 'p' of 'p:'
    q = q[(q >= 3) & (q + 1 < n)]
    q = q[(a[q - 3] == 115) & (a[q - 2] == 116) & (a[q - 1] == 101)]  # every 'step:'
    q.sort()
    word = np.zeros(256, bool)
    word[np.frombuffer(_WORD_BYTES, np.uint8)] = True
    later = q[q >= 4]
    free = later[~word[a[later - 4]]] - 3  # 'step:' after a non-word byte (a later head on a line)
    q = q[(q >= start + 3) & (q + 2 < n)]
    q = q[(a[q + 2] >= 48) & (a[q + 2] <= 57)]
    out: list[int] = []
    ends: list[int] = []
    find = block.find
    le = -1
    for p in q.tolist():
        i = p - 3
        if i < le:
            continue  # a later head on the line of the last one (the loop skips to the end of the line)
        out.append(i)
        le = find(b"\n", p + 2)
        if le == -1:
            ends.append(n)
            break
        ends.append(le)
    if not out:
        return out, ends, []
    k = np.searchsorted(free, out, "right")
    second = (k < len(free)) & (free[np.minimum(k, len(free) - 1)] < ends) if len(free) else np.zeros(len(out), bool)
    return out, ends, second.tolist()


def newline_counter(block: bytes):
    """``count(b"\\n", start, end)`` over ``block`` (like ``block.count``) from one vectorised comparison: the
    reader counts the lines between hits, all of the block, and numpy counts a byte mask faster than
    ``bytes.count`` scans."""
    import numpy as np

    nl = np.frombuffer(block, np.uint8) == 10
    cnz = np.count_nonzero

    def count(_sub: bytes, start: int, end: int) -> int:
        return int(cnz(nl[start:end]))

    return count
