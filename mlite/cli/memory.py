"""``mlite memory CONFIG --ngpu N [mesh flags] [memory flags] [--json]``: per-GPU and host memory estimate.

Exit 0 when the configuration fits, 1 when it does not (or the mesh is invalid), 2 on bad usage.
"""

from __future__ import annotations

COMMAND = "memory"
ORDER = 30


def add_memory_flags(p) -> None:
    """The memory flags shared by ``memory`` and ``export`` (from :data:`mlite.options.TRAINING`; ``--seq-len``
    and ``--gpus-per-node`` come with the mesh flags)."""
    from ..options import TRAINING, add_flags

    add_flags(p, TRAINING)


def options_from_args(args):
    """The :class:`~mlite.options.TrainingOptions` of the parsed flags."""
    from ..options import TRAINING, TrainingOptions, values_from_args

    return TrainingOptions(**values_from_args(args, TRAINING))


def grad_copy_note(o, doc) -> str:
    """What a bf16 gradient buffer without PAO costs after the step, and which runtime that figure is for."""
    from ..options.optimizers import BACKENDS

    if not BACKENDS.entry(o.optimizer).grad_buffer or o.main_grads_dtype != "bf16" or o.pao or o.param_dtype == "fp32":
        return ""
    from ..units import GIB

    gib = doc["step_grads"] / GIB
    if doc["step_grads"]:
        return (
            f"+ {gib:.2f} GiB fp32 main-grad copies from the step to zero_grad (in static, not at the forward/backward "
            "peak): Megatron-Core's optimizer with grad_reduce_in_fp32=False; the lite runtime's dist_opt makes none "
            "(--activation-model lite)"
        )
    if o.activation_model == "lite":
        return (
            "bf16 grad buffer read as it is: the lite runtime's dist_opt widens it chunk by chunk (no fp32 copies; "
            "Megatron-Core's optimizer would add 4 B per shard parameter after the step)"
        )
    return ""


def add_parser(sub):
    from .mesh import add_mesh_flags

    p = sub.add_parser(
        COMMAND,
        help="estimate per-GPU and host memory for a model, mesh and optimizer settings",
        description="Bytes per parameter, optimizer state, activations, offload; fits or not.",
    )
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--ngpu", type=int, required=True)
    add_mesh_flags(p)
    add_memory_flags(p)
    p.add_argument("--json", action="store_true")
    return p


def ngram_note(doc: dict) -> str:
    """What the ``ngram_tables`` row holds: owners and mode (:mod:`mlite.memory.ngram`)."""
    nd = doc["ngram_detail"]
    mode = "trainable: fp8 + scales + master + main grad + momentum" if nd["trainable"] else "frozen: fp8 + scales"
    return f"  Engram rows over {nd['owners']} DP x CP owners ({mode}; never offloaded)"


def run(args) -> int:
    from ..errors import MliteError
    from ..memory import GIB, estimate
    from ..mesh import resolve
    from ..models import from_hf_config
    from . import print_invalid_mesh, print_json
    from .mesh import parallel_from_args

    spec = from_hf_config(args.config)
    o = options_from_args(args)
    plan = resolve(spec, args.ngpu, parallel_from_args(args), seq_len=o.seq_len, gpus_per_node=args.gpus_per_node)
    if not plan.valid:
        return print_invalid_mesh(plan, args.json)
    est = estimate(spec, plan, o)
    doc = est.to_dict()
    if args.json:
        print_json(doc)
        return 0 if est.fits else 1
    g = lambda x: f"{x / GIB:8.2f} GiB"
    pg = doc["per_gpu"]
    print(
        f"{spec.name} on {args.ngpu} GPUs ({o.optimizer}, {'PAO' if o.pao else 'no PAO'}), most loaded: "
        f"pipeline rank {doc['stage']}"
    )
    for k in ("params", "grads", "optimizer", "activations", "ngram_tables", "other", "total"):
        if k in pg:  # ngram_tables: only a model with n-gram tables (Engram)
            print(f"  {k:12s} {g(pg[k])}{ngram_note(doc) if k == 'ngram_tables' else ''}")
    od = doc["optimizer_detail"]
    print(f"  optimizer = master {g(od['master'])} + exp_avg {g(od['exp_avg'])} + exp_avg_sq {g(od['exp_avg_sq'])}")
    print(f"  bytes/param {doc['bytes_per_param']:.3f} over {doc['local_params']:,} local parameters")
    print(f"  static      {g(doc['static'])} after the optimizer step, peak {g(doc['peak'])} allocated")
    note = grad_copy_note(o, doc)
    if note:
        print(f"  {note}")
    ck = doc.get("chunked_state_offload")
    if ck:
        stuck = f", masters kept on the GPU {g(ck['resident_masters']).strip()}" if ck["resident_masters"] else ""
        print(
            f"  chunked     update restores masters {g(ck['master_window']).strip()} + moments "
            f"{g(ck['state_window']).strip()} (two slots), host {g(ck['host']).strip()}{stuck}"
        )
    print(f"  host        {g(doc['host']['per_gpu'])} per GPU, {g(doc['host']['per_node'])} per node")
    verdict = "fits" if est.fits else "does NOT fit"
    print(f"  {verdict}: {g(pg['total'])} vs usable {g(doc['usable'])} of {g(doc['gpu_mem'])}")
    print(f"  activations: {doc['validated_against']}")
    if not isinstance(doc["fits"], bool):
        raise MliteError("internal: fits verdict missing")
    return 0 if est.fits else 1
