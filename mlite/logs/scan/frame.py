"""Runs as pandas DataFrames: the tidy frame (``run, step, metric, value``: one row per printed value, in
file order) and the wide view (one row per step, one column per metric; when a restart repeats a step,
the later value wins). Also the role lookup used by plots and the CLI's ``check`` summary.

pandas is imported inside the functions, so the streaming CSV export never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import MliteError
from ..analysis.roles import ROLES, resolve_role
from ..input.detect import LogSource, resolve_inputs
from ..input.progress import progress_for
from ..records import Event
from .reader import ScanResult, scan

if TYPE_CHECKING:
    import numpy as np


class RunLog:
    """One run read from a log file or run directory: its values, events and summary."""

    def __init__(self, result: ScanResult):
        src = result.source
        self.source: LogSource = src
        self.path: str = str(src.path)
        """The file or run directory as the user named it."""
        self.name: str = src.name
        """Run name (the ``run`` column)."""
        self.format: str = result.format
        """The format read: a registered format's name (``verl``, ``megatron``...) or ``unknown``."""
        self.events: list[Event] = result.events
        """Events in line order."""
        self.skipped_lines: int = result.skipped_lines
        """Lines that looked like metric records but could not be parsed completely."""
        self.num_lines: int = result.num_lines
        """Lines in the file the metrics came from."""
        self.notes: list[str] = result.notes
        """Things to know about the read (a truncated gzip stream...)."""
        self.loss_span: tuple | None = result.loss_span
        """``(metric, first, last)``: the loss role's first and last finite value (None without one)."""
        self.metrics: list[str] = list(result.metrics)
        """Metric names in first-seen order."""
        steps = result.steps
        self.num_steps: int = len(steps)
        """Distinct steps with at least one value."""
        self.first_step: int | None = min(steps) if steps else None
        self.last_step: int | None = max(steps) if steps else None
        self._store = result.store
        self._tidy = None
        self._wide = None
        self._printed: np.ndarray | None = None
        """``[step, metric]``: the step printed the metric (computed with :attr:`wide`)."""

    def __repr__(self) -> str:
        return (
            f"RunLog({self.name!r}, format={self.format!r}, steps={self.num_steps} "
            f"[{self.first_step}..{self.last_step}], metrics={len(self.metrics)}, events={len(self.events)})"
        )

    @property
    def has_values(self) -> bool:
        """False for a run read by :func:`check_logs` (summary and events only)."""
        return self._store is not None

    @property
    def tidy(self):
        """DataFrame ``run, step, metric, value`` (run and metric categorical), one row per value, file order."""
        if self._tidy is None:
            import numpy as np
            import pandas as pd

            if self._store is None:
                raise MliteError(f"run '{self.name}' was read without its values: use read_logs() for DataFrames")
            st = self._store
            n = len(st)
            self._tidy = pd.DataFrame(
                {
                    "run": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[self.name]),
                    "step": np.frombuffer(st.steps, dtype=np.int64).copy() if n else np.zeros(0, np.int64),
                    "metric": pd.Categorical.from_codes(
                        np.frombuffer(st.ids, dtype=np.int32).copy() if n else np.zeros(0, np.int32),
                        categories=st.names,
                    ),
                    "value": np.frombuffer(st.values, dtype=np.float64).copy() if n else np.zeros(0),
                }
            )
        return self._tidy

    @property
    def wide(self):
        """DataFrame indexed by ``step`` (sorted), one float column per metric (first-seen order); a step
        printed twice (restart) keeps its later value."""
        if self._wide is None:
            import numpy as np
            import pandas as pd

            t = self.tidy
            codes = t["metric"].cat.codes.to_numpy()
            steps = t["step"].to_numpy()
            uniq = pd.DataFrame({"s": steps, "m": codes}).duplicated(keep="last").to_numpy()
            keep = ~uniq
            idx, inv = np.unique(steps[keep], return_inverse=True)
            grid = np.full((len(idx), len(self._store.names) if self._store else 0), np.nan)
            grid[inv, codes[keep]] = t["value"].to_numpy()[keep]
            printed = np.zeros(grid.shape, dtype=bool)
            printed[inv, codes[keep]] = True
            self._printed = printed
            cols = pd.Index(list(self._store.names) if self._store else [], name="metric")
            self._wide = pd.DataFrame(grid, index=pd.Index(idx, name="step"), columns=cols)
        return self._wide

    def role(self, role: str) -> str | None:
        """The metric that plays ``role`` (``loss``, ``grad_norm``, ``kl``...) in this run, or None."""
        return resolve_role(role, self.metrics, self.format)

    def roles(self) -> dict[str, str]:
        """Every standard role this run has -> its metric."""
        out = {}
        for r in ROLES:
            m = self.role(r)
            if m is not None:
                out[r] = m
        return out

    def series(self, name: str):
        """A metric (or role) as a float Series indexed by step: the steps that printed it (NaN kept)."""
        metric = name if name in self.metrics else self.role(name)
        if metric is None:
            raise MliteError(
                f"run '{self.name}' has no metric or role '{name}' "
                f"(it has {len(self.metrics)} metrics, e.g. {', '.join(self.metrics[:4])})"
            )
        w = self.wide
        assert self._printed is not None  # computed with wide
        j = w.columns.get_loc(metric)
        return w[metric][self._printed[:, j]].rename(metric)

    def summary(self) -> dict:
        """The ``mlite logs check --json`` object of this run."""
        return {
            "path": self.path,
            "format": self.format,
            "num_steps": self.num_steps,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "metrics": sorted(self.metrics),
            "events": [e.to_dict() for e in self.events],
            "skipped_lines": self.skipped_lines,
        }


def _read(sources: list[LogSource], *, keep: bool, progress) -> list[RunLog]:
    total = sum(s.size() for s in sources)
    runs = []
    with progress_for(total, len(sources), progress) as bar:
        for src in sources:
            runs.append(RunLog(scan(src, keep=keep, events=True, progress=bar)))
    return runs


def read_logs(items, *, progress: bool | None = None, skipped: list | None = None) -> list[RunLog]:
    """Read files, globs, run directories or directories of logs (see :func:`detect.resolve_inputs`).

    ``progress``: a tqdm bar by bytes read (None: only for large or many inputs); ``skipped``: a list the paths
    left out as not logs are appended to.
    """
    return _read(resolve_inputs(items, skipped=skipped), keep=True, progress=progress)


def read_log(path, *, progress: bool | None = None) -> RunLog:
    """Read one log file or run directory."""
    sources = resolve_inputs([path])
    if len(sources) != 1:
        raise MliteError(f"'{path}' stands for {len(sources)} logs; use read_logs() for several")
    return _read(sources, keep=True, progress=progress)[0]


def check_logs(items, *, progress: bool | None = None, skipped: list | None = None) -> list[RunLog]:
    """Summaries and events only (values are not kept: memory stays flat for any log size); ``skipped`` as for
    :func:`read_logs`."""
    return _read(resolve_inputs(items, skipped=skipped), keep=False, progress=progress)


def tidy_frame(runs: list[RunLog]):
    """The tidy frames of several runs concatenated (``run`` categorical over all run names)."""
    import pandas as pd

    frames = [r.tidy.astype({"run": str, "metric": str}) for r in runs]
    if not frames:
        return pd.DataFrame({"run": [], "step": [], "metric": [], "value": []})
    df = pd.concat(frames, ignore_index=True)
    return df.astype({"run": "category", "metric": "category"})
