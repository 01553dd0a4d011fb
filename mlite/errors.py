"""One exception type for bad user input.

Every error a user can cause (a bad config file, an invalid mesh, a garbled log path) is raised as
:class:`MliteError` with a one-line message that names the field or line and says what would fix it.
The CLI prints that line and exits 2; widgets show it inline. Programming errors stay ordinary exceptions.
"""

from __future__ import annotations


class MliteError(Exception):
    """Bad input, explained in one line (field or line named, fix suggested)."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))

    @property
    def message(self) -> str:
        return self.args[0]


class ConfigError(MliteError):
    """A model config.json that cannot be read or understood."""
