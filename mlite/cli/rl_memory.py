"""``mlite rl-memory CONFIG --ngpu N [mesh and training flags of mlite memory] --rollout vllm|sglang ...``: GPU and
host memory of one colocated verl GRPO/PPO step, phase by phase (rollout, old_log_prob, ref, actor_update,
weight_sync), with the engine's start-up verdicts and KV capacity. ``--strategy fsdp|fsdp2`` makes the actor and the
reference verl's FSDP workers (:mod:`mlite.memory.rl_fsdp`; their flags: :data:`mlite.options.rl_fsdp.FSDP_ROWS`); the
``--json`` document then adds ``actor_strategy`` and ``fsdp`` (the options used), every other key as before.

Exit 0 when every phase fits and the engine starts, 1 when not (or the actor mesh is invalid), 2 on bad usage.
"""

from __future__ import annotations

COMMAND = "rl-memory"
ORDER = 31


def _add_training_flags(p) -> None:
    """The mesh and training flags of ``mlite memory`` (both from :mod:`mlite.options`: the offload flags
    ``--param-offload``, ``--optimizer-offload``, ``--grad-offload`` are its rows); the actor trains on P + R tokens
    unless ``--seq-len`` says otherwise."""
    from .memory import add_memory_flags
    from .mesh import add_mesh_flags

    add_mesh_flags(p)
    add_memory_flags(p)
    p.set_defaults(seq_len=None)
    for action in p._actions:
        if action.dest == "seq_len":
            action.help = "tokens per actor micro-batch row (default: --prompt-len + --response-len)"


def add_parser(sub):
    p = sub.add_parser(
        COMMAND,
        help="GPU and host memory of a colocated verl RL step, phase by phase",
        description="Actor (mlite memory estimate), reference and a vLLM / SGLang rollout engine on "
        "the same GPUs: rollout, old_log_prob, ref, actor_update, weight_sync.",
    )
    p.add_argument("config", metavar="CONFIG", help="config.json path or a name in data/models/")
    p.add_argument("--ngpu", type=int, required=True, help="GPU count (world size)")
    _add_training_flags(p)
    add_rollout_flags(p)
    add_fsdp_flags(p)
    add_critic_flags(p)
    p.add_argument(
        "--logged-step",
        type=int,
        default=None,
        metavar="K",
        help="also give the phases and predicted metrics as a log line of step K shows them (step 1: no optimizer "
        "moments before each owner's first update; the default figures are the steady state)",
    )
    p.add_argument("--json", action="store_true", help="print the JSON document")
    return p


def add_fsdp_flags(p) -> None:
    """The flags of verl's FSDP actor, from the rows of :data:`mlite.options.rl_fsdp.FSDP_ROWS` (``--strategy``
    fsdp / fsdp2 selects :mod:`mlite.memory.rl_fsdp`; the Megatron offload flags do not apply then)."""
    from ..options import add_flags
    from ..options.rl_fsdp import FSDP_ROWS

    add_flags(p, FSDP_ROWS)


def add_critic_flags(p) -> None:
    """The flags of PPO's critic, from the rows of :data:`mlite.options.rl_critic.CRITIC_ROWS`."""
    from ..options import add_flags
    from ..options.rl_critic import CRITIC_ROWS

    add_flags(p, CRITIC_ROWS)


def critic_from_args(args):
    """:class:`~mlite.memory.rl_critic.CriticOptions` from the parsed flags (defaults for a parser without them)."""
    from ..memory.rl_critic import CriticOptions
    from ..options import values_from_args
    from ..options.rl_critic import CRITIC_ROWS

    if not hasattr(args, "adv_estimator"):
        return CriticOptions()
    kw = values_from_args(args, CRITIC_ROWS)
    if not kw.get("enable"):
        kw["enable"] = None  # the switch unset: verl's need_critic decides from the estimator
    return CriticOptions(**kw)


MEGATRON_ONLY_FLAGS = (
    ("param_offload", "--param-offload", "--fsdp-param-offload"),
    ("optimizer_offload", "--optimizer-offload", "--fsdp-optimizer-offload"),
    ("grad_offload", "--grad-offload", "--fsdp-param-offload (it moves the gradients too)"),
)
"""Training flags that are Megatron's offload: (option field, flag, the FSDP flag to give instead)."""


