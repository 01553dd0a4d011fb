"""Change points: slow upward drifts of a positive series (loss, grad norm, KL) that no single record shows as a
spike.

A one-sided CUSUM (Page's cumulative sum) on the logarithm of the values (a drift is a ratio: grad norm 2 -> 4
is the same drift as 0.2 -> 0.4), against an adaptive baseline, fed one value at a time:

* the baseline is an EWMA of log x that moves only while no drift is being accumulated (S = 0), faster downward
  than upward, so it follows a falling loss closely but freezes when the values start to sit above it;
* the scale is the larger of the noise (an EWMA of |log x_t - log x_{t-1}| x 0.886, the standard deviation of
  independent noise, insensitive to trends) and ``CP_LOG_FLOOR`` (quantised logs have no noise);
* each value adds ``min(z, CP_CLIP) - CP_K`` to S (z = (log x - baseline) / scale, clipped so that one spike
  cannot make a change point on its own); S never goes below 0. When S exceeds ``CP_H`` the drift is an event
  whose step is where S last left 0 (the start of the drift); then the detector starts afresh at the new level.

With the defaults a change point needs the values of a quiet series to stay about 2x above the baseline for ten
records (3x for six); a noisy one (an RL critic's grad norm) needs proportionally more, so its wobble does not
add up. Values <= 0 (a KL that prints 0.000 or
a loss that crosses zero) are skipped; a series whose first values are not all positive is not watched.
"""

from __future__ import annotations

import math

CP_WARMUP = 8
"""Values used to set the baseline and the noise before any verdict (all must be > 0)."""
CP_ALPHA = 0.05
"""EWMA weight of a new value in the baseline (when the value is above it) and in the noise estimate."""
CP_ALPHA_DOWN = 0.08
"""EWMA weight of a value below the baseline: the baseline follows a falling loss closely, so that a rise after
the fall is measured from where the loss got to, not from where it started."""
CP_LOG_FLOOR = math.log(1.25)
"""The scale never goes below this (in log units: a factor 1.25)."""
CP_K = 1.5
"""Allowance: values less than this many scales above the baseline do not add up."""
CP_CLIP = 4.0
"""A value counts at most this many scales (one spike alone is not a drift)."""
CP_H = 15.0
"""Decision threshold on the cumulative sum."""


class DriftDetector:
    """CUSUM over one series (see the module docstring); :meth:`push` returns a confirmed change point."""

    __slots__ = ("n", "noise", "off", "prev", "ref", "s", "start", "start_ref")

    def __init__(self) -> None:
        self.n = 0
        self.ref = 0.0
        self.noise = 0.0
        self.prev = 0.0
        self.s = 0.0
        self.start: tuple | None = None
        self.start_ref = 0.0
        self.off = False
        """True once a warm-up value was <= 0: the series is not watched."""

    def push(self, x: float, where: tuple) -> tuple | None:
        """Feed value ``x`` of the record ``where`` (e.g. ``(step, line)``); returns ``(start_where, baseline,
        level)`` when a drift is confirmed at this value, else None."""
        if self.off:
            return None
        if x <= 0:
            if self.n < CP_WARMUP:
                self.off = True
            return None
        lx = math.log(x)
        self.n += 1
        if self.n == 1:
            self.ref = self.prev = lx
            return None
        diff = abs(lx - self.prev)
        self.prev = lx
        if self.n <= CP_WARMUP:
            self.ref += 2 * CP_ALPHA * (lx - self.ref)
            self.noise = diff if self.n == 2 else self.noise + 2 * CP_ALPHA * (diff - self.noise)
            return None
        scale = max(0.886 * self.noise, CP_LOG_FLOOR)
        z = (lx - self.ref) / scale
        s = max(0.0, self.s + min(z, CP_CLIP) - CP_K)
        if self.s == 0.0 and s > 0.0:
            self.start, self.start_ref = where, self.ref
        self.s = s
        if s == 0.0:
            self.ref += (CP_ALPHA_DOWN if lx < self.ref else CP_ALPHA) * (lx - self.ref)
            self.noise += CP_ALPHA * (diff - self.noise)
            return None
        if s > CP_H:
            found = (self.start, math.exp(self.start_ref), x)
            self.n, self.s, self.start = 1, 0.0, None
            self.ref = self.prev = lx
            return found
        return None
