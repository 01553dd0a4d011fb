"""``mlite time CONFIG --ngpu N [mesh and training flags of mlite memory] [--hardware H] [--json]``: predicted step
time, tokens/s/GPU and MFU of one plan, split into compute, exposed communication, bubble, optimizer and offload.

``--hardware`` names a shipped profile (A100, H100, H200, B200) or a profile file (``mlite calibrate --out``);
``--calibrate-from RUN_DIR`` first refits the profile's compute efficiency to a finished debug run's measured step.
Exit 0 with a prediction, 2 on bad usage (an invalid mesh, an unknown hardware name, a profile field missing).
"""

from __future__ import annotations

COMMAND = "time"
ORDER = 32


def add_parser(sub):
    from .memory import add_memory_flags
    from .mesh import add_mesh_flags, add_split_flags

    p = sub.add_parser(
        COMMAND,
        help="predict the step time and tokens/s/GPU of a model, mesh and training settings on a GPU profile",
        description="Compute (GEMMs, attention, experts), TP/CP/EP/PP/DP traffic with the backend's overlap, "
        "pipeline bubble, optimizer step and offload, on a hardware profile.",
    )
    p.add_argument("config", metavar="CONFIG", help="config.json path or a name in data/models/")
    p.add_argument("--ngpu", type=int, required=True, help="GPU count (world size)")
    add_mesh_flags(p)
    add_split_flags(p)
    add_memory_flags(p)
    from ..time.hardware import add_hardware_flag

    add_hardware_flag(p, default="H200")
    p.add_argument(
        "--calibrate-from",
        default=None,
        metavar="RUN_DIR",
        help="refit the profile's compute efficiency to this finished mlite run's measured step time first",
    )
    p.add_argument(
        "--rl",
        action="store_true",
        help="also predict a colocated verl RL step phase by phase (generate, old_log_prob, ref, update_actor, "
        "update_weights) with the rollout flags of mlite rl-memory; --seq-len defaults to prompt + response",
    )
    from ..time.knobs import add_knob_flags
    from .rl_memory import add_rollout_flags

    add_knob_flags(p)
    add_rollout_flags(p, optional=True)
    p.set_defaults(seq_len=None)
    p.add_argument("--json", action="store_true", help="print the JSON document")
    return p


def prediction_from_args(args):
    """``(spec, plan, training options, StepTime)`` of the parsed flags (the invalid mesh refused in one line)."""
    from ..errors import MliteError
    from ..models import from_hf_config
    from ..time.hardware import load_hardware
    from ..time.model import predict
    from .memory import options_from_args
    from .mesh import plan_from_args

    hw = load_hardware(args.hardware)
    spec = from_hf_config(args.config)
    rollout = None
    if args.rl:
        from .rl_memory import missing_rollout_flags, rollout_from_args

        missing = missing_rollout_flags(args)
        if missing:
            raise MliteError(f"--rl needs the RL batch: give {', '.join(missing)} (as mlite rl-memory takes them)")
        rollout = rollout_from_args(args)
    if args.seq_len is None:
        from ..mesh.config import DEFAULT_SEQ_LEN

        args.seq_len = rollout.seq_tokens if rollout else DEFAULT_SEQ_LEN
    o = options_from_args(args)
    plan = plan_from_args(spec, args, o.seq_len)
    if not plan.valid:
        first = plan.errors[0]
        raise MliteError(f"invalid mesh: [{first.rule}] {first.message} (mlite mesh lists every error)")
    info: dict = {}
    if args.calibrate_from:
        from ..time.fit import calibrate_from_run

        hw, info = calibrate_from_run(args.calibrate_from, hw)
    from ..time.knobs import knobs_from_args

    knobs = knobs_from_args(args)
    t = predict(spec, plan, o, hw, knobs)
    t.calibration = info
    if rollout is not None:
        from ..time.rl import rl_step_time

        t.rl = rl_step_time(spec, plan, o, rollout, hw, knobs)
    return spec, plan, o, t


def run(args) -> int:
    from . import print_json

    spec, plan, o, t = prediction_from_args(args)
    if args.json:
        print_json(t.to_dict())
        return 0
    p = plan.parallel
    from ..mesh.axes import sizes_text

    print(
        f"{spec.name} on {args.ngpu} x {t.hardware.name}: {sizes_text(p.sizes())} dp={plan.dp} edp={plan.edp}, "
        f"{o.optimizer}, {o.num_microbatches} micro-batches of {o.micro_batch_size} x {o.seq_len} tokens"
    )
    print(f"  step        {t.step_s:10.4f} s   {t.tokens_per_s_per_gpu:,.0f} tokens/s/GPU   MFU {t.mfu:.1%}")
    width = max(t.step_s, 1e-30)
    for name, sec in t.parts.items():
        if sec > 0:
            bar = "#" * max(1, round(40 * sec / width))
            print(f"  {name:11s} {sec:10.4f} s {100 * sec / width:5.1f} %  {bar}")
    print(f"  exposed communication {t.exposed_comm_s:.4f} s (of {sum(t.comm_total.values()):.4f} s on the links)")
    if t.calibration:
        c = t.calibration
        print(
            f"  refit from {c['run_dir']}: measured {c['measured_step_s']:.4f} s over {c['steps']} steps, predicted "
            f"{c['predicted_before_s']:.4f} s before, efficiencies x{c['scale']:.3g}"
        )
    if t.rl is not None:
        rl = t.rl
        print(f"  RL step    {rl.step_s:10.4f} s ({rl.update_steps} optimizer step(s) in update_actor)")
        for name, sec in rl.phases.items():
            bar = "#" * max(1, round(40 * sec / max(rl.step_s, 1e-30)))
            print(f"    {name:15s} {sec:10.4f} s  {bar}")
    print("  assumptions:")
    for a in [*t.assumptions, *(t.rl.assumptions if t.rl is not None else [])]:
        print(f"    - {a}")
    return 0