def fsdp_from_args(args, o=None):
    """:class:`~mlite.memory.rl_fsdp.FsdpOptions` from the parsed flags; with ``--strategy fsdp|fsdp2`` the
    Megatron offload flags of the training options ``o`` are refused (verl's FSDP workers read
    ``fsdp_config.param_offload`` / ``optimizer_offload``)."""
    from ..errors import MliteError
    from ..memory.rl_fsdp import FsdpOptions
    from ..options import values_from_args
    from ..options.rl_fsdp import FSDP_ROWS

    if not hasattr(args, "strategy"):  # a parser without the FSDP flags (mlite time)
        return FsdpOptions()
    f = FsdpOptions(**values_from_args(args, FSDP_ROWS))
    if f.is_fsdp and o is not None:
        for field, flag, instead in MEGATRON_ONLY_FLAGS:
            if getattr(o, field, False):
                raise MliteError(
                    f"{flag} is Megatron's offload; with --strategy {f.strategy} give {instead} "
                    "(verl's FSDP workers read actor.fsdp_config.*: verl/workers/fsdp_workers.py @ v0.7.0)"
                )
    return f


def add_rollout_flags(p, *, optional: bool = False) -> None:
    """The rollout flags, from the rows of :data:`mlite.options.rollout.ROLLOUT` (help: each row's verl key first);
    the memory share's two spellings and the two ``free_cache_engine`` switches are mutually exclusive.
    ``optional``: the required rows are not required by argparse (``mlite time`` asks for them only with ``--rl``:
    :func:`missing_rollout_flags`)."""
    from dataclasses import replace

    from ..options import add_flags
    from ..options.rollout import CACHE, GROUP, ROLLOUT, SHARE, SPELLINGS

    g = p.add_argument_group(GROUP)
    groups = {GROUP: g, SHARE: g.add_mutually_exclusive_group(), CACHE: g.add_mutually_exclusive_group()}
    rows = [x for r in ROLLOUT for x in (r, *(s for s in SPELLINGS if s.field == r.field))]  # a pair side by side
    if optional:
        rows = [replace(r, required=False, default=None) if r.required else r for r in rows]
    add_flags(p, rows, groups=groups)


def missing_rollout_flags(args) -> list[str]:
    """The required rollout flags an :func:`add_rollout_flags` ``optional`` parser was not given."""
    from ..options.rollout import ROLLOUT

    return [r.flag for r in ROLLOUT if r.required and r.flag and getattr(args, r.dest, None) is None]


def rollout_from_args(args):
    """:class:`RolloutOptions` from the parsed flags (the rows' fields; ``--mem-fraction-static`` is sglang's
    spelling of ``gpu_memory_utilization``)."""
    from ..errors import MliteError
    from ..memory.rl_options import RolloutOptions
    from ..options import values_from_args
    from ..options.rollout import MEM_FRACTION_STATIC, ROLLOUT

    kw = values_from_args(args, ROLLOUT)
    flag: str | None = "--gpu-memory-utilization"
    if getattr(args, MEM_FRACTION_STATIC.dest) is not None:
        if kw["name"] != "sglang":
            raise MliteError("--mem-fraction-static is SGLang's; for vLLM give --gpu-memory-utilization")
        flag, kw["gpu_memory_utilization"] = MEM_FRACTION_STATIC.flag, getattr(args, MEM_FRACTION_STATIC.dest)
    u = kw["gpu_memory_utilization"]
    if not 0.0 < u <= 1.0:
        raise MliteError(f"{flag} {u:g} must be in (0, 1]: it is a fraction of the device memory")
    return RolloutOptions(**kw)


def positive_flags() -> tuple[str, ...]:
    """The argparse destinations that must be positive integers: ``--ngpu`` and the integer rollout flags with a
    positive number for default (a count that may be 0, ``--sibling-contexts``, is checked by its field)."""
    from ..options.rollout import ROLLOUT

    return (
        "ngpu",
        *(r.dest for r in ROLLOUT if r.flag and r.type is int and (r.required or r.default not in (None, 0))),
    )


def _inputs(args):
    """``(spec, mesh plan, training options, rollout options)`` of parsed ``mlite rl-memory`` arguments."""
    from ..mesh import resolve
    from ..models import from_hf_config
    from .memory import options_from_args
    from .mesh import parallel_from_args

    r = rollout_from_args(args)
    if args.seq_len is None:
        args.seq_len = r.seq_tokens
    spec = from_hf_config(args.config)
    o = options_from_args(args)
    plan = resolve(spec, args.ngpu, parallel_from_args(args), seq_len=o.seq_len, gpus_per_node=args.gpus_per_node)
    return spec, plan, o, r


