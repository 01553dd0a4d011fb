"""``mlite memory CONFIG --ngpu N [mesh flags] [memory flags] [--json]``: per-GPU and host memory estimate.

Exit 0 when the configuration fits, 1 when it does not (or the mesh is invalid), 2 on bad usage.
"""

from __future__ import annotations

COMMAND = "memory"
ORDER = 30


def add_memory_flags(p) -> None:
    """The memory flags shared by ``memory`` and ``export``."""
    g = p.add_argument_group("training / memory")
    g.add_argument("--optimizer", choices=("dist_opt", "fsdp2"), default="dist_opt")
    g.add_argument("--no-distributed-optimizer", action="store_true", help="dist_opt without state sharding")
    g.add_argument("--pao", action="store_true", help="use_precision_aware_optimizer")
    g.add_argument("--grad-dtype", choices=("fp32", "bf16"), default="fp32", help="main_grads_dtype")
    g.add_argument("--moment-dtype", choices=("fp32", "bf16"), default="fp32", help="exp_avg(_sq)_dtype")
    g.add_argument("--no-param-remainders", action="store_true", help="store_param_remainders=False")
    g.add_argument("--offload-fraction", type=float, default=0.0, help="optimizer offload_fraction (0..1)")
    g.add_argument("--param-offload", action="store_true", help="runtime context offload of parameters")
    g.add_argument("--optimizer-offload", action="store_true", help="runtime context offload of optimizer state")
    g.add_argument("--micro-batch", type=int, default=1, help="micro_batch_size")
    g.add_argument("--num-microbatches", type=int, default=8)
    g.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    g.add_argument("--recompute-modules", default="", help="comma-separated mlite modules, e.g. mlp,core_attn")
    g.add_argument("--sequence-parallel", action="store_true")
    g.add_argument("--attention", choices=("flash", "unfused"), default="flash")
    g.add_argument("--gpu-mem", default="80", help="device memory in GiB, or a GPU name (H100, H200, B200)")


def options_from_args(args):
    from ..errors import MliteError
    from ..memory import GPU_MEMORY_GIB, TrainingOptions

    gm = str(args.gpu_mem)
    if gm.upper() in GPU_MEMORY_GIB:
        gib = GPU_MEMORY_GIB[gm.upper()]
    else:
        try:
            gib = float(gm)
        except ValueError:
            raise MliteError(f"--gpu-mem {gm!r}: give GiB or one of {', '.join(GPU_MEMORY_GIB)}") from None
    return TrainingOptions(
        optimizer=args.optimizer, use_distributed_optimizer=not args.no_distributed_optimizer,
        use_precision_aware_optimizer=args.pao, main_grads_dtype=args.grad_dtype, exp_avg_dtype=args.moment_dtype,
        exp_avg_sq_dtype=args.moment_dtype, store_param_remainders=not args.no_param_remainders,
        offload_fraction=args.offload_fraction, param_offload=args.param_offload,
        optimizer_offload=args.optimizer_offload, seq_len=args.seq_len, micro_batch_size=args.micro_batch,
        num_microbatches=args.num_microbatches, recompute=args.recompute,
        recompute_modules=tuple(m for m in args.recompute_modules.split(",") if m),
        sequence_parallel=args.sequence_parallel, attention=args.attention, gpu_memory_gib=gib,
        gpus_per_node=args.gpus_per_node)


def add_parser(sub):
    from .mesh import add_mesh_flags

    p = sub.add_parser(COMMAND, help="estimate per-GPU and host memory for a model, mesh and optimizer settings",
                       description="Bytes per parameter, optimizer state, activations, offload; fits or not.")
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--ngpu", type=int, required=True)
    add_mesh_flags(p)
    add_memory_flags(p)
    p.add_argument("--json", action="store_true")
    return p


def run(args) -> int:
    from ..errors import MliteError
    from ..memory import GIB, estimate
    from ..mesh import resolve
    from ..models import from_hf_config
    from . import print_json
    from .mesh import parallel_from_args

    spec = from_hf_config(args.config)
    o = options_from_args(args)
    plan = resolve(spec, args.ngpu, parallel_from_args(args), seq_len=o.seq_len, gpus_per_node=args.gpus_per_node)
    if not plan.valid:
        if args.json:
            print_json({"valid": False, "errors": [f.message for f in plan.errors], "fits": False})
        else:
            for f in plan.errors:
                print(f"error: [{f.rule}] {f.message}")
        return 1
    est = estimate(spec, plan, o)
    doc = est.to_dict()
    if args.json:
        print_json(doc)
        return 0 if est.fits else 1
    g = lambda x: f"{x / GIB:8.2f} GiB"  # noqa: E731
    pg = doc["per_gpu"]
    print(f"{spec.name} on {args.ngpu} GPUs ({o.optimizer}, {'PAO' if o.pao else 'no PAO'}), most loaded: "
          f"pipeline rank {doc['stage']}")
    for k in ("params", "grads", "optimizer", "activations", "other", "total"):
        print(f"  {k:12s} {g(pg[k])}")
    od = doc["optimizer_detail"]
    print(f"  optimizer = master {g(od['master'])} + exp_avg {g(od['exp_avg'])} + exp_avg_sq {g(od['exp_avg_sq'])}")
    print(f"  bytes/param {doc['bytes_per_param']:.3f} over {doc['local_params']:,} local parameters")
    print(f"  host        {g(doc['host']['per_gpu'])} per GPU, {g(doc['host']['per_node'])} per node")
    verdict = "fits" if est.fits else "does NOT fit"
    print(f"  {verdict}: {g(pg['total'])} vs usable {g(doc['usable'])} of {g(doc['gpu_mem'])}")
    print(f"  activations validated against {doc['validated_against']}")
    if not isinstance(doc["fits"], bool):
        raise MliteError("internal: fits verdict missing")
    return 0 if est.fits else 1
