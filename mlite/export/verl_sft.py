"""Launcher 1: verl SFT on the mlite engine (``torchrun ... -m verl_mlite.launch verl.trainer.sft_trainer`` with
``hydra.searchpath=[pkg://verl_mlite.config] engine=mlite``), in the shape of verl 0.9's
``examples/sft/gsm8k/run_deepseek_v4_megatron_lite.sh``. One torchrun per node: NODE_RANK comes from Slurm
(``SLURM_NODEID``) or the environment, MASTER_ADDR from the job script."""

from __future__ import annotations

from . import engine_mlite
from . import mlite_keys as K
from .header import build
from .launcher import (
    COMMON_ENV,
    Knob,
    Launcher,
    launch_env,
    log_path_lines,
    mesh_check,
    mesh_knobs,
    mtp_overrides,
    path_knobs,
)
from .overrides import Override, var

FILENAME = "run_verl_mlite_sft.sh"
ENTRY_MODULE = "verl.trainer.sft_trainer"
REQUIRES = [
    "Requires verl >= 0.9 with verl_mlite importable (pip install -e mlite/experimental/lite/examples/verl)",
    "and Megatron Lite (megatron.lite) on every node. Data: parquet with a 'messages' column.",
]


def _knobs(plan, dp: int) -> list[Knob]:
    o = plan.options
    return [
        Knob(name="TRAIN_BATCH_SIZE", default=str(plan.batch_size(dp)), comment="sequences per step"),
        Knob(name="MICRO_BATCH_SIZE_PER_GPU", default=str(o.micro_batch_size)),
        Knob(name="MAX_LENGTH", default=str(o.seq_len), comment="tokens per sequence"),
        Knob(
            name="MAX_TOKEN_LEN_PER_GPU",
            default=str(o.seq_len * o.micro_batch_size),
            comment="dynamic batch: tokens per micro-batch",
        ),
        Knob(name="LR", default=f"{plan.learning_rate:g}"),
        Knob(name="TOTAL_EPOCHS", default=str(plan.total_epochs)),
        Knob(name="NODE_RANK", default="${SLURM_NODEID:-0}", comment="torchrun node rank", raw=True),
        Knob(name="MASTER_ADDR", default="127.0.0.1", comment="first node's address (the job script sets it)"),
        Knob(name="MASTER_PORT", default="29500"),
    ]


def build_launcher(plan, spec, mp) -> tuple[Launcher, list[str]]:
    knobs_o, engine_ovs, notes, view = engine_mlite.build(plan, mp, spec, engine="engine")
    data = [
        Override("data.train_files", var("TRAIN_FILES")),
        Override("data.val_files", var("VAL_FILES")),
        Override("data.train_batch_size", var("TRAIN_BATCH_SIZE")),
        Override("data.micro_batch_size_per_gpu", var("MICRO_BATCH_SIZE_PER_GPU")),
        Override.lit("data.use_dynamic_bsz", True),
        Override("data.max_token_len_per_gpu", var("MAX_TOKEN_LEN_PER_GPU")),
        Override("data.max_length", var("MAX_LENGTH")),
        Override.lit("data.pad_mode", "no_padding"),
        Override.lit("data.truncation", "error"),
        Override.lit("data.messages_key", "messages"),
    ]
    model = [
        Override("model.path", var("MODEL_PATH")),
        Override.lit("model.trust_remote_code", True),
        *mtp_overrides("model", spec, plan.train_mtp),
    ]
    optim = [
        Override.lit("optim", "megatron"),
        Override("optim.lr", var("LR")),
        Override.lit("optim.lr_decay_style", "constant"),
    ]
    optim += [o for o in engine_ovs if o.key.startswith("optim.")]
    engine = [Override("hydra.searchpath", f"[{K.SEARCHPATH}]"), Override("engine", K.ENGINE_GROUP_OPTION)]
    engine += [o for o in engine_ovs if not o.key.startswith("optim.")]
    trainer = [
        Override.lit("trainer.logger", ["console", "file"]),
        Override("trainer.project_name", var("PROJECT_NAME")),
        Override("trainer.experiment_name", var("EXPERIMENT_NAME")),
        Override("trainer.total_epochs", var("TOTAL_EPOCHS")),
        Override("trainer.nnodes", var("NNODES")),
        Override("trainer.n_gpus_per_node", var("NDEVICES_PER_NODE")),
    ]
    knobs = _knobs(plan, mp.dp)
    lc = Launcher(
        filename=FILENAME,
        header=build(
            plan,
            spec,
            mp,
            f"verl SFT | mlite engine (Megatron Lite) | {spec.name} | {plan.nodes}x{plan.gpus_per_node} GPUs",
            notes,
            REQUIRES,
            options=view,
        ),
        knob_groups=[
            ("mesh (mlite engine)", mesh_knobs(plan, mp) + knobs_o),
            ("paths and names", path_knobs(plan)),
            ("training", knobs),
        ],
        derived=mesh_check() + log_path_lines(),
        env=launch_env(plan.options.optimizer, list(COMMON_ENV)),
        sections=[("DATA", data), ("MODEL", model), ("OPTIM", optim), ("ENGINE", engine), ("TRAINER", trainer)],
        command=[
            "torchrun",
            '--nnodes="${NNODES}"',
            '--nproc_per_node="${NDEVICES_PER_NODE}"',
            '--node_rank="${NODE_RANK}"',
            '--master_addr="${MASTER_ADDR}"',
            '--master_port="${MASTER_PORT}"',
            "-m",
            "verl_mlite.launch",
            ENTRY_MODULE,
        ],
    )
    return lc, notes
