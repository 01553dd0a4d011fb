"""Text events: failures a log states at a line — CUDA / host OOM, NCCL watchdog timeouts, scheduler endings
(Slurm cancellations for a time limit, a preemption, a node failure or a requeue, in every wording found in real
logs: see :data:`SLURM_RE`, also when a copy wrapped the line before its verb; srun's node failures; submitit's
preemption / timeout / requeue notes), srun task exits, DeepSpeed's launcher ending and other exit codes, Megatron-LLM's
bad-grad-norm warning (a ``nan`` event), Python tracebacks and Ray's ``RayTaskError`` — and the kit's
``[mlite] status: ...`` lines. The patterns search anywhere in a line: indentation, line numbers of a copy and the
prefixes of Ray, torchrun and srun (:func:`..input.text.split_prefix`) do not hide them.

The reader searches each block for the byte strings of :data:`LINE_KEYWORDS` (a cheap ``bytes.find`` before any
regex) and hands the matching lines to :func:`classify_line`; a traceback header starts a
:class:`TracebackWalker` that follows it to its exception line. :func:`fold` merges repeats (every rank printing
the same error). Events computed from the metric values (NaN/inf, spikes, restarts, KL identically zero) are in
:mod:`mlite.logs.series`.
"""

from __future__ import annotations

import re
import signal

from ...rundir import FAILED, LIFECYCLE_PREFIX, STATUS_PREFIX, STOPPED
from ..input.text import clean, split_prefix
from ..records import Event

LINE_KEYWORDS = (
    b"Traceback (most recent call last)",
    b"RayTaskError",
    b"of memory",
    b"OfMemory",
    b"oom_kill",
    b"oom-kill",
    b"OOMKilled",
    b"atchdog",
    b"timed out",
    b"Timeout at NCCL",
    b"CANCELLED",
    b"STEPD TERMINATED",
    b"xit code",
    b"exitcode",
    b"srun: error",
    b"Node failure",
    b"Requeued job",
    b"job is preempted",
    b"sigkill_handler]",
    b"Bad grad_norm",
    LIFECYCLE_PREFIX.encode(),
)
"""Byte strings whose lines may hold a text event (searched with ``bytes.find`` before any regex)."""

_OOM_RE = re.compile(
    r"OutOfMemoryError|(?:CUDA|HIP|XPU|NPU|MPS) out of memory|oom[-_]kill|OOMKilled"
    r"|Out of memory: Kill|[Ee]rror\b.*out of memory|out of memory.*Tried to allocate"
)
_NCCL_RE = re.compile(
    r"Watchdog caught collective operation timeout|Timeout at NCCL work"
    r"|NCCL operations have failed or timed out|Heartbeat monitor timed out"
    r"|(?:NCCL|collective|ProcessGroup\w*|all_?reduce|all_?gather|reduce_?scatter|barrier)\b.*timed out"
    r"|[Ww]atchdog.*[Tt]imeout",
    re.IGNORECASE,
)
SLURM_RE = re.compile(
    r"\b(JOB|STEP)(?: (\d[\w.+\[\]-]*))?(?: ON (\S+))? (CANCELLED|STEPD TERMINATED)(?: ON (\S+))?(?: AT (\S+))?"
    r"(?: DUE TO ([A-Z][A-Za-z ,_]*?))?(?: on (\S+))?(?: \*\*\*(?: on (\S+))?|\s*$)"
)
"""slurmstepd's ending line in the wordings of real logs: ``*** JOB 524549 ON ault43 CANCELLED AT <t> ***``,
``... DUE TO TIME LIMIT ***`` / ``PREEMPTION`` / ``NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS`` / ``JOB REQUEUE``,
``*** STEP 32233190.0 ON nid01934 CANCELLED AT ...``, older Slurm's ``*** JOB 830329 CANCELLED AT <t> DUE TO TIME
LIMIT on n447 ***`` and ``*** JOB 1479012 CANCELLED AT <t> *** on sh-2-3``, and without a time
(``*** JOB 454600 CANCELLED DUE TO TIME LIMIT ***``, ``JOB CANCELLED DUE TO TIME LIMIT``)."""
_SLURM_TAIL_RE = re.compile(
    r"^\s*(CANCELLED|STEPD TERMINATED)(?: AT (\S+))?(?: DUE TO ([A-Z][A-Za-z ,_]*?))? \*\*\*\s*$"
)
"""The end of slurmstepd's line when a copy wrapped it before the verb (log 40): ``*** STEP 24928305.interactive
ON nc10433`` / ``CANCELLED AT 2024-01-27T23:38:18 DUE TO TIME LIMIT ***``; the wrapped line starts with the verb."""
_DUE_KINDS = (
    ("TIME LIMIT", "time_limit"),
    ("PREEMPT", "preempted"),
    ("NODE FAIL", "node_failure"),
    ("REQUEUE", "requeued"),
)
_NODE_FAIL_RE = re.compile(r"srun: error: Node failure on (\S+)|\bNODE_FAIL\b")
_SUBMITIT_RE = re.compile(
    r"(Requeued job (\S+)(?: \(([^)]*)\))?)|(Caught signal (\w+) on (\S+): this job is preempted)"
    r"|(Job has timed out\. Ran [^.]*)"
)
_SRUN_RE = re.compile(
    r"srun: error: (\S+): tasks? ([\d,\-\[\]]+): (Exited with exit code (\d+)|Killed|Terminated"
    r"|Segmentation fault.*|Aborted.*|Bus error.*)"
)
_DEEPSPEED_RE = re.compile(r"\[launch\.py:\d+:sigkill_handler\].*\bexits with return code = (-?\d+)\s*$")
"""DeepSpeed's launcher when a rank dies (``deepspeed/launcher/launch.py::sigkill_handler``, log 43):
``[ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', ...] exits with return code = -9``;
a negative code is the signal that killed the rank."""
_BAD_GRAD_RE = re.compile(r"\*\*\*WARNING\*\*\* Bad grad_norm detected \(grad_norm=([^)]*)\)")
"""Megatron-LLM's skipped update (``megatron/optimizer/optimizer.py``, epfLLM/Megatron-LLM PR #34, log 44): the
iteration after it is counted as skipped and prints no grad norm."""
_EXIT_RE = re.compile(r"\b(?:[Ee]xit(?:ed)? (?:with )?(?:exit )?code|exitcode)\s*[:=]?\s*(-?\d+)")
_MLITE_RE = re.compile(re.escape(STATUS_PREFIX) + r"(\w+)(.*)")
_MAX_MSG = 300


