"""A byte-based progress bar for reading large logs or many of them: ``tqdm.auto`` (a widget in Jupyter,
text elsewhere), imported only when a bar is actually shown. Small inputs stay silent."""

from __future__ import annotations

import sys

MIN_BYTES = 64 << 20
"""Inputs smaller than this (in total) read without a bar..."""
MIN_FILES = 32
"""...unless there are at least this many files and ``MIN_FILES_BYTES`` in total."""
MIN_FILES_BYTES = 8 << 20


class _Silent:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Bar(_Silent):
    def __init__(self, total: int, desc: str, file):
        from tqdm.auto import tqdm

        self._bar = tqdm(
            total=total,
            desc=desc,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=file,
            leave=False,
            mininterval=0.5,
            dynamic_ncols=True,
        )

    def update(self, n: int) -> None:
        if n > 0:
            self._bar.update(n)

    def close(self) -> None:
        self._bar.close()


def wants_bar(total_bytes: int, num_files: int) -> bool:
    """The automatic rule: large input, or many files that are not tiny."""
    return total_bytes >= MIN_BYTES or (num_files >= MIN_FILES and total_bytes >= MIN_FILES_BYTES)


def progress_for(
    total_bytes: int, num_files: int, enabled: bool | None = None, *, desc: str = "reading logs", file=None
):
    """A context manager with ``update(nbytes)``: a tqdm bar when ``enabled`` (None: :func:`wants_bar`), else
    a silent one. ``file`` defaults to stderr."""
    if enabled is None:
        enabled = wants_bar(total_bytes, num_files)
    if not enabled:
        return _Silent()
    return _Bar(total_bytes, desc, file if file is not None else sys.stderr)
