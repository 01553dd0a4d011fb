"""``mlite logs check|export|plot|compare``: analyse training logs (verl console / JSONL, Megatron-LM,
the kit's run directories).

* ``check FILE... [--json] [--strict] [--fail-on KINDS]``: format, steps, metrics, events and skipped lines
  per run; a healthy run (no event, nothing skipped) gets a one-line verdict. Files among several inputs that are
  not logs (a README, a script: :func:`mlite.logs.input.nonlog.not_a_log`) are left out, in one line
  (``--json``: ``skipped``). Exit 0 even when it finds
  failures (finding them is the job); ``--strict`` exits 1 when a run has an error-kind event (every kind but
  the warnings ``spike``, ``change_point``, ``kl_zero`` and ``restart``), ``--fail-on nan,oom`` when it has
  one of the kinds listed.
* ``export FILE... --csv OUT|-``: ``run,step,metric,value`` rows, ``value`` as ``repr(float)`` (bitwise
  round trip), streamed (flat memory for any log size).
* ``plot FILE... -o PNG [--metrics ROLE_OR_METRIC ...] [--smooth S] [--logy|--linear] [--no-events]
  [--baseline RUN]``; with ``--baseline`` each panel shows every other run's difference from RUN (a run name
  or one of the FILEs; a path that is not among them is read too).
* ``compare A B [--json] [--metrics ...] [--by role] [--all-metrics] [--strict]``: max abs / rel difference per
  metric over common steps and a bitwise-equal verdict; ``--strict`` exits 1 when not bitwise equal.

Bad input (a missing or unreadable file, an unknown metric) exits 2 with one line on stderr.
"""

from __future__ import annotations

import sys

COMMAND = "logs"
ORDER = 40


def add_parser(sub):
    from ..logs.records import EVENT_KINDS, WARNING_KINDS

    p = sub.add_parser(
        COMMAND,
        help="analyse training logs: check for failures, export CSV, plot, compare runs",
        description="Read Slurm logs of verl / Megatron-LM runs and the kit's run directories. "
        "FILE may be a log (plain or .gz), a glob, a run directory or a folder of logs.",
    )
    ss = p.add_subparsers(dest="logs_command", metavar="SUBCOMMAND", parser_class=type(p))

    c = ss.add_parser(
        "check",
        help="format, steps, metrics and failure events per run",
        description="Event kinds: " + ", ".join(EVENT_KINDS) + ". Exit status: 0 when the "
        "logs were read, whatever they contain (finding failures is the job); 1 with "
        "--strict when a run has an error event (any kind but the warnings "
        + ", ".join(WARNING_KINDS)
        + ") or with --fail-on when it has a listed kind; 2 "
        "for bad input. A healthy run (no event) is reported in one line.",
    )
    c.add_argument("files", nargs="+", metavar="FILE")
    c.add_argument("--json", action="store_true", help="print the JSON document")
    c.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a run has an error event (not for " + ", ".join(WARNING_KINDS) + ")",
    )
    c.add_argument(
        "--fail-on",
        metavar="KINDS",
        default=None,
        help="exit 1 when a run has one of these comma-separated event kinds",
    )
    _progress_flags(c)

    e = ss.add_parser("export", help="write run,step,metric,value CSV (streamed)")
    e.add_argument("files", nargs="+", metavar="FILE")
    e.add_argument("--csv", required=True, metavar="OUT", help="output file, or - for stdout")
    _progress_flags(e)

    pl = ss.add_parser("plot", help="draw loss / grad norm / KL (+ entropy, reward) to an image")
    pl.add_argument("files", nargs="+", metavar="FILE")
    pl.add_argument("-o", "--output", required=True, metavar="PNG", help="image file (.png, .pdf, .svg)")
    pl.add_argument(
        "--metrics",
        nargs="+",
        metavar="NAME",
        help="roles (loss grad_norm kl entropy reward lr throughput) or metric names",
    )
    pl.add_argument("--smooth", type=float, default=0.0, help="EMA weight on the past in [0, 1) (default 0: raw)")
    y = pl.add_mutually_exclusive_group()
    y.add_argument("--logy", dest="logy", action="store_const", const=True, default="auto", help="log y axes")
    y.add_argument("--linear", dest="logy", action="store_const", const=False, help="linear y axes")
    pl.add_argument("--no-events", action="store_true", help="do not mark events on the curves")
    pl.add_argument(
        "--baseline",
        metavar="RUN",
        default=None,
        help="draw each run's difference from this run (a run name or a log path) instead of the curves",
    )
    _progress_flags(pl)

    cm = ss.add_parser("compare", help="max abs / rel difference per metric and a bitwise-equal verdict")
    cm.add_argument("a", metavar="A")
    cm.add_argument("b", metavar="B")
    cm.add_argument("--json", action="store_true", help="print the JSON document")
    cm.add_argument("--metrics", nargs="+", metavar="NAME", help="metrics (or roles with --by role) to compare")
    cm.add_argument(
        "--by",
        choices=("metric", "role"),
        default="metric",
        help="match by metric name (default) or by role (train/loss vs lm_loss)",
    )
    cm.add_argument(
        "--all-metrics", action="store_true", help="count timing / throughput / memory metrics in the verdict too"
    )
    cm.add_argument("--strict", action="store_true", help="exit 1 when the runs are not bitwise equal")
    _progress_flags(cm)
    return p


