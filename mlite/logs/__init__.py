"""Training-curve analysis: read Slurm logs of verl and Megatron-LM runs, TensorBoard event files (and the kit's
own run logs), get tidy DataFrames, find failures and drifts, plot the standard panel or the difference from a
baseline run, compare two runs.

::

    from mlite.logs import read_logs, compare_runs, plot_runs
    runs = read_logs(["slurm-1234.out", "runs/*.jsonl"])     # files, globs, run directories
    runs[0].tidy        # run, step, metric, value
    runs[0].wide        # step x metric
    runs[0].events      # nan, spike, change_point, kl_zero, restart, oom, nccl_timeout, time_limit, ..., no_metrics
    compare_runs(runs[0], runs[1])["bitwise_equal"]
    plot_runs(runs, smooth=0.9).savefig("curves.png")
    plot_runs(runs, baseline=runs[0].name)              # each metric's difference from runs[0]

Readers stream (memory does not grow with the file), read plain or gzip files, tolerate invalid UTF-8,
CRLF and carriage-return progress bars, and keep every valid record around a bad line. No UI library is
imported here; matplotlib and pandas load inside the functions that need them.

Layout: :mod:`.input` (sources, blocks, sniffing), :mod:`.formats` (one module per format and the format
registry, :mod:`.formats.registry`), :mod:`.analysis` (events, series detectors, roles, comparison),
:mod:`.scan` (the streaming reader, RunLog frames, the CSV export), :mod:`.plots` (the panel, differences, the
curve explorer's session). ``FORMATS``: every registered format's name, then ``unknown``.
"""

from .analysis.compare import compare_runs
from .analysis.roles import ROLES, resolve_role
from .formats import registry
from .formats.registry import LogFormat
from .input.detect import LogSource, resolve_inputs, sniff_format
from .plots.plot import ema, plot_runs, save_plot
from .records import ERROR_KINDS, EVENT_KINDS, WARNING_KINDS, Event, StepRecord
from .scan.export import export_csv
from .scan.frame import RunLog, check_logs, read_log, read_logs, tidy_frame
from .scan.reader import iter_records

__all__ = [
    "ERROR_KINDS",
    "EVENT_KINDS",
    "FORMATS",
    "ROLES",
    "WARNING_KINDS",
    "Event",
    "LogFormat",
    "LogSource",
    "RunLog",
    "StepRecord",
    "check_logs",
    "compare_runs",
    "ema",
    "export_csv",
    "iter_records",
    "plot_runs",
    "read_log",
    "read_logs",
    "registry",
    "resolve_inputs",
    "resolve_role",
    "save_plot",
    "sniff_format",
    "tidy_frame",
]


def __getattr__(name: str):
    if name == "FORMATS":
        # the registered formats, then 'unknown' (computed: a format registered later is in it)
        return registry.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
