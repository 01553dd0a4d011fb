"""Launcher 3: verl GRPO on verl's built-in Megatron backend (``python3 -m verl.trainer.main_ppo
--config-name=ppo_megatron_trainer`` with ``actor_rollout_ref.actor.megatron.*_parallel_size``).

Mapping of the plan's options onto verl 0.9.1's Megatron keys (the options are the ``megatron`` column of
:data:`mlite.options.table.TRAINING`; the mesh keys are written here):

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

from ..mesh.axes import AXES
from ..options.table import MEGATRON_RECOMPUTE_MODULES
from . import grpo
from .header import build
from .launcher import Knob, Launcher, log_path_lines, mesh_check, mesh_knobs, path_knobs
from .mapping import PARALLEL_KEYS, option_overrides
from .overrides import Override, var

FILENAME = "run_verl_megatron_grpo.sh"
CONFIG_NAME = "ppo_megatron_trainer"
MEGATRON = f"{grpo.ACTOR}.megatron"
OPTIM = f"{grpo.ACTOR}.optim"
REQUIRES = ["Requires verl >= 0.9 with Megatron-Core (and Megatron-Bridge for use_mbridge) on every node."]
LAYOUT_KEY = f"{MEGATRON}.override_transformer_config.pipeline_model_parallel_layout"
__all__ = ["CONFIG_NAME", "FILENAME", "LAYOUT_KEY", "MEGATRON_RECOMPUTE_MODULES", "PARALLEL_KEYS", "build_launcher"]


def build_launcher(plan, spec, mp) -> tuple[Launcher, list[str]]:
    p = mp.parallel
    opt_knobs, opt_ovs, notes, view = option_overrides(plan, mp, spec)
    knobs = mesh_knobs(plan, mp, megatron_nulls=True) + opt_knobs
    layout = mp.layout if (p.pp_layout or mp.layout_source == "auto") else ""
    if layout:
        knobs.append(
            Knob(
                name="PP_LAYOUT",
                default=layout,
                comment="Megatron-Core pipeline_model_parallel_layout; change it with PP",
            )
        )
    actor = grpo.actor_common()
    actor += [Override(f"{MEGATRON}.{a.megatron}", var(a.label)) for a in AXES]
    if layout:
        actor.append(Override(LAYOUT_KEY, "'" + var("PP_LAYOUT") + "'", add=True))
    actor += opt_ovs
    lc = Launcher(
        filename=FILENAME,
        header=build(
            plan,
            spec,
            mp,
            f"verl GRPO | Megatron backend (Megatron-Core) | vLLM rollout | {spec.name} | "
            f"{plan.nodes}x{plan.gpus_per_node} GPUs",
            notes,
            REQUIRES,
            options=view,
        ),
        knob_groups=[
            ("mesh (verl Megatron backend)", knobs),
            ("paths and names", path_knobs(plan)),
            ("training", grpo.knobs(plan, mp.dp)),
        ],
        derived=mesh_check() + log_path_lines(),
        env=grpo.env(spec),
        sections=[
            ("ALGORITHM", grpo.algorithm(plan)),
            ("DATA", grpo.data()),
            ("MODEL", grpo.model(spec, plan.train_mtp)),
            ("ACTOR", actor),
            ("ROLLOUT", grpo.rollout(plan) + grpo.log_prob(plan)),
            *([("CRITIC", grpo.critic(plan))] if grpo.critic(plan) else []),
            ("TRAINER", grpo.trainer()),
        ],
        command=grpo.ENTRY + [f"--config-name={CONFIG_NAME}"],
    )
    return lc, notes