def _progress_flags(p) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--progress",
        dest="progress",
        action="store_const",
        const=True,
        default=None,
        help="always show a progress bar on stderr",
    )
    g.add_argument("--no-progress", dest="progress", action="store_const", const=False, help="never show one")


def _progress(args) -> bool | None:
    if args.progress is not None:
        return args.progress
    return None if sys.stderr.isatty() else False


def run(args) -> int:
    cmd = getattr(args, "logs_command", None)
    if cmd is None:
        print("mlite logs: give a sub-command: check, export, plot or compare (see mlite logs --help)", file=sys.stderr)
        return 2
    return {"check": _check, "export": _export, "plot": _plot, "compare": _compare}[cmd](args)


def _check(args) -> int:
    from ..errors import MliteError
    from ..logs import ERROR_KINDS, EVENT_KINDS, check_logs
    from . import print_json

    fail_on = ERROR_KINDS if args.strict else frozenset()
    if args.fail_on:
        kinds = {k.strip() for k in args.fail_on.split(",") if k.strip()}
        unknown = sorted(kinds - set(EVENT_KINDS))
        if unknown:
            raise MliteError(f"--fail-on: unknown event kind(s) {', '.join(unknown)}; kinds: {', '.join(EVENT_KINDS)}")
        fail_on = frozenset(fail_on | kinds)
    skipped: list = []
    runs = check_logs(args.files, progress=_progress(args), skipped=skipped)
    if args.json:
        print_json({"runs": [r.summary() for r in runs], "skipped": [str(p) for p in skipped]})
    else:
        if skipped:
            print(_skipped_line(skipped))
        for r in runs:
            if _healthy(r):
                print(_verdict(r))
            else:
                _print_run(r)
    failed = any(e.kind in fail_on for r in runs for e in r.events)
    return 1 if failed else 0


def _skipped_line(skipped) -> str:
    """The one line saying which inputs were left out as not logs (a README, a script next to the logs)."""
    names = ", ".join(p.name for p in skipped[:3]) + (", ..." if len(skipped) > 3 else "")
    return f"skipped {len(skipped)} file(s) that are not training logs: {names}"


def _healthy(r) -> bool:
    """No event of any kind, no skipped line, no note: the run needs no second look."""
    return not r.events and not r.skipped_lines and not r.notes and r.num_steps > 0


def _verdict(r) -> str:
    """The one line of a healthy run: what it is, how far it went and where its loss ended."""
    line = f"OK  {r.name}  [{r.format}]  {r.num_steps} steps ({r.first_step}..{r.last_step})"
    if r.loss_span is not None:
        metric, first, last = r.loss_span
        line += f", {metric} {first:.4g} -> {last:.4g}"
    return line + ", no events"


