"""Spike detection on one series (a loss or a grad norm), fed one finite value at a time.

Two rules, both upward only (a falling loss is not a failure):

* **short history** (2 to ``SPIKE_MIN_HISTORY - 1`` previous values, all positive): the value is a spike when it
  exceeds the median of the previous values by more than ``SHORT_Z`` times their range and by at least
  ``SPIKE_MIN_REL`` of the median. Pasted excerpts around the moment a run broke often hold only a few records
  before the jump (loss 2.67 -> 4.37 after two records); the range of so few values is the only spread there is.
  Series that cross zero (``actor/pg_loss``) have no relative size and wait for the rolling rule.
* **rolling robust rule** (``SPIKE_MIN_HISTORY`` previous values or more): the median and MAD (median absolute
  deviation, times 1.4826 so it estimates a standard deviation) of the previous ``SPIKE_WINDOW`` values; a
  spike exceeds the median by more than ``SPIKE_Z`` x max(1.4826 MAD, ``SPIKE_REL_FLOOR`` x |median|). The
  floor keeps quantised 3-decimal logs (MAD = 0) and small wobbles from counting.
"""

from __future__ import annotations

from collections import deque

SPIKE_WINDOW = 25
"""Previous finite values the rolling median / MAD are taken over."""
SPIKE_MIN_HISTORY = 10
"""Values needed before the rolling rule applies (the short-history rule covers the records before)."""
SPIKE_Z = 6.0
"""Robust z-score above which a value is a spike (rolling rule)."""
SPIKE_REL_FLOOR = 0.1
"""The rolling scale never goes below this fraction of |median| (quantised logs have MAD = 0)."""
SHORT_MIN_HISTORY = 2
"""Previous values the short-history rule needs: a verdict from the third record on."""
SHORT_Z = 4.0
"""Short history: the jump above the median must exceed this many times the range of the previous values."""
SPIKE_MIN_REL = 0.5
"""Short history: the jump above the median must also be at least this fraction of the median (x1.5)."""


def _median(sorted_vals: list[float]) -> float:
    n = len(sorted_vals)
    return sorted_vals[n // 2] if n % 2 else 0.5 * (sorted_vals[n // 2 - 1] + sorted_vals[n // 2])


class SpikeDetector:
    """The two rules above over one series; :meth:`push` says whether a value is a spike."""

    __slots__ = ("age", "hist", "med", "rule", "scale")

    def __init__(self) -> None:
        self.hist: deque = deque(maxlen=SPIKE_WINDOW)
        self.med = 0.0
        """Baseline (median of the previous values) of the last verdict."""
        self.scale = 0.0
        """Spread the last verdict was measured against."""
        self.age = 0
        self.rule = ""
        """``short`` or ``rolling``: the rule of the last verdict."""

    def _refresh(self) -> None:
        h = sorted(self.hist)
        med = _median(h)
        mad = _median(sorted(abs(x - med) for x in h))
        self.med = med
        self.scale = max(1.4826 * mad, SPIKE_REL_FLOOR * abs(med), 1e-12)
        self.age = 0

    def push(self, x: float) -> float | None:
        """How many spreads ``x`` lies above the baseline when it is a spike, else None; then remember it."""
        z = None
        n = len(self.hist)
        if n >= SPIKE_MIN_HISTORY:
            if self.age >= 4 or n < SPIKE_WINDOW:
                self._refresh()
            self.age += 1
            self.rule = "rolling"
            zz = (x - self.med) / self.scale
            if zz > SPIKE_Z:
                z = zz
        elif n >= SHORT_MIN_HISTORY:
            h = sorted(self.hist)
            if h[0] > 0:
                self.med = _median(h)
                self.scale = max(h[-1] - h[0], 1e-12 * self.med)
                self.rule = "short"
                excess = x - self.med
                if excess >= SPIKE_MIN_REL * self.med and excess > SHORT_Z * self.scale:
                    z = excess / self.scale
        self.hist.append(x)
        return z

    def describe(self, x: float, z: float) -> str:
        """Why ``x`` (with score ``z`` from :meth:`push`) is a spike, for the event message."""
        prev = len(self.hist) - 1
        ratio = f"{x / self.med:.3g}x" if self.med > 0 else "far above"
        if self.rule == "short":
            return (
                f"{ratio} the median {self.med:.6g} of the {prev} previous value(s), {z:.1f} times their range "
                f"{self.scale:.3g}"
            )
        return f"{z:.1f} robust sigmas above the rolling median {self.med:.6g} of the previous {prev} values"
