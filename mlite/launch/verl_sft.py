"""The verl-sft trainer of ``mlite run --trainer verl-sft``: verl's own SFT trainer with the lite engine.

``python -m mlite.launch.verl_sft RUN_DIR`` is the launcher process :func:`mlite.launch.start` spawns; it writes an
HF-style model folder (``hf_model_from_tiny_config/``: the model's config.json and the kit's tokenizer files, no
weights: the lite engine initialises them from the seed) and runs ``torchrun ... -m mlite.verl_engine.launch
verl.trainer.sft_trainer`` with ``engine=lite`` and the overrides :func:`hydra_overrides` derives from the
RunConfig through :data:`mlite.options.table.RUN_VERL_KEYS`. verl's console output goes to ``console.log``, its
file logger's JSONL to ``metrics.jsonl`` (``VERL_FILE_LOGGER_PATH``); the supervisor finalises the run as for the
kit's own trainer. No verl import here (the checks run in the caller's process before anything starts).
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

from ..mesh.axes import RUN_AXES
from ..options.table import (
    LITE_ENGINE,
    LITE_SEARCHPATH,
    RUN_VERL_KEYS,
)
from .rundir import RunDir
from .supervisor import main_usage, supervise_subprocess, worker_env

MODEL_DIR = "hf_model_from_tiny_config"
"""Folder of the run directory holding the HF-style model (config.json + tokenizer, no weights)."""

DATA_WORKERS = {"cpu": 0, "cuda": 4}
"""``data.num_workers`` of verl's dataloader by device: on a GPU, 4 processes tokenize the next batches while the
step runs (with none, the whole batch is tokenized between two steps: about half of a 1 B model's H200 step at 500
conversations, bench/gpu_verl_sft.py --pairs; verl's own default is 8); on a CPU they would take the compute's
cores."""

ENTRY = ("-m", "mlite.verl_engine.launch", "verl.trainer.sft_trainer")
"""The torchrun entry: the plugin's launcher (shim + engine registration) running verl's SFT trainer."""


def _v(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def hydra_overrides(cfg, run_dir) -> list[str]:
    """The Hydra overrides of the run (fixed verl-sft keys, then the RunConfig's, then the user's)."""
    run_dir = Path(run_dir)
    dtype = {"auto": "auto", "fp32": "float32", "bf16": "bfloat16"}[cfg.param_dtype]
    decay, decay_steps = cfg.lr_decay()
    values = {
        **{a.name: getattr(cfg, a.name) for a in RUN_AXES},
        "optimizer": cfg.optimizer,
        "recompute": cfg.recompute,
        "pao": cfg.pao,
        "offload_fraction": cfg.offload_fraction,
        "moment_dtype": cfg.moment_dtype,
        "param_offload": cfg.param_offload,
        "optimizer_offload": cfg.optimizer_offload,
        "param_dtype": dtype,
        "seed": cfg.seed,
        "lr": cfg.lr,
        "lr_warmup_steps": cfg.lr_warmup_steps,
        "clip_grad": cfg.clip_grad,
        "steps": cfg.steps,
        "tokens_per_microbatch": cfg.tokens_per_microbatch,
        "train_batch_size": cfg.train_batch_size,
        "dataset": _train_file(cfg.dataset),
    }
    ovs = [
        f"hydra.searchpath=[{LITE_SEARCHPATH}]",
        f"engine={LITE_ENGINE}",
        "optim=megatron",
        f"model.path={run_dir / MODEL_DIR}",
        "data.val_files=null",
        "data.use_dynamic_bsz=true",
        "data.pad_mode=no_padding",
        "data.truncation=error",
        "data.messages_key=messages",
        f"data.max_length={cfg.tokens_per_microbatch}",
        f"data.num_workers={DATA_WORKERS.get(cfg.device, 0)}",
        f"optim.lr_decay_style={decay}",
        f"optim.min_lr={cfg.lr / 10!r}",
        f"optim.lr_decay_steps={'null' if decay_steps is None else decay_steps}",
        "optim.weight_decay=0.01",
        "trainer.logger=[console,file]",
        "trainer.project_name=mlite-run",
        f"trainer.experiment_name={run_dir.name}",
        "trainer.total_epochs=1000",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={run_dir / 'checkpoints'}",
        f"trainer.device={cfg.device}",
        f"trainer.n_gpus_per_node={cfg.nproc}",
        "trainer.nnodes=1",
        f"hydra.run.dir={run_dir / 'hydra'}",
    ]
    ovs += [f"{RUN_VERL_KEYS[k]}={_v(v)}" for k, v in values.items()]
    return ovs + list(cfg.verl_overrides)


def _train_file(dataset: str) -> str:
    from ..paths import dataset_file

    return str(dataset_file(dataset, "train"))


def _model_file(model: str) -> Path:
    from ..paths import models_dir

    p = Path(model)
    if p.is_dir():
        return p / "config.json"
    return p if p.is_file() else models_dir() / f"{model}.json"


def write_model_dir(cfg, run_dir) -> Path:
    """``RUN_DIR/hf_model_from_tiny_config``: the model config as config.json plus the kit's tokenizer files."""
    from ..runtime.data import tokenizer_path

    out = Path(run_dir) / MODEL_DIR
    out.mkdir(parents=True, exist_ok=True)
    src = _model_file(cfg.model)
    doc = json.loads(src.read_text())
    doc.setdefault("torch_dtype", "float32")
    (out / "config.json").write_text(json.dumps(doc, indent=2) + "\n")
    tok = Path(tokenizer_path())
    tok_dir = tok if tok.is_dir() else tok.parent
    for f in tok_dir.glob("*.json"):
        shutil.copyfile(f, out / f.name)
    return out


def torchrun_argv(cfg, run_dir) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(cfg.nproc),
        "--max-restarts",
        "0",
        "--monitor-interval",
        "0.5",
        *ENTRY,
        *hydra_overrides(cfg, run_dir),
    ]


def command(run_dir, cfg) -> str:
    """The command as a user would type it (``command.txt``)."""
    return shlex.join(
        [
            "torchrun",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(cfg.nproc),
            *ENTRY,
            *hydra_overrides(cfg, run_dir),
        ]
    )


def launcher_argv(run_dir) -> list[str]:
    return [sys.executable, "-m", "mlite.launch.verl_sft", str(run_dir)]


def verl_env(cfg, rd: RunDir) -> dict:
    env = worker_env(cfg.worker_threads())
    env["VERL_FILE_LOGGER_PATH"] = str(rd.metrics_jsonl)
    env["MLITE_VERL_RUN_DIR"] = str(rd.path)
    env["HYDRA_FULL_ERROR"] = "1"
    env.setdefault("VERL_LOGGING_LEVEL", "WARN")
    if cfg.device == "cpu":
        env["MLITE_VERL_CPU"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        return main_usage("verl_sft")
    rd = RunDir(Path(argv[0]).resolve())
    cfg = rd.read_config()
    write_model_dir(cfg, rd.path)
    return supervise_subprocess(rd, torchrun_argv(cfg, rd.path), verl_env(cfg, rd), launcher="torchrun")


if __name__ == "__main__":
    sys.exit(main())
