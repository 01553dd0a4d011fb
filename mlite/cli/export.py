"""``mlite export CONFIG --nodes N --gpus-per-node G [mesh flags] [memory flags] --target T --out DIR [--json]``:
write a verl launcher (SFT on the mlite engine, GRPO with the mlite actor, or GRPO on verl's Megatron backend), the
Slurm job that starts Ray and runs it, and plan.json.

Exit 0 when the files were written, 1 when the mesh is invalid (the reasons are printed), 2 on bad usage.
"""

from __future__ import annotations

COMMAND = "export"
ORDER = 40


def add_parser(sub):
    from ..export import DEFAULT_LOG_DIR, TARGETS
    from .memory import add_memory_flags
    from .mesh import add_mesh_flags

    p = sub.add_parser(COMMAND, help="write verl launchers and a Slurm + Ray job for a model, mesh and options",
                       description="Targets: verl-mlite-sft (torchrun, engine=mlite), verl-mlite-grpo "
                       "(actor@actor_rollout_ref.actor=mlite_actor), verl-megatron-grpo (verl's Megatron backend).")
    p.add_argument("config", metavar="CONFIG", help="config.json path or a name in data/models/")
    p.add_argument("--nodes", type=int, required=True, help="Slurm nodes")
    add_mesh_flags(p)
    add_memory_flags(p)
    g = p.add_argument_group("export")
    g.add_argument("--target", required=True, choices=TARGETS)
    g.add_argument("--out", required=True, help="folder to write the files into (created)")
    g.add_argument("--model-path", default=None, help="checkpoint directory on the cluster (default: the model name)")
    g.add_argument("--train-files", default=None, help="training parquet (default ~/data/gsm8k/train.parquet)")
    g.add_argument("--val-files", default=None, help="validation parquet (default ~/data/gsm8k/test.parquet)")
    g.add_argument("--log-dir", default=DEFAULT_LOG_DIR,
                   help=f"Slurm output and JSONL metrics (default {DEFAULT_LOG_DIR})")
    g.add_argument("--project", default="mlite-lab", help="trainer.project_name")
    g.add_argument("--experiment", default=None, help="trainer.experiment_name and Slurm job name")
    g.add_argument("--partition", default=None)
    g.add_argument("--account", default=None)
    g.add_argument("--time", default=None, help="Slurm time limit, e.g. 24:00:00")
    g.add_argument("--cpus-per-task", type=int, default=64, help="CPUs of the one task per node (Ray --num-cpus)")
    p.add_argument("--json", action="store_true", help="list the files written with the resolved mesh")
    return p


def run(args) -> int:
    from ..export import ExportPlan, InvalidMesh, write
    from . import print_json
    from .memory import options_from_args
    from .mesh import parallel_from_args

    kw = {k: v for k, v in (("model_path", args.model_path), ("train_files", args.train_files),
                            ("val_files", args.val_files), ("experiment_name", args.experiment),
                            ("partition", args.partition), ("account", args.account),
                            ("time_limit", args.time)) if v is not None}
    plan = ExportPlan(model=args.config, target=args.target, parallel=parallel_from_args(args),
                      options=options_from_args(args), nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                      log_dir=args.log_dir, project_name=args.project, cpus_per_task=args.cpus_per_task, **kw)
    try:
        res = write(plan, args.out)
    except InvalidMesh as e:
        doc = e.mesh.to_dict()
        if args.json:
            print_json({"valid": False, "errors": doc["errors"], "warnings": doc["warnings"], "files": []})
        else:
            for f in e.mesh.errors:
                print(f"error: [{f.rule}] {f.message}")
        return 1
    if args.json:
        print_json(res.to_dict())
        return 0
    m = res.mesh
    print(f"{args.target}: {plan.nodes} x {plan.gpus_per_node} GPUs, tp={m['tp']} pp={m['pp']} vpp={m['vpp']} "
          f"cp={m['cp']} ep={m['ep']} etp={m['etp']} -> dp={m['dp']} edp={m['edp']}")
    for path in res.paths:
        print(f"  wrote {path}")
    for w in m["warnings"] + res.notes:
        print(f"  warning: {w}")
    print(f"  submit: cd {args.out} && mkdir -p {plan.log_dir} && sbatch {res.job}")
    return 0
