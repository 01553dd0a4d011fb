"""Byte units, once (the estimator, the runtime's memory reports and the views all count in them)."""

MIB = 1024**2
"""Bytes in a MiB."""
GIB = 1024**3
"""Bytes in a GiB."""

__all__ = ["GIB", "MIB"]
