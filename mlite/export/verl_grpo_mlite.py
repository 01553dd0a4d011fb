"""Launcher 2: verl GRPO with the mlite actor (``python3 -m verl.trainer.main_ppo`` with
``actor@actor_rollout_ref.actor=mlite_actor`` and ``actor_rollout_ref.actor.engine.*``), in the shape of verl 0.9's
``examples/grpo_trainer/run_qwen3_5_35b_megatron_lite.sh``."""

from __future__ import annotations

from . import engine_mlite, grpo
from . import mlite_keys as K
from .header import build
from .launcher import Launcher, launch_env, log_path_lines, mesh_check, mesh_knobs, path_knobs
from .overrides import Override

FILENAME = "run_verl_mlite_grpo.sh"
ENGINE = f"{grpo.ACTOR}.engine"
OPTIM = f"{grpo.ACTOR}.optim"
REQUIRES = [
    "Requires verl >= 0.9 with verl_mlite importable (pip install -e mlite/experimental/lite/examples/verl)",
    "and Megatron Lite (megatron.lite) on every node.",
]


def build_launcher(plan, spec, mp) -> tuple[Launcher, list[str]]:
    """The launcher and the exporter's notes."""
    knobs, engine_ovs, notes, view = engine_mlite.build(plan, mp, spec, engine=ENGINE)
    actor = [Override(f"actor@{grpo.ACTOR}", K.ACTOR_GROUP_OPTION)] + grpo.actor_common() + engine_ovs
    lc = Launcher(
        filename=FILENAME,
        header=build(
            plan,
            spec,
            mp,
            f"verl GRPO | mlite actor (Megatron Lite) | vLLM rollout | {spec.name} | "
            f"{plan.nodes}x{plan.gpus_per_node} GPUs",
            notes,
            REQUIRES,
            options=view,
        ),
        knob_groups=[
            ("mesh (mlite engine)", mesh_knobs(plan, mp) + knobs),
            ("paths and names", path_knobs(plan)),
            ("training", grpo.knobs(plan, mp.dp)),
        ],
        derived=mesh_check() + log_path_lines(),
        env=launch_env(plan.options.optimizer, grpo.env(spec)),
        sections=[
            ("EXTRA", [Override("hydra.searchpath", f"[{K.SEARCHPATH}]")]),
            ("ALGORITHM", grpo.algorithm(plan)),
            ("DATA", grpo.data()),
            ("MODEL", grpo.model(spec, plan.train_mtp)),
            ("ACTOR", actor),
            ("ROLLOUT", grpo.rollout(plan) + grpo.log_prob(plan)),
            ("TRAINER", grpo.trainer()),
        ],
        command=list(grpo.ENTRY),
    )
    return lc, notes
