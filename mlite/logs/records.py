"""The tidy record and event types every reader produces.

A log is read into *step records* (one per metric line: the step, the line number and ``{metric: value}``)
and *events* (a finding at a line: a NaN, a spike, a CUDA OOM, a Slurm cancellation...). Everything else
(DataFrames, plots, the CLI's JSON) is built from these two types.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

EVENT_KINDS = (
    "nan",
    "inf",
    "spike",
    "change_point",
    "kl_zero",
    "restart",
    "oom",
    "nccl_timeout",
    "cancelled",
    "time_limit",
    "preempted",
    "node_failure",
    "requeued",
    "exit_code",
    "traceback",
    "no_metrics",
)
"""Every event kind, in the order the CLI documents them (public contract: ``mlite logs check --json``)."""

ERROR_KINDS = frozenset(
    {
        "nan",
        "inf",
        "oom",
        "nccl_timeout",
        "cancelled",
        "time_limit",
        "preempted",
        "node_failure",
        "requeued",
        "exit_code",
        "traceback",
        "no_metrics",
    }
)
"""Kinds that mean the run failed or produced nothing usable; ``check --strict`` exits 1 on them.
The others (``spike``, ``change_point``, ``kl_zero``, ``restart``) are warnings: worth a look, often explained by
the config. A job that was cancelled, preempted or requeued and then resumed in the same log reports a
``restart`` (the interruption is in its message), not the interruption."""

WARNING_KINDS = tuple(k for k in EVENT_KINDS if k not in ERROR_KINDS)
"""The warning kinds, in :data:`EVENT_KINDS` order."""

INTERRUPTION_KINDS = frozenset({"cancelled", "time_limit", "preempted", "node_failure", "requeued"})
"""Scheduler endings that become a ``restart`` when metric records follow them (a requeued job resumed)."""


@dataclass(kw_only=True, slots=True)
class StepRecord:
    """The metrics one log line (or one JSONL object) gives for one step."""

    step: int
    """Training step (verl ``step:N``, Megatron ``iteration N``, JSONL ``"step"``)."""
    line: int
    """1-based line number in the file the record was read from (TensorBoard: the ordinal of its first event)."""
    values: dict[str, float]
    """Metric name -> value (float64; NaN and +-inf kept as they were printed)."""


@dataclass(kw_only=True, slots=True)
class Event:
    """A finding in a log: what, where (line and step), which metric, and one line that explains it."""

    kind: str
    """One of :data:`EVENT_KINDS`."""
    line: int | None
    """1-based line number the event was found at (None when it is about the whole file)."""
    step: int | None
    """The step it concerns (for text events: the last step printed before that line; None before any)."""
    metric: str | None = None
    """The metric concerned (nan/inf/spike/change_point/kl_zero), else None."""
    message: str = ""
    """One line for humans."""
    count: int = field(default=1, repr=False)
    """How many identical findings were folded into this one (same kind and message)."""

    def to_dict(self) -> dict:
        """The JSON object of ``mlite logs check --json``: kind, line, step, metric, message."""
        d = asdict(self)
        d.pop("count")
        return d
