"""TensorBoard event files (``events.out.tfevents.*``): the scalars of a run, with the tag names as written
(``actor/pg_loss`` from verl's ``trainer.logger=[tensorboard]``, ``lm loss`` / ``grad-norm`` / ``learning-rate``
from Megatron-LM's ``--tensorboard-dir``).

Read with TensorBoard's own event loader (``tensorboard.backend.event_processing.event_file_loader``), chosen
over tbparse and over TensorBoard's ``EventAccumulator``: it is maintained with TensorBoard itself (installed
with verl), reads without TensorFlow, and streams one event at a time, so memory stays flat for any file size;
``EventAccumulator`` keeps a random reservoir of 10,000 values per tag unless told otherwise, and tbparse
builds pandas frames of everything in memory on top of it (and would be one more dependency).

Both scalar encodings are read: TF1 / PyTorch ``SummaryWriter`` ``simple_value`` (float32) and TF2
``tf.summary.scalar`` tensors (plugin ``scalars``, any numeric dtype). Images, histograms and text are
skipped. Consecutive events with the same step form one record (a writer emits one event per tag); a step
that goes back is a restart, as in a console log. Several event files of one directory (a run resumed into the
same logdir) are read in the order of their names (TensorBoard puts the creation time there). The loader stops
quietly at a truncated last record (a writer still running); an undecodable record ends the read with a note.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import MliteError
from ..input.source import LogSource, is_text_log
from . import megatron, verl_console
from .registry import FileReader, LogFormat

NAME = "tensorboard"
"""The format's name."""

MARKER = ".tfevents."
"""In the name of every TensorBoard event file."""


def is_event_file(path: Path) -> bool:
    """True for a TensorBoard event file (by its name)."""
    return MARKER in path.name and path.is_file()


def event_files(directory: Path) -> list[Path]:
    """The event files directly in ``directory``, in name order (TensorBoard names start with the time)."""
    try:
        return sorted(p for p in directory.iterdir() if is_event_file(p))
    except OSError:
        return []


def files_of(path: Path) -> list[Path]:
    """The event files a TensorBoard source stands for: the file itself, or the event files of a directory."""
    return event_files(path) if path.is_dir() else [path]


def _loader():
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        raise MliteError(
            "reading TensorBoard event files needs the tensorboard package "
            "(pip install tensorboard); console and JSONL logs read without it"
        ) from None
    return EventFileLoader, tensor_util


def _scalar(value, tensor_util) -> float | None:
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind != "tensor":
        return None
    t = value.tensor
    if t.tensor_shape.dim and any(d.size != 1 for d in t.tensor_shape.dim):
        return None
    plugin = value.metadata.plugin_data.plugin_name
    if plugin and plugin != "scalars":
        return None
    try:
        arr = tensor_util.make_ndarray(t)
    except (TypeError, ValueError):
        return None
    if arr.dtype.kind not in "fiub" or arr.size != 1:
        return None
    return float(arr.reshape(()).item())


def records(paths: list[Path], notes: list[str]):
    """``(step, keys, values, ordinal)`` per record of the event files ``paths``, in file order; ``ordinal`` is
    the 1-based number of the record's first event (the 'line' of events found in it)."""
    loader_cls, tensor_util = _loader()
    from google.protobuf.message import DecodeError

    ordinal = 0
    for path in paths:
        step: int | None = None
        keys: list[str] = []
        vals: list[float] = []
        first = 0
        try:
            for event in loader_cls(str(path)).Load():
                ordinal += 1
                if not event.HasField("summary"):
                    continue
                read = [(v.tag, _scalar(v, tensor_util)) for v in event.summary.value]
                got = [(k, x) for k, x in read if x is not None]
                if not got:
                    continue
                if event.step != step or any(k in keys for k, _ in got):
                    if keys:
                        yield step, keys, vals, first
                    step, keys, vals, first = event.step, [], [], ordinal
                for k, x in got:
                    keys.append(k)
                    vals.append(x)
        except (DecodeError, OSError) as e:
            notes.append(
                f"{path.name}: stopped reading at an unreadable record ({type(e).__name__}); everything "
                f"before it was read"
            )
        if keys:
            yield step, keys, vals, first


def is_tensorboard_dir(path: Path) -> bool:
    """A TensorBoard logdir: a directory with event files directly in it and no other log file (a folder that
    also holds Slurm logs stands for its files, each event file a source of its own)."""
    if not path.is_dir() or not event_files(path):
        return False
    return not any(is_text_log(c) for c in path.iterdir())


def claims(path: Path) -> bool:
    """An event file, or a logdir of them."""
    return is_event_file(path) or is_tensorboard_dir(path)


def open_source(path: Path) -> LogSource:
    """One source per event file or logdir, named after the logdir."""
    name = path.name if path.is_dir() else (path.parent.name or path.name)
    return LogSource(path=path, name=name, fmt=NAME, metrics_path=path, events_path=None, files=tuple(files_of(path)))


ROLES = {
    r: verl_console.ROLES.get(r, ()) + megatron.ROLES.get(r, ())
    for r in sorted(set(verl_console.ROLES) | set(megatron.ROLES))
}
"""The tags verl's and Megatron's TensorBoard loggers write (the names of their consoles)."""

FORMAT = LogFormat(
    name=NAME,
    label="TensorBoard",
    reader=FileReader(records=records),
    claims=claims,
    open_source=open_source,
    roles=ROLES,
    no_metrics="no scalar in the TensorBoard event file(s) (only images, histograms or text, or nothing written yet)",
)
"""TensorBoard event files (``trainer.logger=[tensorboard]``, Megatron's ``--tensorboard-dir``)."""
