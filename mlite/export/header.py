"""Comment headers shared by the launchers and the sbatch script: mesh accounting with the runtime's rule (and
the difference to verl's launcher rule), the training options, the planner's warnings, the memory estimate, the
predicted step."""

from __future__ import annotations

import math

from ..errors import MliteError
from ..mesh.axes import DENSE_DIMS, EXPERT_DIMS, product_label, sizes_text
from ..mesh.rules import launcher_rule_dp, launcher_rule_outcome


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.3g}"


def _world_lines(sizes: dict) -> list[str]:
    """``  dense ranks  = TP*CP*DP*PP   = 2*1*4*1 = 8`` and the expert line (the runtime's rule with the numbers)."""
    worlds = (("dense ranks ", DENSE_DIMS), ("expert ranks", EXPERT_DIMS))
    width = max(len(product_label(dims)) for _, dims in worlds)
    return [
        f"  {what} = {product_label(dims):<{width}} = {'*'.join(str(sizes[d]) for d in dims)} = "
        f"{math.prod(sizes[d] for d in dims)}"
        for what, dims in worlds
    ]


def mesh_accounting(plan, mp) -> list[str]:
    """Lines stating the runtime rule with this plan's numbers, and where verl's launcher rule differs."""
    p = mp.parallel
    lines = [
        f"Mesh accounting ({mp.ngpu} GPUs = {plan.nodes} node{'s' if plan.nodes > 1 else ''} x "
        f"{plan.gpus_per_node}), the runtime's rule",
        "(Megatron Lite primitive/parallel/state.py and Megatron-Core parallel_state):",
        *_world_lines(p.sizes() | {"dp": mp.dp, "edp": mp.edp}),
        f"  {sizes_text(p.sizes())} -> dp={mp.dp} edp={mp.edp}",
    ]
    if mp.layout:
        how = {"even": "even split", "auto": "uneven, chosen by the planner", "pp_layout": "given"}[mp.layout_source]
        lines.append(f"  stages (pp_layout, {how}): {mp.layout}")
    ldp = launcher_rule_dp(mp.ngpu, p)
    if plan.source_launcher and plan.source_rule_dp is not None:
        diff = mp.dp - plan.source_rule_dp
        lines += [
            f"Imported from {plan.source_launcher}, which computes DP with verl's launcher rule",
            f"  ngpu/PP = TP*EP*DP -> DP = {_fmt(plan.source_rule_dp)}; the runtime's DP is {mp.dp} "
            f"({'the same' if diff == 0 else 'difference ' + ('+' if diff > 0 else '') + _fmt(diff)}; the rules "
            f"agree only when CP = EP, here CP={p.cp} EP={p.ep}).",
        ]
    elif ldp != mp.dp:
        lines += [
            f"verl's example launchers write ngpu/PP = TP*EP*DP, which {launcher_rule_outcome(mp.ngpu, p)} here; "
            "the runtime",
            f"  uses DP = {mp.dp} (the rules agree only when CP = EP; here CP={p.cp}, EP={p.ep}).",
        ]
    else:
        lines.append(f"verl's launcher rule ngpu/PP = TP*EP*DP gives the same DP = {mp.dp} here (CP = EP).")
    return lines


def options_summary(o) -> list[str]:
    """The training options in Megatron / mlite names."""
    rec = o.recompute + (f" (+{','.join(o.recompute_modules)})" if o.recompute_modules else "")
    pao = "on" if o.use_precision_aware_optimizer else "off"
    dtypes = (
        f" main_grads={o.main_grads_dtype} exp_avg={o.exp_avg_dtype} exp_avg_sq={o.exp_avg_sq_dtype}"
        if o.use_precision_aware_optimizer
        else ""
    )
    onoff = lambda b: "on" if b else "off"
    return [
        f"Training options: optimizer={o.optimizer} use_precision_aware_optimizer={pao}{dtypes}",
        f"  offload_fraction={o.offload_fraction:g} param_offload={onoff(o.param_offload)} "
        f"optimizer_offload={onoff(o.optimizer_offload)} grad_offload={onoff(o.grad_offload)}",
        f"  recompute={rec} seq_len={o.seq_len} micro_batch_size={o.micro_batch_size} "
        f"num_microbatches={o.num_microbatches}",
    ]


def memory_line(spec, mp, options) -> list[str]:
    """``mlite memory``'s verdict for this plan (one line), or nothing when the estimate cannot be made."""
    try:
        from ..memory import GIB, estimate

        est = estimate(spec, mp, options)
        d = est.to_dict()
    except MliteError:  # the estimate is a courtesy in a comment; the export does not depend on it
        return []
    verdict = "fits" if est.fits else "does NOT fit"
    return [
        f"Memory estimate (mlite memory): {d['per_gpu']['total'] / GIB:.1f} GiB per GPU on the most loaded "
        f"pipeline rank, {verdict} in {d['gpu_mem'] / GIB:.0f} GiB; host {d['host']['per_node'] / GIB:.0f} GiB "
        "per node."
    ]


def time_line(plan, spec, mp, options) -> list[str]:
    """``mlite time``'s prediction for this plan and options on ``plan.hardware`` (one line with the command that
    shows its split and assumptions), or nothing when no prediction can be made."""
    from ..time import predict
    from ..time.hardware import DEFAULT_HARDWARE
    from ..time.view import summary, time_command

    hardware = plan.hardware or DEFAULT_HARDWARE
    try:
        t = predict(spec, mp, options, hardware)
    except MliteError:  # a courtesy in a comment, as the memory line (mlite export checks --hardware first)
        return []
    return [
        f"predicted step: {summary(t)} (mlite time; assumptions: {time_command(plan.model, mp, options, hardware)})"
    ]


def findings(mp, extra: list[str]) -> list[str]:
    """The planner's warnings and the exporter's own notes, one ``warning:`` line each."""
    return [f"warning: {m}" for m in [f.message for f in mp.warnings] + list(extra)]


def build(plan, spec, mp, title: str, notes: list[str], requires: list[str], options=None) -> list[str]:
    """The full comment header of a launcher (lines without ``# ``); ``options``: what the target really runs
    (default the plan's)."""
    options = options or plan.options
    lines = [
        title,
        f"Written by `mlite export` (mlite-lab) for {spec.name}; edit the knobs below, or override them",
        "from the environment (TP=2 bash <this file>), or append Hydra overrides as arguments.",
        "DRY_RUN=1 prints the resolved command on one line and exits.",
        "",
    ]
    lines += mesh_accounting(plan, mp) + [""] + options_summary(options)
    lines += memory_line(spec, mp, options) + time_line(plan, spec, mp, options)
    warn = findings(mp, notes)
    if warn:
        lines += [""] + warn
    if requires:
        lines += [""] + requires
    return lines
