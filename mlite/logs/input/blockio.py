"""Reading a log as blocks of complete lines: large binary reads (plain or gzip), cut at the last newline, so
the reader's memory is a few blocks whatever the file size. A truncated or corrupt gzip stream ends the read
with what was decompressed before the error (and a note)."""

from __future__ import annotations

import gzip
import zlib

BLOCK_BYTES = 512 << 10
"""Bytes read per block (then cut at the last newline): small enough that a block and the texts the reader makes
from it stay in the CPU cache, large enough that the per-block work is negligible."""
MAX_LINE_BYTES = 64 << 20
"""A 'line' longer than this (binary junk without newlines) is cut, so memory stays bounded."""


def read_some(f, n: int) -> tuple[bytes, BaseException | None]:
    """Up to ``n`` bytes; on a corrupt or truncated gzip stream, what was decompressed before the error."""
    if not isinstance(f, gzip.GzipFile):
        return f.read(n), None
    buf = bytearray()
    try:
        while len(buf) < n:
            piece = f.read1(n - len(buf))
            if not piece:
                break
            buf += piece
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
        return bytes(buf), e
    return bytes(buf), None


def blocks(f, raw, progress, notes: list | None):
    """Blocks of complete lines (the last one of the file may lack its newline)."""
    if not isinstance(f, gzip.GzipFile) and hasattr(f, "readinto"):
        yield from _plain_blocks(f, raw, progress)
        return
    carry = b""
    last = 0
    while True:
        data, err = read_some(f, BLOCK_BYTES)
        if err is not None and notes is not None:
            notes.append(
                f"stopped reading at a corrupt or truncated gzip stream ({type(err).__name__}); "
                f"everything before it was read"
            )
        if progress is not None:
            pos = raw.tell()
            progress.update(pos - last)
            last = pos
        if not data:
            break
        nl = data.rfind(b"\n")
        if nl == -1:
            carry += data
            if len(carry) > MAX_LINE_BYTES:
                yield carry
                carry = b""
        else:
            yield carry + data[: nl + 1] if carry else data[: nl + 1]
            carry = data[nl + 1 :]
        if err is not None:
            break
    if carry:
        yield carry


def _plain_blocks(f, raw, progress):
    """:func:`blocks` of an uncompressed file: each read lands in one reused buffer after the cut line the
    previous block left (one copy from the page cache, one into the block handed out; no concatenation)."""
    buf = bytearray(BLOCK_BYTES)
    have = 0  # bytes of the cut last line kept at the start of buf
    last = 0
    while True:
        if have == len(buf):  # one line fills the buffer: grow it, or hand the line out cut
            if len(buf) >= MAX_LINE_BYTES:
                yield bytes(buf)
                have = 0
            else:
                buf.extend(bytes(len(buf)))
        with memoryview(buf) as view:
            n = f.readinto(view[have:])
        if progress is not None:
            pos = raw.tell()
            progress.update(pos - last)
            last = pos
        if not n:
            if have:
                yield bytes(memoryview(buf)[:have])
            return
        end = have + n
        nl = buf.rfind(b"\n", 0, end)
        if nl == -1:
            have = end
            continue
        with memoryview(buf) as view:
            yield bytes(view[: nl + 1])
            rest = end - nl - 1
            view[:rest] = view[nl + 1 : end]
        have = rest
