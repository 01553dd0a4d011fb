"""Series events over the metric values, fed one step record at a time (memory independent of the log length):

* ``nan`` / ``inf``: a metric that prints NaN or +-inf; one event per metric and stretch of consecutive
  non-finite records. Megatron's ``number of nan iterations`` > 0 is reported as ``nan`` too.
* ``spike``: the loss role and every grad-norm metric are compared with a robust rolling baseline: the
  median and MAD (median absolute deviation, times 1.4826 so it estimates a standard deviation) of the
  previous ``SPIKE_WINDOW`` finite values. A value is a spike when it exceeds the median by more than
  ``SPIKE_Z`` x max(1.4826 MAD, ``SPIKE_REL_FLOOR`` x |median|); the floor keeps quantised 3-decimal logs
  (MAD = 0) and small wobbles from counting. Only upward jumps count (a falling loss is not a failure);
  consecutive spike records fold into one event. No verdict before ``SPIKE_MIN_HISTORY`` values.
* ``restart``: the step goes back (a run resumed from an earlier checkpoint into the same log).
* ``kl_zero``: ``actor/ppo_kl`` (or ``actor/kl_loss``) is exactly 0 at every record. The message says whether
  ``actor/pg_clipfrac`` is zero too: then the policy ratio is 1 everywhere, which a fully on-policy
  configuration (one PPO epoch, mini-batch = batch) explains.
"""

from __future__ import annotations

import math
from collections import deque

from .records import Event
from .roles import CLIPFRAC_METRIC, KL_METRICS, all_role_candidates

SPIKE_WINDOW = 25
"""Previous finite values the rolling median / MAD are taken over."""
SPIKE_MIN_HISTORY = 10
"""Values needed before a spike verdict."""
SPIKE_Z = 6.0
"""Robust z-score above which a value is a spike."""
SPIKE_REL_FLOOR = 0.1
"""The scale never goes below this fraction of |median| (quantised logs have MAD = 0)."""


class _Spike:
    __slots__ = ("hist", "med", "scale", "age", "event", "last_step")

    def __init__(self):
        self.hist: deque = deque(maxlen=SPIKE_WINDOW)
        self.med = 0.0
        self.scale = 0.0
        self.age = 0
        self.event: Event | None = None
        self.last_step: int | None = None

    def _refresh(self) -> None:
        h = sorted(self.hist)
        n = len(h)
        med = h[n // 2] if n % 2 else 0.5 * (h[n // 2 - 1] + h[n // 2])
        dev = sorted(abs(x - med) for x in h)
        mad = dev[n // 2] if n % 2 else 0.5 * (dev[n // 2 - 1] + dev[n // 2])
        self.med = med
        self.scale = max(1.4826 * mad, SPIKE_REL_FLOOR * abs(med), 1e-12)
        self.age = 0

    def push(self, x: float) -> float | None:
        """Robust z of ``x`` against the previous values when it is a spike, else None; then remember it."""
        z = None
        if len(self.hist) >= SPIKE_MIN_HISTORY:
            if self.age >= 4 or len(self.hist) < SPIKE_WINDOW:
                self._refresh()
            self.age += 1
            zz = (x - self.med) / self.scale
            if zz > SPIKE_Z:
                z = zz
        self.hist.append(x)
        return z


class SeriesWatch:
    """Series events over step records, fed in file order; :meth:`finish` returns them."""

    def __init__(self):
        self.events: list[Event] = []
        self.last_step: int | None = None
        self._known: set[str] = set()
        self._open_nonfinite: dict[str, list] = {}
        self._spikes: dict[str, _Spike] = {}
        self._loss_metric: str | None = None
        self._loss_cands = all_role_candidates("loss")
        self._grad_cands = all_role_candidates("grad_norm")
        self._zero = {m: [True, 0, None, None] for m in KL_METRICS + (CLIPFRAC_METRIC,)}
        self._pg_range: list[float] = [math.inf, -math.inf]

    def update(self, step: int, keys: list[str], vals: list[float], line: int) -> None:
        """One record (a metric line)."""
        if self.last_step is not None and step < self.last_step:
            self.events.append(Event(kind="restart", line=line, step=step, message=(
                f"step goes back from {self.last_step} to {step}: the run restarted (resumed from an earlier "
                f"checkpoint?); the wide view keeps the later value of a repeated step")))
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
            self.events.append(Event(kind="nan", line=line, step=step, metric="nan_iterations", message=(
                f"Megatron counted {int(v)} NaN iteration(s) in the interval ending at iteration {step}")))

    def _new_metrics(self, keys: list[str]) -> None:
        new = set(keys) - self._known
        self._known |= new
        if self._loss_metric is None:
            for cand in _ordered(self._loss_cands, keys):
                self._loss_metric = cand
                self._spikes[cand] = _Spike()
                break
        for name in new:
            if name in self._grad_cands:
                self._spikes[name] = _Spike()

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
        ev.message = (f"{name} is {what} at step {ev.step}" if n == 1 else
                      f"{name} is {what} at {n} consecutive records, steps {ev.step}..{last}")

    def _spike(self, sp: _Spike, name: str, step: int, v: float, line: int) -> None:
        z = sp.push(v)
        if z is None:
            sp.event = None
            return
        if sp.event is not None and sp.last_step is not None and step >= sp.last_step:
            sp.event.count += 1
            sp.event.message = sp.event.message.split(" [")[0] + f" [{sp.event.count} consecutive records]"
        else:
            sp.event = Event(kind="spike", line=line, step=step, metric=name, message=(
                f"{name} = {v:.6g} at step {step}: {z:.1f} robust sigmas above the rolling median "
                f"{sp.med:.6g} of the previous {len(sp.hist) - 1} values"))
            self.events.append(sp.event)
        sp.last_step = step

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
                msg = (f"{name} is exactly 0 at all {n} records: with use_kl_loss the actor never moved away "
                       f"from the reference policy (or the reference is the actor itself)")
            elif clip_zero:
                msg = (f"{name} is exactly 0 at all {n} records and {CLIPFRAC_METRIC} is 0 too: the policy ratio "
                       f"is 1 everywhere, as in a fully on-policy configuration (one PPO epoch, mini-batch = "
                       f"batch); a red flag only if the run is off-policy or actor/pg_loss is flat")
            elif clip[1]:
                msg = (f"{name} is exactly 0 at all {n} records while {CLIPFRAC_METRIC} is not: the ratio moves "
                       f"but the KL does not; check how it is computed and logged")
            else:
                msg = f"{name} is exactly 0 at all {n} records"
            lo, hi = self._pg_range
            if lo == hi and lo != math.inf and n > 1:
                msg += f"; actor/pg_loss is flat ({lo:g}): the policy is not learning"
            self.events.append(Event(kind="kl_zero", line=line, step=step, metric=name, message=msg))
        self.events.sort(key=lambda e: (e.line or 0))
        return self.events


def _ordered(cands: frozenset[str], keys: list[str]):
    from .roles import candidates

    present = set(keys)
    for name in candidates("loss"):
        if name in present and name in cands:
            yield name
