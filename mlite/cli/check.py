"""``mlite check LAUNCHER.sh [--config CONFIG] [--env NAME=VALUE ...] [--environ]`` or ``mlite check CONFIG --ngpu N
[mesh flags] [training flags]``, either with ``[--resume-from RUN_DIR_OR_CHECKPOINT] [--json]``: the preflight.

Gathers every finding (launcher reading, mesh, training options, verl's lite engine, the launch environment, memory
fit, resume) with its severity, rule, source and next valid values (:mod:`mlite.check`). The first form reads the
launcher as ``mlite import-launcher`` does (the same plan); the second takes the flags of ``mlite memory``.

Exit 0 when no finding is an error, 2 when one is (the findings on stdout) or on bad input (a missing file, a malformed
config: one line on stderr).
"""

from __future__ import annotations

COMMAND = "check"
ORDER = 47


def add_parser(sub):
    from .memory import add_memory_flags
    from .mesh import add_mesh_flags

    p = sub.add_parser(
        COMMAND,
        help="preflight a launcher or a planned run: every finding with its rule and the next valid value",
        description="INPUT is a launcher script (read as import-launcher reads it) or, with --ngpu, a model config "
        "(data/models name or config.json) with mlite memory's mesh and training flags. Exit 2 when any finding is "
        "an error.",
    )
    p.add_argument("input", metavar="LAUNCHER_OR_CONFIG")
    p.add_argument("--ngpu", type=int, default=None, help="GPUs: checks a model config with the flags below")
    p.add_argument("--config", default=None, help="launcher: the model config (default: from model.path)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable of the launch environment (repeatable; a launcher's script reads it too)",
    )
    p.add_argument("--environ", action="store_true", help="add the current environment to the launch environment")
    p.add_argument(
        "--resume-from",
        default=None,
        metavar="RUN_DIR_OR_CHECKPOINT",
        help="check resuming from this run directory or checkpoint (lite run dir, lite DCP, Megatron dist-ckpt)",
    )
    add_mesh_flags(p)
    add_memory_flags(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(_flag_defaults={a.dest: (a.option_strings[0], a.default) for a in p._actions if a.option_strings})
    return p


def _launcher_flags_given(args) -> list[str]:
    """Mesh / training flags given with a launcher (the launcher sets them; ``--gpu-mem`` is the hardware's)."""
    from ..mesh.axes import AXES
    from ..options import TRAINING

    dests = (
        {a.name for a in AXES} | {"pp_layout"} | {r.dest for r in TRAINING if r.flag and r.field != "gpu_memory_gib"}
    )
    return [
        flag
        for dest, (flag, default) in args._flag_defaults.items()
        if dest in dests and getattr(args, dest) != default
    ]


def run(args) -> int:
    from ..check import check, from_flags, from_launcher
    from ..errors import MliteError
    from . import print_json

    if args.ngpu is None:
        from ..options.cli import gpu_gib
        from ..options.table import TRAINING, rows_by_field

        extra = _launcher_flags_given(args)
        if extra:
            raise MliteError(
                f"{', '.join(dict.fromkeys(extra))}: a launcher sets its own mesh and options; drop them, or check a "
                "model config with --ngpu N"
            )
        gpu = rows_by_field(TRAINING)["gpu_memory_gib"]
        given = args.gpu_mem != args._flag_defaults[gpu.dest][1]
        gib = gpu_gib(args.gpu_mem, "--gpu-mem") if given else None
        if args.input == "-":
            import sys

            inp = from_launcher(
                "<stdin>",
                config=args.config,
                env=args.env,
                environ=args.environ,
                gpu_memory_gib=gib,
                text=sys.stdin.read(),
            )
        else:
            inp = from_launcher(args.input, config=args.config, env=args.env, environ=args.environ, gpu_memory_gib=gib)
    else:
        if args.config is not None:
            raise MliteError("--config is for a launcher; with --ngpu the input is the model config")
        from ..options import TRAINING
        from ..options.cli import values_from_args
        from .mesh import parallel_from_args

        inp = from_flags(
            args.input,
            args.ngpu,
            parallel_from_args(args),
            values_from_args(args, TRAINING),
            flags={r.field: r.flag for r in TRAINING if r.flag},
            env=args.env,
            environ=args.environ,
        )
    report = check(inp, resume_from=args.resume_from)
    if args.json:
        print_json(report.to_dict())
    else:
        _print(report)
    return 0 if report.ok else 2


def _print(report) -> None:
    from ..check.finding import fix_text

    d = report.to_dict()
    c = d["counts"]
    p = d["plan"]
    verdict = "OK" if report.ok else "ERRORS"
    print(
        f"{report.input}: {verdict}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} info "
        f"({p['model'] or 'model ?'} on {p['ngpu']} GPUs)"
    )
    for f in report.findings:
        print(f"  {f.level}: [{f.kind}/{f.rule}] {f.message}")
        print(f"      at {f.source}")
        if f.fixes:
            print("      fix: " + " | ".join(fix_text(x) for x in f.fixes))
