"""Series events over the metric values, fed one step record at a time (memory independent of the log length):

* ``nan`` / ``inf``: a metric that prints NaN or +-inf; one event per metric and stretch of consecutive
  non-finite records. Megatron's ``number of nan iterations`` > 0 is reported as ``nan`` too.
* ``spike``: the loss role and every grad-norm metric, by :class:`spikes.SpikeDetector` (a short-history rule
  from the third record on, the rolling median / MAD rule after that); consecutive spike records fold into one
  event.
* ``change_point``: a slow upward drift of the loss role, a grad norm or the KL, by :class:`drift.DriftDetector`
  (CUSUM); the event's step is where the drift started.
* ``restart``: the step goes back (a run resumed from an earlier checkpoint into the same log).
* ``kl_zero``: ``actor/ppo_kl`` (or ``actor/kl_loss``) is exactly 0 at every record. The message says whether
  ``actor/pg_clipfrac`` is zero too: then the policy ratio is 1 everywhere, which a fully on-policy
  configuration (one PPO epoch, mini-batch = batch) explains.
"""

from __future__ import annotations

import math
from typing import Any

from ..records import Event
from .drift import DriftDetector
from .roles import CLIPFRAC_METRIC, KL_METRICS, all_role_candidates
from .spikes import SpikeDetector


class _Spike(SpikeDetector):
    __slots__ = ("event", "last_step")

    def __init__(self) -> None:
        super().__init__()
        self.event: Event | None = None
        self.last_step: int | None = None