def estimate_command(line: str):
    """The :class:`~mlite.memory.rl.RLEstimate` an ``mlite rl-memory ...`` command line gives (what the RL view
    prints is checked against it)."""
    import shlex

    from ..errors import MliteError
    from ..memory.rl import rl_estimate
    from . import build_parser

    words = shlex.split(line)
    if words[:2] != ["mlite", "rl-memory"]:
        raise MliteError(f"not an 'mlite rl-memory' command: {line!r}")
    args = build_parser().parse_args(words[1:])
    spec, plan, o, r = _inputs(args)
    return rl_estimate(spec, plan, o, r, fsdp_from_args(args, o), critic_from_args(args))


def run(args) -> int:
    from ..errors import MliteError
    from ..memory import GIB
    from ..memory.rl import rl_estimate
    from ..memory.rl_lazy import check_logged_step
    from . import print_invalid_mesh, print_json

    for flag in positive_flags():
        v = getattr(args, flag)
        if v < 1:
            raise MliteError(f"--{flag.replace('_', '-')} must be a positive integer, got {v}")
    spec, plan, o, r = _inputs(args)
    f = fsdp_from_args(args, o)
    c = critic_from_args(args)
    if not plan.valid:
        return print_invalid_mesh(plan, args.json)
    est = rl_estimate(spec, plan, o, r, f, c)
    doc = est.to_dict(logged_step=check_logged_step(args.logged_step))
    if args.json:
        print_json(doc)
        return 0 if est.fits else 1
    g = lambda x: f"{x / GIB:7.1f} GiB"
    lvl = f"sleep level {r.resolved_sleep_level}" if r.free_cache_engine else "free_cache_engine=False"
    print(
        f"{spec.name} on {args.ngpu} GPUs, {r.name} TP {r.tensor_model_parallel_size} "
        f"(gpu_memory_utilization {r.gpu_memory_utilization}, {lvl}), usable {g(est.usable)} per GPU"
        + (f", actor {f.strategy}" if f.is_fsdp else "")
        + (f", critic {est.critic.model} TP {c.tp} PP {c.pp}" if est.critic is not None else "")
    )
    print(f"  {'phase':13s} {'GPU':>11s} {'host/GPU':>11s}  verdict")
    for name, ph in doc["phases"].items():
        mark = "fits" if est.phase_fits(name) else "DOES NOT FIT"
        peak = "  <- peak" if name == doc["peak_phase"] else ""
        print(f"  {name:13s} {g(ph['gpu'])} {g(ph['host_per_gpu'])}  {mark}{peak}")
    kv = doc["kv_cache"]
    print(
        f"  KV cache {g(kv['bytes'])} per GPU, {kv['bytes_per_token']:,} B/token: {kv['tokens']:,} tokens, "
        f"{kv['max_concurrent_seqs']:,} sequences of {r.seq_tokens} tokens at once"
    )
    rs = doc.get("resync")
    if rs:
        what = (
            f"{rs['tensor']} gathered over {rs['gather']}, {rs['copies']} copies"
            if rs["tensor_bytes"]
            else "nothing gathered"
        )
        print(
            f"  resync export peak {g(rs['export_peak'])}: {what}, {rs['buckets']} bucket(s) of "
            f"{rs['bucket_bytes'] / 2**20:,.0f} MiB"
        )
    print(
        f"  host RAM per node {g(doc['host_per_node'])}"
        + (f" of --host-mem {args.host_mem:g} GiB" if args.host_mem else "")
    )
    print_predicted_metrics(doc)
    if "logged_step" in doc:
        at = doc["predicted_metrics_at_logged_step"]
        print(
            f"  on a log line of step {doc['logged_step']}: "
            + ", ".join(
                f"{doc['predicted_metrics_assumed']['logged_keys'][k]} {v / GIB:.1f} GiB" for k, v in at.items()
            )
        )
    for w in doc["warnings"]:
        if not any(w.startswith(f"{n} does not fit") for n in est.phases):  # the table already says which phase
            print(f"  warning: {w}")
    for e in doc["errors"]:
        print(f"  error: {e}")
    print(f"  {'fits' if est.fits else 'does NOT fit'}")
    return 0 if est.fits else 1


def print_predicted_metrics(doc: dict) -> None:
    """The predicted verl memory metrics of an ``rl-memory`` document beside its phases: which one a log shows and
    what each covers (:mod:`mlite.memory.rl_metrics`)."""
    a = doc["predicted_metrics_assumed"]
    print(f"  verl {a['verl_version']} logs (engine placement {a['placement']}; {a['placement_source']}):")
    for name, b in doc["predicted_metrics"].items():
        shows = "  <- a log's memory peak" if name == a["log_shows"] else ""
        print(f"    {a['logged_keys'][name]:34s} {b / 1024**3:7.1f} GiB{shows}")
        print(f"      {a['covers'][name]}")
