"""Launcher 3: verl GRPO on verl's built-in Megatron backend (``python3 -m verl.trainer.main_ppo
--config-name=ppo_megatron_trainer`` with ``actor_rollout_ref.actor.megatron.*_parallel_size``).

Mapping of the plan's options onto verl 0.9.1's Megatron keys:

* mesh: ``tensor/pipeline/virtual_pipeline/context/expert/expert_tensor_model_parallel_size`` (ETP written
  explicitly: verl's ``null`` would mean ETP = TP); an uneven layout goes to Megatron-Core's
  ``override_transformer_config.pipeline_model_parallel_layout`` (same language as mlite's ``pp_layout``).
* PAO: verl's own ``optim.use_precision_aware_optimizer`` (+ ``main_grads_dtype`` / ``exp_avg(_sq)_dtype``), which
  verl also uses for the DDP grad-bucket dtype; ``override_optimizer_config`` carries what verl has no key for:
  ``store_param_remainders`` and the CPU optimizer offload (``optimizer_cpu_offload``,
  ``optimizer_offload_fraction``, ``overlap_cpu_optimizer_d2h_h2d``).
* offload: ``megatron.param_offload`` / ``optimizer_offload``; verl 0.9.1 has no ``grad_offload`` for Megatron
  (``param_offload`` also releases the gradient buffers), so grad offload turns ``param_offload`` on.
* ``fsdp2`` has no counterpart here (Megatron's own FSDP is a different code path): dist_opt is written.
"""

from __future__ import annotations

from dataclasses import replace

from . import grpo
from .header import build
from .launcher import Knob, Launcher, log_path_lines, mesh_check, mesh_knobs, path_knobs
from .overrides import Override, var

FILENAME = "run_verl_megatron_grpo.sh"
CONFIG_NAME = "ppo_megatron_trainer"
MEGATRON = f"{grpo.ACTOR}.megatron"
OPTIM = f"{grpo.ACTOR}.optim"
MEGATRON_RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe")
"""Megatron-Core ``recompute_modules`` choices (verl's engine/megatron.yaml)."""
REQUIRES = ["Requires verl >= 0.9 with Megatron-Core (and Megatron-Bridge for use_mbridge) on every node."]

PARALLEL_KEYS = {
    "tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
    "vpp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
    "ep": "expert_model_parallel_size", "etp": "expert_tensor_parallel_size",
}
"""mlite mesh name -> verl ``actor_rollout_ref.actor.megatron.*`` key."""
LAYOUT_KEY = f"{MEGATRON}.override_transformer_config.pipeline_model_parallel_layout"


def _flag(b: bool) -> str:
    return "True" if b else "False"