def _msg(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MSG else text[: _MAX_MSG - 3] + "..."


def classify_line(raw: str, line: int, step: int | None) -> list[Event]:
    """Text events in one line (usually none or one); ``raw`` may carry ANSI codes and prefixes."""
    text = clean(raw)
    out: list[Event] = []

    def add(kind: str, message: str) -> None:
        out.append(Event(kind=kind, line=line, step=step, message=_msg(message)))

    m = _MLITE_RE.search(text)
    if m:
        status, why = m.group(1).lower(), m.group(2).strip(" :-()")
        if status == FAILED:
            kind = "oom" if _OOM_RE.search(why) or "out of memory" in why.lower() else "exit_code"
            add(kind, f"mlite run failed{': ' + why if why else ''}")
        elif status in (STOPPED, "cancelled", "canceled"):
            add("cancelled", f"mlite run {status}{': ' + why if why else ''}")
        return out
    m = SLURM_RE.search(text)
    if m:
        node = m.group(3) or m.group(5) or m.group(8) or m.group(9)
        what = m.group(1).lower() + (" " + m.group(2) if m.group(2) else "") + (" on " + node if node else "")
        add(*_slurm_ending(what, m.group(4), m.group(6), m.group(7)))
        return out
    m = _SLURM_TAIL_RE.match(split_prefix(text)[1])
    if m:
        kind, msg = _slurm_ending("job or step", m.group(1), m.group(2), m.group(3))
        add(kind, msg + " (the end of a wrapped slurmstepd line: its job id is on the line before)")
        return out
    m = _DEEPSPEED_RE.search(text)
    if m:
        add("exit_code", _deepspeed_exit(int(m.group(1))))
        return out
    m = _BAD_GRAD_RE.search(text)
    if m:
        after = f" after step {step}" if step is not None else ""
        out.append(
            Event(
                kind="nan",
                line=line,
                step=step,
                metric="grad_norm",
                message=f"bad grad norm ({m.group(1)}){after}: the optimizer skipped the next iteration's update",
            )
        )
        return out
    m = _NODE_FAIL_RE.search(text)
    if m:
        add("node_failure", m.group(0) if m.group(1) else split_prefix(text)[1].strip())
        return out
    m = _SUBMITIT_RE.search(text)
    if m:
        if m.group(1):
            add("requeued", f"job {m.group(2)} requeued" + (f" ({m.group(3)})" if m.group(3) else ""))
        elif m.group(4):
            add("preempted", f"caught {m.group(5)} on {m.group(6)}: the job is preempted (submitit)")
        else:
            add("time_limit", m.group(7).strip() + " (submitit)")
        return out
    m = _SRUN_RE.search(text)
    if m:
        code = m.group(4)
        if code is None or code != "0":
            what = f"exit code {code}" if code is not None else m.group(3).lower()
            add("exit_code", f"srun: task {m.group(2)} on {m.group(1)} exited with {what}")
        return out
    if _OOM_RE.search(text):
        add("oom", split_prefix(text)[1].strip())
    if _NCCL_RE.search(text):
        add("nccl_timeout", split_prefix(text)[1].strip())
    if not out:
        m = _EXIT_RE.search(text)
        if m and m.group(1) not in ("0", "-0") and "Traceback" not in text:
            add("exit_code", split_prefix(text)[1].strip())
    return out


def _slurm_ending(what: str, verb: str, at: str | None, due: str | None) -> tuple[str, str]:
    """``(kind, message)`` of slurmstepd's ending line: ``what`` (``job 524549 on ault43``), its verb, time, reason."""
    due = (due or "").strip(" ,")
    kind = next((k for word, k in _DUE_KINDS if word in due.upper()), "cancelled")
    done = "cancelled" if verb == "CANCELLED" else "terminated by slurmstepd"
    msg = f"Slurm {what} {done}" + (f" at {at}" if at else "") + (f" due to {due.lower()}" if due else "")
    return kind, msg


def _deepspeed_exit(code: int) -> str:
    """The message of DeepSpeed's ``exits with return code = N`` (a negative code named as its signal)."""
    why = ""
    if code < 0:
        try:
            why = f" (killed by {signal.Signals(-code).name})"
        except ValueError:
            why = ""
    return f"DeepSpeed launcher: a rank exited with return code {code}{why}; the launcher killed the others"


class TracebackWalker:
    """Follows a Python traceback from its header to the exception line, skipping lines that other
    processes interleaved (they carry another Ray / launcher prefix). Feed lines; a finished walker has
    :attr:`event` set. ``ray.exceptions.RayTaskError(X): ...`` is followed to its cause."""

    LIMIT = 500
    """Lines to look at before giving up (the event then names what was found)."""

    def __init__(self, header: str, line: int, step: int | None):
        prefix, _ = split_prefix(clean(header))
        self.prefix = prefix
        self.line = line
        self.step = step
        self.seen = 0
        self.ray: str | None = None
        self.event: Event | None = None
        self.last_line = line

    def feed(self, raw: str, line: int) -> bool:
        """Look at the next line; True when the traceback is complete."""
        self.seen += 1
        self.last_line = line
        if self.seen > self.LIMIT:
            return self.finish()
        text = clean(raw)
        prefix, rest = split_prefix(text)
        if (prefix and prefix != self.prefix) or not rest.strip():
            return False  # another process's line (Ray prints a multi-line message's prefix only once)
        if rest[0] in " \t" or rest.startswith("Traceback (most recent call last)"):
            return False
        if self.ray is None and "RayTaskError" in rest:
            self.ray = rest.strip()
            return False
        msg = f"{self.ray} -> {rest.strip()}" if self.ray else rest.strip()
        self.event = Event(kind="traceback", line=self.line, step=self.step, message=_msg(msg))
        return True

    @property
    def found(self) -> Event:
        """The event of a finished walker (once :meth:`feed` or :meth:`finish` returned True)."""
        if self.event is None:
            raise RuntimeError("TracebackWalker.found: the traceback is not complete yet")
        return self.event

    def finish(self) -> bool:
        """End of input or limit: emit what was found."""
        if self.event is None:
            msg = self.ray or "Python traceback (the exception line is missing: the log ends inside it)"
            self.event = Event(kind="traceback", line=self.line, step=self.step, message=_msg(msg))
        return True


_DIGITS_RE = re.compile(r"\d+")
_FOLD_BY_SHAPE = frozenset({"traceback", "oom", "nccl_timeout"})
_BURST = frozenset({"oom", "nccl_timeout"})
BURST_LINES = 200
"""An OOM or NCCL timeout within this many lines of the previous one is the same failure (the worker's
traceback, Ray's re-raise in the driver, the other ranks) and folds into it."""


def fold(events: list[Event]) -> list[Event]:
    """Fold repeated text events into the first one, which says ``(seen N times)``: the same kind and message;
    for tracebacks, OOMs and NCCL timeouts the same message up to its numbers (ranks, pids, timestamps); and
    an OOM / NCCL timeout that follows another within :data:`BURST_LINES` lines."""
    out: list[Event] = []
    index: dict[tuple[str, str], Event] = {}
    burst: dict[str, tuple[Event, int]] = {}  # kind -> (kept event, line of the latest one folded into it)
    for ev in events:
        key = (ev.kind, _DIGITS_RE.sub("#", ev.message) if ev.kind in _FOLD_BY_SHAPE else ev.message)
        first = index.get(key)
        if first is None and ev.kind in burst and ev.line is not None and ev.line - burst[ev.kind][1] <= BURST_LINES:
            first = burst[ev.kind][0]
        if first is not None:
            first.count += 1
            if ev.kind in _BURST and ev.line is not None:
                burst[ev.kind] = (first, ev.line)
            continue
        index[key] = ev
        if ev.kind in _BURST and ev.line is not None:
            burst[ev.kind] = (ev, ev.line)
        out.append(ev)
    for ev in out:
        if ev.count > 1:
            ev.message = f"{ev.message} (seen {ev.count} times)"
    return out
