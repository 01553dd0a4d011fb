"""``mlite export CONFIG --nodes N --gpus-per-node G [mesh flags] [memory flags] --target T --out DIR [--json]``:
write a verl launcher (SFT on the mlite engine, GRPO with the mlite actor, or GRPO on verl's Megatron backend), the
Slurm job that starts Ray and runs it, and plan.json.

Exit 0 when the files were written; 2 on bad input, an invalid mesh included (nothing can be written for it: one
line on stderr with the planner's reasons, nothing written; ``mlite mesh`` is the command that judges a mesh). See
:data:`mlite.cli.EXIT_CODES`. The console (and ``--json``'s ``"memory"``) also says whether the plan fits in GPU
memory, by the estimate the launcher's header states; a plan that does not fit is written all the same (exit 0)
but not offered for submission as it is.
"""

from __future__ import annotations

import argparse

COMMAND = "export"
ORDER = 40


def add_parser(sub):
    from ..options import EXPORT, add_flags
    from .memory import add_memory_flags
    from .mesh import add_mesh_flags

    p = sub.add_parser(
        COMMAND,
        help="write verl launchers and a Slurm + Ray job for a model, mesh and options",
        description="Targets: verl-mlite-sft (torchrun, engine=mlite), verl-mlite-grpo "
        "(actor@actor_rollout_ref.actor=mlite_actor), verl-megatron-grpo (verl's Megatron backend).",
    )
    p.add_argument("config", metavar="CONFIG", help="config.json path or a name in data/models/")
    add_mesh_flags(p)
    add_memory_flags(p)
    groups = add_flags(p, EXPORT)  # the ExportPlan fields (mlite.options.table.EXPORT)
    groups["export"].add_argument("--out", required=True, help="folder to write the files into (created)")
    for action in p._actions:  # --optimizer given or not: not given, the target's (export.plan.default_optimizer)
        if action.dest == _optimizer_dest():
            action.__class__ = _Chosen
    from ..time.hardware import add_hardware_flag

    add_hardware_flag(
        p,
        default=None,
        also="; for the predicted step in the launcher's header (default: the --gpu-mem GPU's profile where it names "
        "one, else H200)",
    )
    p.add_argument("--json", action="store_true", help="list the files written with the resolved mesh")
    return p


class _Chosen(argparse._StoreAction):
    """A store action that also records that its flag was given (``<dest>_chosen``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        setattr(namespace, f"{self.dest}_chosen", True)


def _optimizer_dest() -> str:
    from ..options import TRAINING
    from ..options.table import rows_by_field

    return rows_by_field(TRAINING)["optimizer"].dest


def run(args) -> int:
    from ..export import ExportPlan, write
    from ..mesh.axes import sizes_text
    from ..options import EXPORT, values_from_args
    from . import print_json
    from .memory import options_from_args
    from .mesh import parallel_from_args

    if not getattr(args, f"{_optimizer_dest()}_chosen", False):  # --optimizer not given: the one the target runs
        from ..export.plan import default_optimizer

        setattr(args, _optimizer_dest(), default_optimizer(args.target))
    plan = ExportPlan(
        model=args.config,
        parallel=parallel_from_args(args),
        options=options_from_args(args),
        gpus_per_node=args.gpus_per_node,
        hardware=_hardware(args),
        **values_from_args(args, EXPORT),
    )
    res = write(plan, args.out)  # an invalid mesh raises InvalidMesh: bad input, exit 2 (nothing written)
    line, fits, per_gpu = _memory_verdict(plan)
    if args.json:
        print_json(res.to_dict() | {"memory": {"fits": fits, "per_gpu_bytes": per_gpu, "line": line}})
        return 0
    m = res.mesh
    print(f"{args.target}: {plan.nodes} x {plan.gpus_per_node} GPUs, {sizes_text(m)} -> dp={m['dp']} edp={m['edp']}")
    for path in res.paths:
        print(f"  wrote {path}")
    for w in m["warnings"] + res.notes:
        print(f"  warning: {w}")
    if line:
        print(f"  {line}")
    predicted = [ln[2:] for ln in res.files[res.launcher].splitlines() if ln.startswith("# predicted step:")]
    if predicted:  # as the launcher's header states it
        print(f"  {predicted[0].split(' (mlite time;')[0]}")
    submit = f"cd {args.out} && mkdir -p {plan.log_dir} && sbatch {res.job}"
    if fits is False:
        print(
            "  DOES NOT FIT: the job would run out of GPU memory; make it fit first (--pao --grad-dtype bf16, "
            "--offload-fraction, --recompute, more --nodes: `mlite memory` shows where the bytes go)"
        )
        print(f"  submit once it fits: {submit}")
    else:
        print(f"  submit: {submit}")
    return 0


def _hardware(args) -> str:
    """``--hardware``, else the ``--gpu-mem`` GPU's shipped profile, else H200; checked here (a bad one: exit 2,
    nothing written)."""
    from ..options import TRAINING
    from ..options.table import rows_by_field
    from ..time.hardware import hardware_for_gpu, load_hardware

    hw = args.hardware or hardware_for_gpu(getattr(args, rows_by_field(TRAINING)["gpu_memory_gib"].dest))
    load_hardware(hw)
    return hw


def _memory_verdict(plan) -> tuple[str, bool | None, int | None]:
    """The launcher header's memory line, the verdict and the per-GPU bytes of ``plan`` (the options the target
    runs, :func:`mlite.export.mapping.option_overrides`); ``("", None, None)`` where no estimate can be made."""
    from dataclasses import replace

    from ..errors import MliteError
    from ..export.header import memory_line
    from ..export.mapping import option_overrides
    from ..memory import estimate
    from ..options.table import ENGINE_SWITCH

    if plan.target in ENGINE_SWITCH:  # a local variant runs its cluster target's options (verl-lite-sft)
        plan = replace(plan, target=ENGINE_SWITCH[plan.target][0])
    spec, mp = plan.resolve()
    options = option_overrides(plan, mp, spec)[3]
    try:
        est = estimate(spec, mp, options)
    except MliteError:
        return "", None, None
    return "".join(memory_line(spec, mp, options)), est.fits, round(est.worst.total)
