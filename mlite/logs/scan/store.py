"""What a scan produces: the values in compact typed arrays, and the scan's result (format, events, counts)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from ..input.source import LogSource
from ..records import Event


class RecordStore:
    """Values of many step records in flat typed arrays (20 bytes a value), metric names interned."""

    def __init__(self) -> None:
        self.steps = array("q")
        self.ids = array("i")
        self.values = array("d")
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def add(self, step: int, keys: list[str], vals: list[float]) -> None:
        """Append one record."""
        index = self._index
        ids = [index.get(k, -1) for k in keys]  # -1: a name not interned yet
        if -1 in ids:
            for i, k in enumerate(keys):
                if ids[i] == -1:
                    ids[i] = index.get(k, -1)
                    if ids[i] == -1:
                        ids[i] = index[k] = len(self.names)
                        self.names.append(k)
        self.ids.extend(ids)
        self.values.extend(vals)
        self.steps.extend([step] * len(keys))

    def __len__(self) -> int:
        return len(self.values)


@dataclass(kw_only=True, slots=True)
class ScanResult:
    """What one pass over a source found."""

    source: LogSource
    """The source read."""
    format: str = "unknown"
    """Detected format (a registered format's name or ``unknown``: :data:`mlite.logs.FORMATS`)."""
    store: RecordStore | None = None
    """The values (None when the scan did not keep them)."""
    events: list[Event] = field(default_factory=list)
    """Text and series events, in line order."""
    skipped_lines: int = 0
    """Lines that looked like metric records but could not be parsed completely."""
    num_lines: int = 0
    """Lines in the file metrics were read from."""
    steps: set = field(default_factory=set)
    """Distinct steps with a record."""
    metrics: dict = field(default_factory=dict)
    """Metric names in first-seen order (a dict used as an ordered set)."""
    notes: list[str] = field(default_factory=list)
    """Things a human should know (a truncated gzip stream...)."""
    loss_span: tuple | None = None
    """``(metric, first, last)`` finite values of the loss role (None without one)."""
