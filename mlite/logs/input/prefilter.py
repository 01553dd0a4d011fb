"""Finding the failure keywords of a plain log in one pass: ``grep -F`` (Aho-Corasick in C) with every keyword of
:data:`events.LINE_KEYWORDS` at once prints the byte offset of each occurrence, and the reader looks only at those
lines. Searching ~20 keywords with ``bytes.find`` costs one pass over the file each, several times the parse of
the metric lines themselves. Without grep, or for a compressed file, :func:`keyword_offsets` returns None and the
reader searches block by block as before."""

from __future__ import annotations

import os
import shutil
import subprocess
from array import array
from pathlib import Path

MIN_BYTES = 8 << 20
"""Smaller files are searched in Python (starting grep costs more than it saves)."""


def keyword_offsets(path: Path, keywords) -> tuple[array, array] | None:
    """``(offsets, keyword index)`` of every occurrence of ``keywords`` in the plain file ``path``, in file
    order; None when the file is compressed or small, or grep is missing or fails."""
    grep = shutil.which("grep")
    if grep is None:
        return None
    try:
        with open(path, "rb") as f:
            if f.read(2) == b"\x1f\x8b" or os.fstat(f.fileno()).st_size < MIN_BYTES:
                return None
    except OSError:
        return None
    index = {kw: i for i, kw in enumerate(keywords)}
    cmd = [grep, "-a", "-b", "-o", "-F"]
    for kw in keywords:
        cmd += ["-e", os.fsdecode(kw)]
    cmd += ["--", str(path)]
    offsets, which = array("q"), array("b")
    try:
        with subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "LC_ALL": "C"}
        ) as p:
            assert p.stdout is not None  # stdout=PIPE
            for line in p.stdout:
                pos, _, kw = line.rstrip(b"\n").partition(b":")
                i = index.get(kw)
                if i is None or not pos.isdigit():
                    continue
                offsets.append(int(pos))
                which.append(i)
    except OSError:
        return None
    if p.returncode not in (0, 1):  # 1: no match
        return None
    return offsets, which
