"""``mlite mesh CONFIG --ngpu N [mesh flags] [--rank R] [--list] [--json]``: validate or enumerate meshes.

Exit 0 when the mesh is valid (or ``--list`` found at least one), 1 when invalid, 2 on bad usage.
"""

from __future__ import annotations

COMMAND = "mesh"
ORDER = 20


def add_mesh_flags(p, *, with_seq_len: bool = True) -> None:
    """The mesh flags shared by ``mesh``, ``memory`` and ``export``."""
    from ..mesh.axes import AXES

    g = p.add_argument_group("mesh")
    for axis in AXES:
        g.add_argument(axis.flag, type=int, default=axis.default, help=axis.help)
    g.add_argument("--pp-layout", default=None, help="uneven stages, e.g. 'E|t*5|t*6|t,m,L'")
    from ..options import TRAINING, add_flags  # --seq-len and --gpus-per-node: the options table's mesh rows

    rows = tuple(r for r in TRAINING if r.group == "mesh" and (with_seq_len or r.field != "seq_len"))
    add_flags(p, rows, skip_groups=(), groups={"mesh": g})


def parallel_from_args(args):
    from ..mesh import ParallelConfig
    from ..mesh.axes import AXIS_NAMES

    return ParallelConfig(**{a: getattr(args, a) for a in AXIS_NAMES}, pp_layout=args.pp_layout)


def add_split_flags(p) -> None:
    """Megatron-Core's pipeline split (``TransformerConfig`` fields; MindSpeed's layer list), as Megatron-LM spells
    the flags; checked by :func:`mlite.mesh.layout.split_layout`, the rule ``import-launcher`` applies to a
    launcher's keys."""
    g = p.add_argument_group("Megatron-Core pipeline split (instead of --pp-layout)")
    g.add_argument(
        "--num-layers-in-first-pipeline-stage",
        type=int,
        default=None,
        metavar="N",
        help="decoder layers on the first pipeline rank",
    )
    g.add_argument(
        "--num-layers-in-last-pipeline-stage",
        type=int,
        default=None,
        metavar="N",
        help="decoder layers on the last pipeline rank",
    )
    g.add_argument(
        "--account-for-embedding-in-pipeline-split",
        action="store_true",
        help="the embedding counts as one layer of the first stage",
    )
    g.add_argument(
        "--account-for-loss-in-pipeline-split",
        action="store_true",
        help="the loss counts as one layer of the last stage",
    )
    g.add_argument(
        "--num-layer-list",
        default=None,
        metavar="N,N,...",
        help="decoder layers per pipeline rank (verl-on-Ascend's pipeline_parallel_num_layer_list)",
    )


def split_from_args(args):
    """The :class:`mlite.mesh.PipelineSplit` of :func:`add_split_flags`."""
    from ..mesh import PipelineSplit
    from ..mesh.layout import layer_list

    return PipelineSplit(
        first=args.num_layers_in_first_pipeline_stage,
        last=args.num_layers_in_last_pipeline_stage,
        account_for_embedding=args.account_for_embedding_in_pipeline_split,
        account_for_loss=args.account_for_loss_in_pipeline_split,
        layer_list=None if args.num_layer_list is None else layer_list(args.num_layer_list, "--num-layer-list"),
    )


def plan_from_args(spec, args, seq_len: int, **judgment):
    """The resolved mesh of the parsed mesh and pipeline-split flags (``mlite mesh``, ``mlite time``); ``judgment``:
    the engine's switches of :func:`mlite.mesh.resolve` (:mod:`mlite.mesh.engine`)."""
    from ..mesh import resolve

    return resolve(
        spec,
        args.ngpu,
        parallel_from_args(args),
        seq_len=seq_len,
        gpus_per_node=args.gpus_per_node,
        split=split_from_args(args),
        **judgment,
    )


def add_parser(sub):
    p = sub.add_parser(
        COMMAND,
        help="validate a parallel mesh for a model, list rank groups, enumerate meshes",
        description="Dense ranks = TP*CP*DP*PP, expert ranks = ETP*EP*EDP*PP (mlite's rule).",
    )
    p.add_argument("config", metavar="CONFIG", help="config.json path or a name in data/models/")
    p.add_argument("--ngpu", type=int, required=True, help="GPU count (world size)")
    add_mesh_flags(p)
    add_split_flags(p)
    from ..mesh.ranks import PRINTED_KINDS

    p.add_argument("--rank", type=int, default=None, help=f"print this rank's {'/'.join(PRINTED_KINDS)} groups")
    from ..mesh.engine import ENGINES

    p.add_argument(
        "--engine",
        choices=tuple(ENGINES),
        default="mlite",
        help="judge the mesh as this engine does (default mlite: even stages or --pp-layout; megatron-lite: verl's "
        "mlite engine, which balances uneven layers itself; megatron-core: layers divide by PP unless split keys "
        "say otherwise, KV heads may be replicated); import-launcher applies the one its launcher's target runs",
    )
    p.add_argument("--list", action="store_true", help="enumerate every valid mesh, best first")
    p.add_argument("--limit", type=int, default=20, help="rows of --list in text output (JSON has all)")
    p.add_argument(
        "--gpu-mem",
        default=None,
        metavar="GIB|GPU",
        help="with --list: rank with memory in view: the meshes that fit this device memory (GiB or a GPU name; "
        "mlite memory's estimate with its default options) first, the others by least memory per GPU; a GPU name "
        "with a shipped time profile (A100, H100, H200, B200) also ranks those that fit by predicted tokens/s/GPU",
    )
    from ..time.hardware import add_hardware_flag

    add_hardware_flag(
        p,
        default=None,
        also="; with --list: rank the meshes that fit by the time model's predicted tokens/s/GPU on it (without "
        "--gpu-mem the profile's memory_gib is the device memory)",
    )
    p.add_argument("--json", action="store_true", help="print the JSON document")
    return p


