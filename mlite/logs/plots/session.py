"""The state behind the curve explorer (``widgets/curves.py``), as a plain object that knows nothing of
widgets: which logs are loaded, what can be plotted, the PNG of the current panel, the event table and
the comparison of two runs. The view only links its controls to these calls.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import MliteError
from ...paths import REPO_ROOT, logs_dir
from ..analysis.compare import compare_runs
from ..analysis.roles import ROLE_LABELS, ROLES
from ..formats import mlite_run
from ..scan.frame import RunLog, read_logs
from .plot import default_panels, figure_png, plot_runs

DEFAULT_INPUT = "data/logs/"
"""What the explorer loads first (the kit's sample logs)."""


def resolve_user_path(item: str) -> str:
    """A path or glob as typed: as is when it matches from the working directory, else relative to the
    repository root (notebooks run in ``notebooks/``; ``data/logs/`` means the kit's samples)."""
    item = os.path.expanduser(item.strip())
    if os.path.isabs(item) or Path(item).exists():
        return item
    if item.rstrip("/") == "data/logs":
        return str(logs_dir())
    for base in (REPO_ROOT, Path.cwd().parent):
        cand = base / item
        if cand.exists() or (any(c in item for c in "*?[") and list(base.glob(item))):
            return str(cand)
    return item


def split_inputs(text: str) -> list[str]:
    """``"a.log, runs/*.out  b.jsonl"`` -> the items (commas, spaces or newlines between them)."""
    items = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if not items:
        raise MliteError("no log given: type a file, a glob (logs/*.out) or a directory (data/logs/)")
    return items


class CurveSession:
    """Loaded runs and the views computed from them."""

    def __init__(self) -> None:
        self.runs: list[RunLog] = []
        """Runs read by the last :meth:`load`."""

    def load(self, text: str) -> list[RunLog]:
        """Read the logs named in ``text`` (files, globs, directories; see :func:`split_inputs`)."""
        items = [resolve_user_path(t) for t in split_inputs(text)]
        self.runs = read_logs(items)
        return self.runs

    @property
    def names(self) -> list[str]:
        """Run names, in load order."""
        return [r.name for r in self.runs]

    def default_selection(self) -> list[str]:
        """Runs shown first: the kit's own runs when there are some, else every run."""
        own = [r.name for r in self.runs if r.format == mlite_run.NAME and r.num_steps]
        return own or [r.name for r in self.runs if r.num_steps] or self.names

    def select(self, names) -> list[RunLog]:
        """The runs called ``names``."""
        by_name = {r.name: r for r in self.runs}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise MliteError(f"no loaded run is called {', '.join(missing)}: load the logs again")
        return [by_name[n] for n in names]

    def metric_options(self, names) -> list[tuple[str, str]]:
        """``(label, value)`` pairs for the metric picker: the roles any selected run has, then every metric."""
        runs = self.select(names)
        opts = [(f"[{ROLE_LABELS[r]}]", r) for r in ROLES if any(run.role(r) for run in runs)]
        seen: dict[str, None] = {}
        for run in runs:
            for m in run.metrics:
                seen.setdefault(m, None)
        return opts + [(m, m) for m in seen]

    def default_metrics(self, names) -> list[str]:
        """The standard panel of the selected runs."""
        runs = self.select(names)
        return default_panels(runs) if runs else []

    def figure_png(
        self, names, metrics=None, *, smooth: float = 0.0, logy="auto", events: bool = True, width: float = 10.0
    ) -> bytes:
        """PNG of the panel for the selected runs."""
        runs = [r for r in self.select(names) if r.num_steps]
        if not runs:
            raise MliteError("the selected runs have no metric values to plot (see their no_metrics event)")
        fig = plot_runs(runs, metrics or None, smooth=smooth, logy=logy, events=events, width=width)
        return figure_png(fig)

    def event_rows(self, names) -> list[list]:
        """``[run, line, step, kind, metric, message]`` for every event of the selected runs."""
        rows = []
        for r in self.select(names):
            for e in r.events:
                rows.append(
                    [
                        r.name,
                        "" if e.line is None else e.line,
                        "" if e.step is None else e.step,
                        e.kind,
                        e.metric or "",
                        e.message,
                    ]
                )
        return rows

    def summary_rows(self) -> list[list]:
        """``[run, format, steps, first..last, metrics, events, skipped]`` per loaded run."""
        return [
            [
                r.name,
                r.format,
                r.num_steps,
                f"{r.first_step}..{r.last_step}" if r.num_steps else "-",
                len(r.metrics),
                len(r.events),
                r.skipped_lines,
            ]
            for r in self.runs
        ]

    def compare(self, a: str, b: str, *, by: str = "metric") -> dict:
        """:func:`compare.compare_runs` of two loaded runs."""
        if not a or not b:
            raise MliteError("pick two runs to compare")
        ra, rb = self.select([a, b])
        return compare_runs(ra, rb, by=by)

    @staticmethod
    def compare_rows(doc: dict) -> list[list]:
        """Table rows of a comparison: metric, steps, max abs diff, max rel diff, bitwise."""
        fmt = lambda v: "-" if v is None else f"{v:.4g}"
        return [
            [
                m["metric"],
                m["steps"],
                fmt(m["max_abs_diff"]),
                fmt(m["max_rel_diff"]),
                "yes" if m["bitwise_equal"] else "no",
            ]
            for m in doc["metrics"]
        ]
