"""The log-format registry: one :class:`LogFormat` entry per format, and the only place that names it.

An entry says how a file is recognised (``sniff`` on the head of a text file, or ``claims`` for paths read whatever
their content: TensorBoard event files, the kit's run directories), how it is read (a :class:`LineReader` of one
record per line, the shared :class:`ConsoleReader` keyword scan of console logs, or a :class:`FileReader` with its
own loader), which metric plays which role (``loss``, ``grad_norm``...; the kit's series names, see
:mod:`..analysis.roles`) and what a file without a record means. Detection (:mod:`..input.detect`), the reader
(:mod:`..scan.reader`), the roles and :data:`mlite.logs.FORMATS` all go through :func:`entries`; the lookups happen
once per source, never per line.

A new format is one module with one entry, registered in :mod:`mlite.logs.formats` (or, in a test or a notebook,
with :func:`registered`)::

    TOY = LogFormat(name="toy", label="toy lines", sniff=lambda head: head.first.startswith("toy "),
                    reader=LineReader(parse=parse_toy), roles={"loss": ("toy_loss",)})
    with registered(TOY):
        read_log("run.log").format      # 'toy'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..input.source import LogSource

UNKNOWN = "unknown"
"""The format of a log with no record and no marker of a registered format (not an entry)."""

Parsed = tuple[int, list[str], list[float]]
"""``(step, metric names, values)`` of one record."""


class Head:
    """The head of a text file (:data:`..input.source.SNIFF_BYTES`), as the sniffs read it; what one sniff
    computes for another (the first verl line...) is kept in :attr:`memo`."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        """The file."""
        self.text = text
        """Its first bytes, decoded (invalid UTF-8 replaced)."""
        self.memo: dict[str, object] = {}
        """Results shared between sniffs, by the name of the function that computed them."""
        self._lines: list[str] | None = None

    @property
    def lines(self) -> list[str]:
        """The lines of :attr:`text`."""
        if self._lines is None:
            self._lines = self.text.splitlines()
        return self._lines

    @property
    def first(self) -> str:
        """The first non-blank line ("" for an empty file)."""
        return next((ln for ln in self.lines if ln.strip()), "")


@dataclass(frozen=True, kw_only=True)
class LineReader:
    """Records one line at a time: ``parse(line)`` gives ``(step, names, values)`` or None."""

    parse: Callable[[str], Parsed | None]
    """One decoded line (no newline) -> its record, or None."""
    strict: bool = False
    """Every non-blank line should be a record: one that does not parse counts as a skipped line (JSONL)."""
    console_events: bool = False
    """Failure lines and tracebacks are looked for too, by the console scan over the same file (its records
    discarded): a console log whose records this reader reads (NeMo-RL), not a record file (JSONL)."""


@dataclass(frozen=True, kw_only=True)
class ConsoleReader:
    """The shared keyword scan of console logs (:mod:`..scan.reader`): metric heads, failure lines and tracebacks
    in one pass. Its line grammars are verl's, Megatron-LM's and the pipe records; ``grammar`` picks whose heads
    the export's fast path searches."""

    grammar: str
    """The grammar (the name of the format whose records it reads)."""
    shows: Callable[[str], bool]
    """True when the head of a file shows this grammar's records (the export then searches only its heads)."""
    always: bool = True
    """Searched in every console log (False: only in files sniffed as this format)."""


@dataclass(frozen=True, kw_only=True)
class FileReader:
    """A format read by its own loader (binary files)."""

    records: Callable[[list[Path], list[str]], Iterator[tuple[int, list[str], list[float], int]]]
    """``records(files, notes)`` -> ``(step, names, values, ordinal)`` in file order; problems go to ``notes``."""


Reader = LineReader | ConsoleReader | FileReader


@dataclass(frozen=True, kw_only=True)
class LogFormat:
    """One log format: how it is recognised, read and understood."""

    name: str
    """The format's name (``RunLog.format``, the ``format`` key of ``mlite logs check --json``)."""
    label: str
    """A few words for people (``verl console``, ``Megatron-LM``)."""
    reader: Reader | Callable[[LogSource], Reader]
    """How its records are read (a function of the source when it depends on the file)."""
    sniff: Callable[[Head], bool] | None = None
    """True when the head of a text file is this format (None: recognised by ``claims`` only)."""
    rank: int = 50
    """Sniff order: lower first; the default format (verl console) sniffs last."""
    claims: Callable[[Path], bool] | None = None
    """True for a path this format reads whatever its content (checked before any sniff)."""
    open_source: Callable[[Path], LogSource] | None = None
    """The source of a claimed path (None: the path is one file, read as it is)."""
    roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Role (``loss``, ``grad_norm``, ``kl``, ``entropy``, ``reward``, ``lr``, ``throughput``, ``val_loss``) ->
    the metric names that play it in this format, in order of preference."""
    markers: Callable[[str], bool] | None = None
    """True when the head of a log without records shows this trainer (None: never said)."""
    refine: bool = False
    """The sniff is a guess the first record corrects (console logs: a verl sniff with Megatron records)."""
    no_metrics: str | Callable[[LogSource], str] = "no metric record in the file"
    """The ``no_metrics`` event's message (a function of the source when it can say more)."""

    def reader_for(self, source: LogSource) -> Reader:
        """The reader of ``source``."""
        r = self.reader
        return r if isinstance(r, (LineReader, ConsoleReader, FileReader)) else r(source)

    def no_metrics_message(self, source: LogSource) -> str:
        """What the ``no_metrics`` event of ``source`` says."""
        return self.no_metrics if isinstance(self.no_metrics, str) else self.no_metrics(source)


_ENTRIES: dict[str, LogFormat] = {}


def register(fmt: LogFormat) -> LogFormat:
    """Add ``fmt`` (after the formats registered before it); its name must be new."""
    if fmt.name == UNKNOWN or fmt.name in _ENTRIES:
        raise ValueError(f"log format '{fmt.name}' is already registered: give the new format another name")
    if fmt.sniff is None and fmt.claims is None:
        raise ValueError(f"log format '{fmt.name}' has neither a sniff nor a claims function: give one")
    _ENTRIES[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    """Remove the format called ``name``."""
    if _ENTRIES.pop(name, None) is None:
        raise ValueError(f"log format '{name}' is not registered (registered: {', '.join(_ENTRIES)})")


@contextmanager
def registered(fmt: LogFormat):
    """``with registered(FMT):`` the format is read inside the block only."""
    register(fmt)
    try:
        yield fmt
    finally:
        unregister(fmt.name)


def entries() -> tuple[LogFormat, ...]:
    """Every registered format, in registration order."""
    return tuple(_ENTRIES.values())


def get(name: str) -> LogFormat | None:
    """The format called ``name`` (None for ``unknown`` or a name not registered)."""
    return _ENTRIES.get(name)


def names() -> tuple[str, ...]:
    """The format names a run can have: every registered format, then ``unknown``."""
    return (*_ENTRIES, UNKNOWN)


def sniffers() -> list[LogFormat]:
    """The formats with a sniff, in sniff order (rank, then registration)."""
    return sorted((f for f in _ENTRIES.values() if f.sniff is not None), key=lambda f: f.rank)


def claimants() -> list[LogFormat]:
    """The formats that claim paths, in registration order."""
    return [f for f in _ENTRIES.values() if f.claims is not None]


def claimed(path: Path) -> LogFormat | None:
    """The format that claims ``path``, or None."""
    return next((f for f in claimants() if f.claims is not None and f.claims(path)), None)
