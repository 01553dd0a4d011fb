"""``mlite import-launcher FILE [--config CONFIG] [--env NAME=VALUE ...] [--estimate [--gpu-mem H100]] [--json]``:
read an existing verl launcher (script with bash arrays, ``case`` blocks, a resolved ``DRY_RUN=1`` / ``set -x``
command, or a generated launcher) back into a plan and judge its mesh as Megatron-Core would; ``--estimate`` adds the
training memory estimate of that plan (per GPU, host, fits).

Exit 0 when the mesh is valid (and, with ``--estimate``, fits), 1 when it is not, 2 on bad usage (no file, no verl
launch line, a mesh size it could not read, ``--estimate`` without a model config).
"""

from __future__ import annotations

from ..units import GIB

COMMAND = "import-launcher"
ORDER = 45


def add_parser(sub):
    from ..mesh.axes import AXIS_NAMES

    p = sub.add_parser(
        COMMAND,
        help="read a verl launcher's Hydra overrides back into a mesh plan",
        description=f"Reads {'/'.join(AXIS_NAMES)} (mlite engine or verl Megatron keys), "
        "trainer.nnodes x trainer.n_gpus_per_node and the memory options; FILE '-' reads stdin.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--config", default=None, help="model config (data/models name or path); default: from model.path")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable the script reads from the environment (repeatable)",
    )
    p.add_argument("--estimate", action="store_true", help="add the training memory estimate of the imported plan")
    from ..options.table import TRAINING, rows_by_field

    gpu = rows_by_field(TRAINING)["gpu_memory_gib"]  # the same option as mlite memory's --gpu-mem
    p.add_argument(
        gpu.flag, default=None, metavar=gpu.metavar, help=f"{gpu.help}, for --estimate (default {gpu.default:g})"
    )
    p.add_argument("--json", action="store_true")
    return p


def _gpu_mem(value):
    from ..options.cli import gpu_gib

    return None if value is None else gpu_gib(value, "--gpu-mem")


def run(args) -> int:
    import sys

    from ..errors import MliteError
    from ..export import import_launcher
    from ..mesh.axes import sizes_text
    from . import print_json

    gib = _gpu_mem(args.gpu_mem)
    if gib is not None and not args.estimate:
        raise MliteError("--gpu-mem is for --estimate; add --estimate")
    env = {}
    for item in args.env:
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier():
            raise MliteError(f"--env {item!r}: expected NAME=VALUE")
        env[name] = value
    if args.file == "-":
        imp = import_launcher("<stdin>", env=env, text=sys.stdin.read())
    else:
        imp = import_launcher(args.file, env=env)
    doc = imp.to_dict(args.config)
    est = None
    if args.estimate:
        from ..export.importer import rl_estimate

        _, est = imp.estimate(args.config, gpu_memory_gib=gib)
        doc["estimate"] = est.to_dict() if est is not None else None
        doc["rl_estimate"] = None
        if est is not None:
            try:
                doc["rl_estimate"] = rl_estimate(imp, est, args.config)
            except MliteError as e:  # the RL model does not cover this model: the training estimate still stands
                doc["warnings"].append(f"no RL estimate: {e.message}")
    rl = doc.get("rl_estimate")
    ok = doc["valid"] and (est is None or est.fits) and (rl is None or rl["fits"])
    if args.json:
        print_json(doc)
        return 0 if ok else 1
    print(
        f"{imp.source}: {doc['target']} ({doc['entry']}), {doc['nnodes']} x {doc['gpus_per_node']} = "
        f"{doc['ngpu']} GPUs, model {doc['model_config'] or doc['model_path'] or '?'}"
    )
    print(f"  {sizes_text(doc)} -> dp={doc['dp']} edp={doc['edp']}  [{'valid' if doc['valid'] else 'INVALID'}]")
    if doc["pp_layout"]:
        print(f"  stages: {doc['pp_layout']}  ({doc['layout_source']})")
    if doc["options"]:
        print("  options: " + " ".join(f"{k}={v}" for k, v in doc["options"].items()))
    vv = doc["verl_version"]
    print(f"  verl version: {vv['version'] or 'not named'} ({vv['source']})")
    for err in doc["errors"]:
        print(f"  error: {err}")
    for w in doc["warnings"]:
        print(f"  warning: {w}")
    for i in doc["info"]:
        print(f"  info: {i}")
    if est is not None:
        _print_estimate(est, doc["estimate"])
        if rl is not None:
            _print_rl(rl)
    elif args.estimate:
        print("  estimate: none (the mesh is invalid)")
    return 0 if ok else 1


def _print_estimate(est, d) -> None:
    from ..memory import GIB

    def g(x):
        return f"{x / GIB:8.2f} GiB"

    pg = d["per_gpu"]
    print(
        f"  estimate ({est.options.optimizer}, {'PAO' if est.options.pao else 'no PAO'}), most loaded pipeline rank "
        f"{d['stage']}:"
    )
    for k in ("params", "grads", "optimizer", "activations", "other", "total"):
        print(f"    {k:12s} {g(pg[k])}")
    print(f"    host         {g(d['host']['per_gpu'])} per GPU, {g(d['host']['per_node'])} per node")
    verdict = "fits" if est.fits else "does NOT fit"
    print(f"    {verdict}: {g(pg['total'])} vs usable {g(d['usable'])} of {g(d['gpu_mem'])}")


def _print_rl(rl: dict) -> None:
    """The RL step by phase (GPU per GPU, host per node), as ``mlite rl-memory`` reports it."""
    kv = rl["kv_cache"]
    print(
        f"  RL step (rollout settings read from the launcher; verl's defaults for the rest): peak phase "
        f"{rl['peak_phase']}, {'fits' if rl['fits'] else 'does NOT fit'}; KV cache {kv['bytes'] / GIB:.2f} GiB = "
        f"{kv['tokens']:,} tokens ({kv['max_concurrent_seqs']} sequences of prompt + response); host per node "
        f"{rl['host_per_node'] / GIB:.1f} GiB"
    )
    for name, ph in rl["phases"].items():
        print(f"    {name:<14} GPU {ph['gpu'] / GIB:8.2f} GiB   host/GPU {ph['host_per_gpu'] / GIB:7.2f} GiB")
    for e in rl["errors"]:
        print(f"    error: {e}")
    from .rl_memory import print_predicted_metrics

    print_predicted_metrics(rl)
