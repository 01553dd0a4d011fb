"""``mlite rl-memory CONFIG --ngpu N [mesh and training flags of mlite memory] --rollout vllm|sglang ...``: GPU and
host memory of one colocated verl GRPO/PPO step, phase by phase (rollout, old_log_prob, ref, actor_update,
weight_sync), with the engine's start-up verdicts and KV capacity.

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
    from ..memory.rl_keys import REF_OFFLOAD_KEYS, ROLLOUT_KEYS
    from ..memory.rl_options import REF_MODES, ROLLOUT_NAMES

    key = dict(ROLLOUT_KEYS)  # the verl key of each RolloutOptions field, from the one rollout key table
    _add_training_flags(p)
    g = p.add_argument_group("rollout (verl actor_rollout_ref.rollout.*)")
    g.add_argument("--rollout", choices=ROLLOUT_NAMES, required=True, help=key["name"])
    g.add_argument("--rollout-tp", type=int, required=True, help=key["tensor_model_parallel_size"])
    g.add_argument(
        "--rollout-dp",
        type=int,
        default=1,
        help=f"{key['data_parallel_size']}: DP ranks of one engine (routed experts split over TP x DP; default 1)",
    )
    share = g.add_mutually_exclusive_group()
    share.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help=f"{key['gpu_memory_utilization']}, vLLM: share of total device memory (default 0.5, verl's); "
        "with sglang verl passes it as mem_fraction_static",
    )
    share.add_argument(
        "--mem-fraction-static",
        type=float,
        default=None,
        help=f"SGLang's mem_fraction_static ({key['gpu_memory_utilization']} with sglang): share of the memory "
        "free at start for weights + KV",
    )
    cache = g.add_mutually_exclusive_group()
    cache.add_argument(
        "--free-cache-engine",
        dest="free_cache_engine",
        action="store_true",
        default=True,
        help=f"{key['free_cache_engine']}=True: sleep the engine after generation (verl's default)",
    )
    cache.add_argument(
        "--no-free-cache-engine",
        dest="free_cache_engine",
        action="store_false",
        help=f"{key['free_cache_engine']}=False: keep weights and KV cache on the GPU through training",
    )
    g.add_argument(
        "--sleep-level",
        type=int,
        choices=(1, 2),
        default=None,
        help="1: weights to host RAM, KV freed; 2: both freed (default: verl's choice, 2 in hybrid mode)",
    )
    g.add_argument("--prompt-len", type=int, required=True, help=f"{key['prompt_length']} (P)")
    g.add_argument("--response-len", type=int, required=True, help=f"{key['response_length']} (R)")
    g.add_argument("--rollout-n", type=int, required=True, help=f"{key['n']} (K responses per prompt)")
    g.add_argument("--rollout-batch", type=int, required=True, help=f"{key['train_batch_size']} (B prompts per step)")
    g.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help=f"{key['max_model_len']} (default: the model's max_position_embeddings, as verl sets it)",
    )
    g.add_argument(
        "--ref",
        choices=REF_MODES,
        default="colocated",
        help="reference model (verl builds one with actor.use_kl_loss or algorithm.use_kl_in_reward)",
    )
    g.add_argument("--ref-offload", action="store_true", help=" / ".join(REF_OFFLOAD_KEYS))
    g.add_argument("--host-mem", type=float, default=None, help="host RAM per node in GiB to check against")
    p.add_argument("--json", action="store_true", help="print the JSON document")
    return p


def rollout_from_args(args):
    """:class:`RolloutOptions` from the parsed flags."""
    from ..errors import MliteError
    from ..memory.rl_options import RolloutOptions

    if args.mem_fraction_static is not None and args.rollout != "sglang":
        raise MliteError("--mem-fraction-static is SGLang's; for vLLM give --gpu-memory-utilization")
    flag = "--mem-fraction-static" if args.mem_fraction_static is not None else "--gpu-memory-utilization"
    u = args.mem_fraction_static if args.mem_fraction_static is not None else args.gpu_memory_utilization
    if u is not None and not 0.0 < u <= 1.0:
        raise MliteError(f"{flag} {u:g} must be in (0, 1]: it is a fraction of the device memory")
    kw = {} if u is None else {"gpu_memory_utilization": u}
    return RolloutOptions(
        name=args.rollout,
        tensor_model_parallel_size=args.rollout_tp,
        data_parallel_size=args.rollout_dp,
        free_cache_engine=args.free_cache_engine,
        sleep_level=args.sleep_level,
        prompt_length=args.prompt_len,
        response_length=args.response_len,
        n=args.rollout_n,
        train_batch_size=args.rollout_batch,
        max_model_len=args.max_model_len,
        ref=args.ref,
        ref_param_offload=args.ref_offload,
        host_mem_gib=args.host_mem,
        **kw,
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
    return rl_estimate(spec, plan, o, r)


def run(args) -> int:
    from ..errors import MliteError
    from ..memory import GIB
    from ..memory.rl import rl_estimate
    from . import print_invalid_mesh, print_json

    for flag in ("ngpu", "rollout_tp", "rollout_dp", "prompt_len", "response_len", "rollout_n", "rollout_batch"):
        v = getattr(args, flag)
        if v < 1:
            raise MliteError(f"--{flag.replace('_', '-')} must be a positive integer, got {v}")
    spec, plan, o, r = _inputs(args)
    if not plan.valid:
        return print_invalid_mesh(plan, args.json)
    est = rl_estimate(spec, plan, o, r)
    doc = est.to_dict()
    if args.json:
        print_json(doc)
        return 0 if est.fits else 1
    g = lambda x: f"{x / GIB:7.1f} GiB"
    lvl = f"sleep level {r.resolved_sleep_level}" if r.free_cache_engine else "free_cache_engine=False"
    print(
        f"{spec.name} on {args.ngpu} GPUs, {r.name} TP {r.tensor_model_parallel_size} "
        f"(gpu_memory_utilization {r.gpu_memory_utilization}, {lvl}), usable {g(est.usable)} per GPU"
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
    print(
        f"  host RAM per node {g(doc['host_per_node'])}"
        + (f" of --host-mem {args.host_mem:g} GiB" if args.host_mem else "")
    )
    for w in doc["warnings"]:
        if not any(w.startswith(f"{n} does not fit") for n in est.phases):  # the table already says which phase
            print(f"  warning: {w}")
    for e in doc["errors"]:
        print(f"  error: {e}")
    print(f"  {'fits' if est.fits else 'does NOT fit'}")
    return 0 if est.fits else 1
