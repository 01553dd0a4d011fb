"""``mlite run --model CONFIG --steps N --nproc P --device cpu|cuda [...] --out DIR [--json]``: a single-node debug
run of the lite runtime (FSDP2 workers under torchrun, or Ray actors with ``--launcher ray``).

Exit 0 when the run completes, 1 when it fails (or was stopped: Ctrl-C asks the workers to stop after the step they
are in), 2 for bad input. ``--json`` prints ``{"status", "steps", "final_loss", "log", "metrics_jsonl",
"peak_memory_bytes", "reason", "run_dir"}`` at the end; without it a line per step goes to stdout. ``--dry-run``
prints the worker command and starts nothing. ``--from-plan plan.json`` runs the plan ``mlite export`` wrote, shrunk
onto this node (:mod:`mlite.launch.from_plan`), and prints each shrink as a ``plan shrunk:`` line.
"""

from __future__ import annotations

import sys
import time

from ..rundir import COMPLETED, FINAL
from ..units import MIB

COMMAND = "run"
ORDER = 35


def add_parser(sub):
    from ..options import RUN, add_flags

    p = sub.add_parser(
        COMMAND,
        help="start a single-node debug run of the lite runtime and wait for it",
        description="Train a model config on this machine with the kit's lite runtime (FSDP2, "
        "mlite's optimizer and offload modes). Writes a run directory (train.log, "
        "metrics.jsonl, config.json, command.txt, status.json) readable by 'mlite logs'. "
        "Exit 0: completed; 1: failed or stopped; 2: bad input.",
    )
    groups = add_flags(p, RUN)  # the RunConfig fields (mlite.options.table.RUN)
    for action in p._actions:  # --from-plan gives the model
        if action.dest == "model":
            action.required = False
    p.add_argument(
        "--from-plan",
        metavar="PLAN",
        default=None,
        help="debug the plan.json 'mlite export' wrote: its model, mesh, optimizer and offload settings, "
        "shrunk to fit --nproc processes (fewer layers, experts, DP); says what was shrunk",
    )
    p.add_argument("--json", action="store_true", help="print the JSON document at the end")
    g = groups["training details"]
    g.add_argument("--overwrite", action="store_true", help="replace the run files of an older run in --out")
    g.add_argument("--dry-run", action="store_true", help="print the worker command, start nothing")
    return p


def _config(args):
    """The RunConfig of the flags (and of ``--from-plan``)."""
    return _config_and_shrunk(args)[0]


def _config_and_shrunk(args):
    """The RunConfig of the flags (and of ``--from-plan``), and what was shrunk from the plan."""
    from ..errors import MliteError
    from ..launch import RunConfig
    from ..options import RUN, values_from_args

    values = values_from_args(args, RUN)
    if args.from_plan is None:
        if values.get("model") is None:
            raise MliteError("model: give --model (a data/models name or a config.json path) or --from-plan PLAN")
        return RunConfig(**values), []
    from ..launch.from_plan import plan_values, read_plan
    from ..options.table import rows_by_field

    trainer = rows_by_field(RUN)["trainer"]
    if values.get("trainer") != trainer.default:
        raise MliteError(
            f"--from-plan with {trainer.flag} {values['trainer']}: the plan is debugged cut to this node (layers, "
            f"experts, vocabulary), which only the lite trainer runs; drop {trainer.flag}"
        )
    given = {r.field for r in RUN if values.get(r.field) != r.default}
    values, shrunk = plan_values(read_plan(args.from_plan), values, given)
    return RunConfig(**values), shrunk


def _follow(run, quiet: bool) -> None:
    """Wait for the run; print each new step line unless ``quiet``. Ctrl-C asks the workers to stop."""
    shown = 0
    stopping = False
    while True:
        try:
            done = run.status in FINAL
            if not quiet:
                for step, d in run.rundir.read_metrics():
                    if step > shown:
                        shown = step
                        print(
                            f"step {step}/{run.total_steps}  loss {d.get('train/loss', float('nan')):.4f}  "
                            f"grad_norm {d.get('train/grad_norm', float('nan')):.4f}  lr {d.get('train/lr', 0):.3g}",
                            flush=True,
                        )
            if done:
                run.wait(timeout=120)
                return
            time.sleep(0.5)
        except KeyboardInterrupt:
            if stopping:
                print("mlite run: terminating the workers", file=sys.stderr)
                run.kill()
                return
            stopping = True
            print(
                "mlite run: stop requested; the workers finish their step (Ctrl-C again to terminate)", file=sys.stderr
            )
            run.stop(wait=False)


def run(args) -> int:
    from ..launch import start
    from ..launch.validate import validate_run
    from . import print_json

    # every input checked, every path made absolute (the workers start in the run directory), nothing written yet
    cfg, shrunk = _config_and_shrunk(args)
    cfg = validate_run(cfg, overwrite=args.overwrite)
    said = sys.stderr if args.json else sys.stdout  # --json keeps stdout one document
    for line in shrunk:
        print(f"plan shrunk: {line}", file=said, flush=True)
    for change in cfg.cut_changes():
        print(f"model cut: {change}", file=said, flush=True)
    if args.dry_run:
        h = start(cfg, dry_run=True, overwrite=args.overwrite)
        print(h.command)
        return 0
    h = start(cfg, overwrite=args.overwrite)
    for line in shrunk:
        h.rundir.lifecycle(f"plan shrunk: {line}")
    if not args.json:
        print(f"run directory {h.run_dir}\n{h.command}", flush=True)
    _follow(h, quiet=args.json)
    doc = h.summary()
    if args.json:
        print_json(doc)
    else:
        tail = f" ({doc['reason']})" if doc["reason"] else ""
        loss = "n/a" if doc["final_loss"] is None else f"{doc['final_loss']:.4f}"
        peak = "n/a" if doc["peak_memory_bytes"] is None else f"{doc['peak_memory_bytes'] / MIB:.1f} MiB"
        print(f"{doc['status']}{tail}: {doc['steps']} steps, final loss {loss}, peak memory {peak}\nlog: {doc['log']}")
    return 0 if doc["status"] == COMPLETED else 1