_DERIVED_WIDTH = 5
"""Column width of DP and EDP in ``mlite mesh --list``."""


def _list_columns() -> list[tuple[str, int]]:
    """``(key, width)`` of the ``--list`` columns before the score: the axes, then DP and EDP."""
    from ..mesh.axes import AXES, DERIVED

    return [(a.name, a.width) for a in AXES] + [(d, _DERIVED_WIDTH) for d in DERIVED]


def _list_meshes(spec, args) -> tuple[list, str, bool]:
    """The ranked meshes of ``--list``, how they are ranked and whether their speed was predicted (``--gpu-mem``:
    by the memory estimate; ``--hardware``, or a ``--gpu-mem`` GPU with a shipped profile: the meshes that fit by
    the predicted tokens/s/GPU)."""
    from ..mesh import enumerate_meshes

    if args.gpu_mem is None and args.hardware is None:
        meshes = enumerate_meshes(spec, args.ngpu, seq_len=args.seq_len, gpus_per_node=args.gpus_per_node)
        return meshes, "best first by the score; --gpu-mem ranks the meshes that fit first", False
    from ..options import TrainingOptions
    from ..options.cli import gpu_gib
    from ..time.hardware import hardware_for_gpu, load_hardware
    from ..time.table import mesh_table

    hw_name, why = args.hardware, ""
    if hw_name is None:
        hw_name = hardware_for_gpu(args.gpu_mem, default="")
        why = f" (--gpu-mem {args.gpu_mem}'s profile; --hardware picks another)"
    hw = load_hardware(hw_name) if hw_name else None
    mem_why = ""
    if args.gpu_mem is not None:
        gib = gpu_gib(args.gpu_mem, "--gpu-mem")
    else:
        assert hw is not None
        gib = hw.memory_gib
        mem_why = f" ({hw.name}'s memory_gib; --gpu-mem sets another)"
    o = TrainingOptions(gpu_memory_gib=gib, seq_len=args.seq_len, gpus_per_node=args.gpus_per_node)
    meshes = mesh_table(spec, args.ngpu, o, hardware=hw)
    fit = f"{sum(bool(m.fits) for m in meshes)} fit in {gib:g} GiB{mem_why} by mlite memory's defaults: those first"
    if hw is None:
        return meshes, f"{fit}, then least memory", False
    return meshes, f"{fit}, fastest first by mlite time on {hw.name}{why}, then least memory", True


def _print_list(spec, args) -> int:
    from ..units import GIB
    from . import print_json

    meshes, how, speed = _list_meshes(spec, args)
    if args.json:
        print_json({"meshes": [m.to_dict() for m in meshes]})
        return 0 if meshes else 1
    mem = args.gpu_mem is not None or args.hardware is not None
    print(f"{len(meshes)} valid meshes for {spec.name} on {args.ngpu} GPUs ({how}):")
    cols = _list_columns()
    head = " ".join(f"{k:>{w}}" for k, w in cols) + f" {'score':>7}"
    head += f" {'tok/s/GPU':>9} {'step s':>8}" if speed else ""
    head += f" {'GiB/GPU':>8} {'fits':>4}" if mem else ""
    print("  " + head + "  layout")
    for m in meshes[: args.limit]:
        d = m.to_dict()
        line = " ".join(f"{d[k]:>{w}}" for k, w in cols) + f" {d['score']:>7.2f}"
        if speed:
            tps = f"{d['tokens_per_s_per_gpu']:,.0f}" if "tokens_per_s_per_gpu" in d else "-"
            step = f"{d['step_s']:.3f}" if "step_s" in d else "-"
            line += f" {tps:>9} {step:>8}"
        if mem:
            line += f" {d['total_bytes'] / GIB:>8.1f} {'yes' if m.fits else 'no':>4}"
        print("  " + line + f"  {d['pp_layout']}")
    return 0 if meshes else 1


def run(args) -> int:
    from ..mesh.axes import sizes_text
    from ..mesh.engine import judgment
    from ..models import from_hf_config
    from . import print_json

    if args.limit < 1:
        from ..errors import MliteError

        raise MliteError(f"--limit {args.limit}: give the number of meshes to print (1 or more)")
    spec = from_hf_config(args.config)
    if args.list:
        return _print_list(spec, args)
    how = judgment(args.engine)
    plan = plan_from_args(spec, args, args.seq_len, auto_uneven=how.auto_uneven, kv_replication=how.kv_replication)
    doc = plan.to_dict()
    if args.rank is not None:
        if not plan.dp or not plan.edp:
            from ..errors import MliteError

            raise MliteError("--rank needs a GPU count divisible by the model-parallel sizes; fix the errors first")
        doc["groups"] = plan.groups(args.rank)
    if args.json:
        print_json(doc)
    else:
        print(
            f"{spec.name} on {args.ngpu} GPUs: {sizes_text(plan.parallel.sizes())}"
            f" -> dp={plan.dp} edp={plan.edp}  [{'valid' if plan.valid else 'INVALID'}]"
        )
        if plan.layout:
            print(f"  stages: {plan.layout}  ({plan.layout_source})")
        for f in plan.findings:
            print(f"  {f.level}: [{f.rule}] {f.message}")
        if "groups" in doc:
            for k, v in doc["groups"].items():
                print(f"  rank {args.rank} {k:5s} {v}")
    return 0 if plan.valid else 1