def build_launcher(plan, spec, mp) -> tuple[Launcher, list[str]]:
    o, p, notes = plan.options, mp.parallel, []
    param_offload = o.param_offload or o.grad_offload
    if o.grad_offload and not o.param_offload:
        notes.append("grad_offload: verl's Megatron backend has no grad_offload key; param_offload=True (which "
                     "also releases the gradient buffers) is written instead")
    if o.optimizer == "fsdp2":
        notes.append("optimizer fsdp2 has no counterpart in verl's Megatron backend: Megatron-Core's distributed "
                     "optimizer (dist_opt) is written")
    knobs = mesh_knobs(plan, mp, vpp_null=True)
    knobs += [Knob(name="PARAM_OFFLOAD", default=_flag(param_offload), comment="megatron.param_offload"),
              Knob(name="OPTIMIZER_OFFLOAD", default=_flag(o.optimizer_offload), comment="megatron.optimizer_offload")]
    if o.offload_fraction > 0:
        knobs.append(Knob(name="OFFLOAD_FRACTION", default=f"{o.offload_fraction:g}",
                          comment="Megatron-Core optimizer_offload_fraction"))
    layout = mp.layout if (p.pp_layout or mp.layout_source == "auto") else ""
    if layout:
        knobs.append(Knob(name="PP_LAYOUT", default=layout,
                          comment="Megatron-Core pipeline_model_parallel_layout; change it with PP"))
    actor = grpo.actor_common()
    actor += [Override(f"{MEGATRON}.{PARALLEL_KEYS[k]}", var(k.upper())) for k in PARALLEL_KEYS]
    if layout:
        actor.append(Override(LAYOUT_KEY, "'" + var("PP_LAYOUT") + "'", add=True))
    actor += [Override(f"{MEGATRON}.param_offload", var("PARAM_OFFLOAD")),
              Override(f"{MEGATRON}.optimizer_offload", var("OPTIMIZER_OFFLOAD"))]
    if not o.use_distributed_optimizer:
        actor.append(Override.lit(f"{MEGATRON}.use_distributed_optimizer", False))
    if p.tp > 1 and not o.sequence_parallel and not spec.num_experts:
        actor.append(Override.lit(f"{MEGATRON}.sequence_parallel", False))
    actor += _recompute(o, notes)
    if o.use_precision_aware_optimizer:
        actor.append(Override.lit(f"{OPTIM}.use_precision_aware_optimizer", True))
        for n in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            if getattr(o, n) != "fp32":
                actor.append(Override.lit(f"{OPTIM}.{n}", getattr(o, n)))
        if not o.store_param_remainders:
            actor.append(Override.lit(f"{OPTIM}.override_optimizer_config.store_param_remainders", False, add=True))
    if o.offload_fraction > 0:
        oc = f"{OPTIM}.override_optimizer_config"
        actor += [Override.lit(f"{oc}.optimizer_cpu_offload", True, add=True),
                  Override(f"{oc}.optimizer_offload_fraction", var("OFFLOAD_FRACTION"), add=True),
                  Override.lit(f"{oc}.overlap_cpu_optimizer_d2h_h2d", True, add=True)]
    lc = Launcher(
        filename=FILENAME,
        header=build(plan, spec, mp, f"verl GRPO | Megatron backend (Megatron-Core) | vLLM rollout | {spec.name} | "
                     f"{plan.nodes}x{plan.gpus_per_node} GPUs", notes, REQUIRES,
                     options=replace(o, optimizer="dist_opt", param_offload=param_offload)),
        knob_groups=[("mesh (verl Megatron backend)", knobs), ("paths and names", path_knobs(plan)),
                     ("training", grpo.knobs(plan, mp.dp))],
        derived=mesh_check() + log_path_lines(),
        env=grpo.env(spec),
        sections=[("ALGORITHM", grpo.algorithm()), ("DATA", grpo.data()), ("MODEL", grpo.model()),
                  ("ACTOR", actor), ("ROLLOUT", grpo.rollout()), ("TRAINER", grpo.trainer())],
        command=grpo.ENTRY + [f"--config-name={CONFIG_NAME}"],
    )
    return lc, notes


def _recompute(o, notes: list[str]) -> list[Override]:
    tc = f"{MEGATRON}.override_transformer_config"
    if o.recompute == "full":
        return [Override.lit(f"{tc}.recompute_granularity", "full"),
                Override.lit(f"{tc}.recompute_method", "uniform"),
                Override.lit(f"{tc}.recompute_num_layers", 1)]
    mods = [m for m in o.recompute_modules if m in MEGATRON_RECOMPUTE_MODULES]
    for m in o.recompute_modules:
        if m not in MEGATRON_RECOMPUTE_MODULES:
            notes.append(f"recompute module '{m}' has no Megatron-Core counterpart "
                         f"({', '.join(MEGATRON_RECOMPUTE_MODULES)}); dropped")
    if o.recompute == "selective" and "core_attn" not in mods:
        mods.insert(0, "core_attn")
    if not mods:
        return []
    return [Override.lit(f"{tc}.recompute_granularity", "selective"), Override.lit(f"{tc}.recompute_modules", mods)]