def _print_run(r) -> None:
    span = f"{r.first_step}..{r.last_step}" if r.num_steps else "-"
    print(f"{r.name}  [{r.format}]  {r.path}")
    print(f"  steps {r.num_steps} ({span}), {len(r.metrics)} metrics, {r.num_lines} lines, {r.skipped_lines} skipped")
    roles = r.roles()
    if roles:
        print("  roles: " + ", ".join(f"{k}={v}" for k, v in roles.items()))
    for note in r.notes:
        print(f"  note: {note}")
    if not r.events:
        print("  events: none")
    else:
        print(f"  events ({len(r.events)}):")
        for e in r.events:
            where = f"L{e.line}" if e.line is not None else "-"
            step = f"step {e.step}" if e.step is not None else ""
            print(f"    {where:>8} {step:>11}  {e.kind:<13} {e.message}")


def _export(args) -> int:
    from ..logs import export_csv

    stats = export_csv(args.files, args.csv, progress=_progress(args))
    if args.csv != "-":
        print(f"wrote {stats['rows']} rows of {stats['runs']} run(s) to {args.csv}")
    return 0


def _plot(args) -> int:
    from ..errors import MliteError
    from ..logs import read_logs, save_plot

    if not 0 <= args.smooth < 1:
        raise MliteError(f"--smooth {args.smooth}: smoothing is an EMA weight in [0, 1) (0 = raw, 0.9 = strong)")
    files = list(args.files)
    if args.baseline is not None and not _names_a_run(args.baseline, files):
        files.append(args.baseline)
    skipped: list = []
    runs = read_logs(files, progress=_progress(args), skipped=skipped)
    if skipped:
        print(_skipped_line(skipped))
    save_plot(
        runs,
        args.output,
        args.metrics,
        smooth=args.smooth,
        logy=args.logy,
        events=not args.no_events,
        baseline=args.baseline,
    )
    what = f"difference from {args.baseline}" if args.baseline is not None else "curves"
    print(f"wrote {args.output} ({len(runs)} run(s), {what})")
    return 0


def _names_a_run(baseline: str, files: list[str]) -> bool:
    """True when ``baseline`` is one of ``files`` or could be the run name of one (then it is not read twice)."""
    from pathlib import Path

    from ..errors import MliteError
    from ..logs import resolve_inputs

    if any(Path(baseline).resolve() == Path(f).resolve() for f in files if not any(c in f for c in "*?[")):
        return True
    if Path(baseline).exists():
        return False
    names = [s.name for s in resolve_inputs(files, allow_empty=True)]
    if baseline in names:
        return True
    raise MliteError(
        f"--baseline '{baseline}': no run read is called that and no such file exists; give a run "
        f"name ({', '.join(names[:4])}) or a log path"
    )


def _compare(args) -> int:
    from ..logs import compare_runs, read_log
    from . import print_json

    a = read_log(args.a, progress=_progress(args))
    b = read_log(args.b, progress=_progress(args))
    doc = compare_runs(a, b, metrics=args.metrics, by=args.by, include_machine=args.all_metrics)
    if args.json:
        print_json(doc)
    else:
        print(f"A: {a.name}  [{a.format}]  {a.path}")
        print(f"B: {b.name}  [{b.format}]  {b.path}")
        print(f"common steps: {doc['common_steps']}")
        print(f"  {'metric':<40} {'steps':>6} {'max abs diff':>14} {'max rel diff':>14}  bitwise")
        for m in doc["metrics"]:
            fmt = lambda v: "-" if v is None else f"{v:.4g}"
            eq = (
                "yes"
                if m["bitwise_equal"]
                else (f"no (from step {m['first_diff_step']})" if m["first_diff_step"] is not None else "no")
            )
            print(
                f"  {m['metric']:<40} {m['steps']:>6} {fmt(m['max_abs_diff']):>14} {fmt(m['max_rel_diff']):>14}  {eq}"
            )
        if doc["ignored"]:
            print(f"  ignored (timing / throughput / memory; --all-metrics to include): {', '.join(doc['ignored'])}")
        for side in ("a", "b"):
            only = doc[f"only_in_{side}"]
            if only:
                print(f"  only in {side.upper()}: {', '.join(only[:12])}{' ...' if len(only) > 12 else ''}")
        print(f"verdict: {'BITWISE EQUAL' if doc['bitwise_equal'] else 'NOT bitwise equal'}")
    return 1 if args.strict and not doc["bitwise_equal"] else 0