class SeriesWatch:
    """Series events over step records, fed in file order; :meth:`finish` returns them."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.last_step: int | None = None
        self._known: set[str] = set()
        self._open_nonfinite: dict[str, list] = {}
        self._spikes: dict[str, _Spike] = {}
        self._drifts: dict[str, DriftDetector] = {}
        self.loss_span: list | None = None
        """``[metric, first finite value, last finite value]`` of the loss role (for the one-line verdict)."""
        self._loss_metric: str | None = None
        self._loss_cands = all_role_candidates("loss")
        self._grad_cands = all_role_candidates("grad_norm")
        # metric -> [all zero so far, records seen, first step, first line]
        self._zero: dict[str, list[Any]] = {m: [True, 0, None, None] for m in KL_METRICS + (CLIPFRAC_METRIC,)}
        self._pg_range: list[float] = [math.inf, -math.inf]

    def update(self, step: int, keys: list[str], vals: list[float], line: int, resumed: bool = False) -> None:
        """One record (a metric line); ``resumed``: the first record after a requeue the reader already reported
        as a restart (no second restart event when the step goes back)."""
        if self.last_step is not None and step < self.last_step and not resumed:
            self.events.append(
                Event(
                    kind="restart",
                    line=line,
                    step=step,
                    message=(
                        f"step goes back from {self.last_step} to {step}: the run restarted (resumed from an earlier "
                        f"checkpoint?); the wide view keeps the later value of a repeated step"
                    ),
                )
            )
        self.last_step = step
        if not self._known.issuperset(keys):
            self._new_metrics(keys)
        total = sum(vals)
        if self._open_nonfinite or total - total != 0:
            self._nonfinite(step, keys, vals, line)
        d = dict(zip(keys, vals))
        for name, sp in self._spikes.items():
            v = d.get(name)
            if v is not None and v == v and abs(v) != math.inf:
                self._spike(sp, name, step, v, line)
        lm = self._loss_metric
        if lm is not None:
            v = d.get(lm)
            if v is not None and math.isfinite(v):
                if self.loss_span is None:
                    self.loss_span = [lm, v, v]
                self.loss_span[2] = v
        for name, dr in self._drifts.items():
            v = d.get(name)
            if v is not None and math.isfinite(v):
                found = dr.push(v, (step, line))
                if found is not None:
                    self._change_point(name, step, *found)
        for name, z in self._zero.items():
            v = d.get(name)
            if v is not None:
                if z[1] == 0:
                    z[2], z[3] = step, line
                z[1] += 1
                if v != 0.0:
                    z[0] = False
        v = d.get("actor/pg_loss")
        if v is not None and v == v:
            self._pg_range[0] = min(self._pg_range[0], v)
            self._pg_range[1] = max(self._pg_range[1], v)
        v = d.get("nan_iterations")
        if v and v == v and v > 0:
            self.events.append(
                Event(
                    kind="nan",
                    line=line,
                    step=step,
                    metric="nan_iterations",
                    message=(f"Megatron counted {int(v)} NaN iteration(s) in the interval ending at iteration {step}"),
                )
            )

    def _new_metrics(self, keys: list[str]) -> None:
        new = set(keys) - self._known
        self._known |= new
        if self._loss_metric is None:
            for cand in _ordered(self._loss_cands, keys):
                self._loss_metric = cand
                self._spikes[cand] = _Spike()
                self._drifts[cand] = DriftDetector()
                break
        for name in new:
            if name in self._grad_cands:
                self._spikes[name] = _Spike()
                self._drifts[name] = DriftDetector()
            elif name in KL_METRICS:
                self._drifts[name] = DriftDetector()

    def _nonfinite(self, step: int, keys: list[str], vals: list[float], line: int) -> None:
        for name, v in zip(keys, vals):
            bad = v != v or abs(v) == math.inf
            cur = self._open_nonfinite.get(name)
            if bad:
                kind = "nan" if v != v else "inf"
                if cur is not None and cur[0].kind == kind:
                    cur[1] += 1
                    cur[2] = step
                    continue
                if cur is not None:
                    self._close_nonfinite(name)
                ev = Event(kind=kind, line=line, step=step, metric=name, message="")
                self._open_nonfinite[name] = [ev, 1, step]
                self.events.append(ev)
            elif cur is not None:
                self._close_nonfinite(name)

    def _close_nonfinite(self, name: str) -> None:
        ev, n, last = self._open_nonfinite.pop(name)
        what = "NaN" if ev.kind == "nan" else "inf"
        ev.message = (
            f"{name} is {what} at step {ev.step}"
            if n == 1
            else f"{name} is {what} at {n} consecutive records, steps {ev.step}..{last}"
        )

    def _spike(self, sp: _Spike, name: str, step: int, v: float, line: int) -> None:
        z = sp.push(v)
        if z is None:
            sp.event = None
            return
        if sp.event is not None and sp.last_step is not None and step >= sp.last_step:
            sp.event.count += 1
            sp.event.message = sp.event.message.split(" [")[0] + f" [{sp.event.count} consecutive records]"
        else:
            sp.event = Event(
                kind="spike",
                line=line,
                step=step,
                metric=name,
                message=f"{name} = {v:.6g} at step {step}: {sp.describe(v, z)}",
            )
            self.events.append(sp.event)
        sp.last_step = step

    def _change_point(self, name: str, step: int, start: tuple, base: float, level: float) -> None:
        s0, l0 = start
        rel = f" ({level / base:.3g}x)" if base > 0 and level > 0 else ""
        self.events.append(
            Event(
                kind="change_point",
                line=l0,
                step=s0,
                metric=name,
                message=(
                    f"{name} drifts upward from step {s0}: baseline {base:.6g}, {level:.6g} at step {step}{rel} (CUSUM)"
                ),
            )
        )

    def finish(self) -> list[Event]:
        """Close open stretches, add ``kl_zero`` events; the series events in line order."""
        for name in list(self._open_nonfinite):
            self._close_nonfinite(name)
        for ev in self.events:  # folded spikes carry their count in the message, not as a fold count
            if ev.kind == "spike":
                ev.count = 1
        clip = self._zero[CLIPFRAC_METRIC]
        clip_zero = clip[1] > 0 and clip[0]
        for name in KL_METRICS:
            all_zero, n, step, line = self._zero[name]
            if not (n and all_zero):
                continue
            if name == "actor/kl_loss":
                msg = (
                    f"{name} is exactly 0 at all {n} records: with use_kl_loss the actor never moved away "
                    f"from the reference policy (or the reference is the actor itself)"
                )
            elif clip_zero:
                msg = (
                    f"{name} is exactly 0 at all {n} records and {CLIPFRAC_METRIC} is 0 too: the policy ratio "
                    f"is 1 everywhere, as in a fully on-policy configuration (one PPO epoch, mini-batch = "
                    f"batch); a red flag only if the run is off-policy or actor/pg_loss is flat"
                )
            elif clip[1]:
                msg = (
                    f"{name} is exactly 0 at all {n} records while {CLIPFRAC_METRIC} is not: the ratio moves "
                    f"but the KL does not; check how it is computed and logged"
                )
            else:
                msg = f"{name} is exactly 0 at all {n} records"
            lo, hi = self._pg_range
            if lo == hi and lo != math.inf and n > 1:
                msg += f"; actor/pg_loss is flat ({lo:g}): the policy is not learning"
            self.events.append(Event(kind="kl_zero", line=line, step=step, metric=name, message=msg))
        self.events.sort(key=lambda e: e.line or 0)
        return self.events


def _ordered(cands: frozenset[str], keys: list[str]):
    from .roles import candidates

    present = set(keys)
    for name in candidates("loss"):
        if name in present and name in cands:
            yield name
