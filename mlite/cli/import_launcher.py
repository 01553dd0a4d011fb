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
    from ..export.importer_fsdp import fsdp_options

    fsdp = fsdp_options(imp)
    doc = imp.to_dict(args.config)
    est = None
    if fsdp is not None:  # verl's FSDP actor: never a Megatron estimate (mlite/export/importer_fsdp.py)
        doc["strategy"] = fsdp.strategy
        doc["fsdp"] = fsdp.to_dict()
    if args.estimate and fsdp is not None:
        return _run_fsdp(args, imp, doc, gib)
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
    for err in doc["rollout_errors"]:
        print(f"  rollout error: {err}")
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


def _run_fsdp(args, imp, doc: dict, gib) -> int:
    """``--estimate`` of an FSDP GRPO/PPO launcher: ``estimate`` is null (no Megatron estimate), ``fsdp_estimate``
    the FSDP actor on one GPU, ``rl_estimate`` the RL phases with the FSDP actor and reference."""
    from ..export.importer_fsdp import fsdp_estimate
    from . import print_json

    fe = fsdp_estimate(imp, args.config, gpu_memory_gib=gib)
    doc["warnings"] = doc["warnings"] + [w for w in imp.warnings if w not in doc["warnings"]]
    doc["estimate"] = None
    doc["fsdp_estimate"] = fe["actor"]
    doc["rl_estimate"] = fe["rl"]
    ok = doc["valid"] and fe["actor"]["fits"] and fe["rl"]["fits"]
    if args.json:
        print_json(doc)
        return 0 if ok else 1
    print(
        f"{imp.source}: {doc['target']} ({doc['entry']}), {doc['nnodes']} x {doc['gpus_per_node']} = "
        f"{doc['ngpu']} GPUs, model {doc['model_config'] or doc['model_path'] or '?'}, actor {fe['strategy']}"
    )
    f = fe["fsdp"]
    print(
        "  fsdp: "
        + " ".join(
            f"{k}={f[k]}"
            for k in (
                "fsdp_size",
                "ulysses_sequence_parallel_size",
                "use_dynamic_bsz",
                "ppo_max_token_len_per_gpu",
                "ppo_micro_batch_size_per_gpu",
                "use_remove_padding",
                "enable_gradient_checkpointing",
                "param_offload",
                "optimizer_offload",
            )
        )
    )
    for err in doc["errors"]:
        print(f"  error: {err}")
    for w in doc["warnings"]:
        print(f"  warning: {w}")
    a = fe["actor"]

    def g(x):
        return f"{x / GIB:8.2f} GiB"

    print(f"  FSDP actor update ({fe['strategy']}), one GPU:")
    for k in ("params", "grads", "optimizer", "activations", "transient_peak", "total"):
        print(f"    {k:14s} {g(a[k])}")
    print(f"    host           {g(a['host_per_gpu'])} per GPU (offloaded state)")
    print(f"    {'fits' if a['fits'] else 'does NOT fit'}: {g(a['total'])} vs usable {g(a['usable'])}")
    _print_rl(fe["rl"])
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
