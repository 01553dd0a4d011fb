"""``RunConfig``: one single-node debug run of the lite runtime (model, steps, processes, optimizer, offload).

A RunConfig is what ``mlite run`` flags, the run view's form and ``config.json`` in a run directory hold. It maps
onto the runtime's Megatron-Lite config (:meth:`RunConfig.runtime_config`) and onto the memory estimator's
options for the same run (:meth:`RunConfig.training_options`), so the measured and estimated memory describe one
configuration. Validation happens here, in the caller's process, so bad input fails before any process starts
(one line, :class:`~mlite.errors.MliteError`).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MliteError
from ..options.table import RUN_DEBUG_MODELS as DEBUG_MODELS
from ..options.table import RUN_DEVICES as DEVICES
from ..options.table import RUN_GRAD_DTYPES as GRAD_DTYPES
from ..options.table import RUN_LAUNCHERS as LAUNCHERS
from ..options.table import RUN_MOMENT_DTYPES as MOMENT_DTYPES
from ..options.table import RUN_OPTIMIZERS as OPTIMIZERS
from ..options.table import RUN_PARAM_DTYPES as PARAM_DTYPES
from ..options.table import RUN_RECOMPUTE as RECOMPUTE
from ..paths import REPO_ROOT

if TYPE_CHECKING:
    from ..runtime.config import RuntimeConfig

__all__ = [
    "DEBUG_MODELS",
    "DEVICES",
    "LAUNCHERS",
    "MOMENT_DTYPES",
    "OPTIMIZERS",
    "PARAM_DTYPES",
    "RECOMPUTE",
    "RunConfig",
    "runs_root",
]


def runs_root() -> Path:
    """Where runs go by default: ``$MLITE_RUNS``, else ``runs/`` at the repository root of a source checkout
    (git-ignored), else ``runs/`` in the current directory (an installed package has no repository)."""
    from ..paths import is_source_checkout

    env = os.environ.get("MLITE_RUNS")
    if env:
        return Path(env).expanduser().resolve()
    return REPO_ROOT / "runs" if is_source_checkout() else Path.cwd() / "runs"


@dataclass(kw_only=True, slots=True)
class RunConfig:
    """A debug run: what to train, on how many local processes, with which optimizer and offload settings."""

    model: str = "tiny-moe"
    """A ``data/models`` name (``tiny-dense``, ``tiny-moe``, ``tiny-hybrid``), a config.json path or folder."""
    layers: int | None = None
    """Cut the model to this many decoder layers, one of each layer kind first (None: all of them)."""
    experts: int | None = None
    """Cut every MoE layer to its first E routed experts (None: all of them)."""
    vocab: int | None = None
    """Cut the vocabulary to V tokens, randomly initialised runs only (None: the model's)."""
    hf_checkpoint: str | None = None
    """Local Hugging Face safetensors directory whose weights (of the kept layers and experts) the run starts from."""
    steps: int = 30
    """Optimizer steps to run."""
    nproc: int = 2
    """Worker processes on this machine: TP x CP x DP (dense) = EP x EDP (experts, ETP = 1)."""
    tp: int = 1
    """Tensor parallel size (Megatron ``tp``; with sequence parallelism)."""
    cp: int = 1
    """Context parallel size (Megatron ``cp``; each sequence split in 2*CP load-balanced chunks)."""
    ep: int = 1
    """Expert parallel size (Megatron ``ep``; routed experts split, tokens exchanged by all-to-all)."""
    etp: int = 1
    """Expert tensor parallel size; the lite runtime runs 1 only."""
    device: str = "cpu"
    """``cpu`` (gloo) or ``cuda`` (nccl, one GPU per process)."""
    optimizer: str = "fsdp2"
    """mlite optimizer backend: ``fsdp2`` (PyTorch fully_shard) or ``dist_opt`` (Megatron-Core DDP + distributed
    optimizer); see :data:`mlite.options.optimizers.BACKENDS`."""
    optimizer_algorithm: str = "adam"
    """Optimizer algorithm (``adam``; see :data:`mlite.options.optimizers.ALGORITHMS`)."""
    use_distributed_optimizer: bool = True
    """dist_opt: shard the optimizer state over DP x CP / EDP; False (``--no-distributed-optimizer``): plain DDP."""
    grad_dtype: str = "fp32"
    """dist_opt: gradient buffer dtype (Megatron-Core's ``main_grads_dtype``); fsdp2 keeps the parameter dtype."""
    pao: bool = False
    """``use_precision_aware_optimizer``: bf16 params + int16 remainders instead of an fp32 master."""
    moment_dtype: str = "fp32"
    """Storage dtype of both Adam moments (``exp_avg_dtype`` / ``exp_avg_sq_dtype``); ``bf16`` needs ``pao``."""
    offload_fraction: float = 0.0
    """Share of the optimizer state (master + moments) kept and updated on the CPU (mlite's fsdp2 uses 1.0)."""
    param_offload: bool = False
    """Runtime context offload: parameters go to the CPU between steps and come back for the next one."""
    optimizer_offload: bool = False
    """Runtime context offload: optimizer state goes to the CPU between steps and comes back for the update."""
    launcher: str = "torchrun"
    """``torchrun`` (default) or ``ray`` (one Ray actor per worker on a local Ray instance)."""
    seed: int = 0
    """Seed of the weight init and of the data order."""
    lr: float = 3e-3
    """Peak learning rate (after warmup); cosine decay to ``lr / 10`` at the last step."""
    lr_warmup_steps: int = 2
    """Linear warmup steps (from 0)."""
    clip_grad: float = 1.0
    """Clip gradients to this global L2 norm (0 disables clipping)."""
    tokens_per_microbatch: int = 512
    """Token budget of one packed micro-batch per process (sequences packed back to back)."""
    num_microbatches: int = 1
    """Micro-batches per optimizer step (gradient accumulation)."""
    recompute: str = "none"
    """Activation recompute: ``none``, ``selective`` or ``full``."""
    param_dtype: str = "auto"
    """Parameter storage dtype: ``fp32``, ``bf16`` or ``auto`` (bf16 on CUDA or with PAO, else fp32). A bf16 run
    without PAO keeps an fp32 master: the reference a PAO run matches bit for bit."""
    dataset: str = "tiny_sft"
    """SFT dataset: a ``data/datasets`` name or a verl-format parquet path."""
    threads: int | None = None
    """Intra-op CPU threads per worker; None: ``max(1, cores // nproc)``."""
    out: str | None = None
    """Run directory; None: a new folder under :func:`runs_root`, named after the model, optimizer and time."""
    crash_at_step: int | None = None
    """Testing: the last worker raises at the start of this step (the run must end ``failed``)."""
    compile: bool = False
    """``torch.compile`` each decoder block (the runtime's ``compile`` option)."""
    trainer: str = "lite"
    """``lite`` (the kit's loop) or ``verl-sft`` (verl's SFT trainer with ``engine=lite``)."""
    train_batch_size: int = 8
    """verl-sft: ``data.train_batch_size``, sequences per step over all data-parallel ranks."""
    verl_overrides: tuple = ()
    """verl-sft: extra Hydra overrides (``engine.*`` keys checked against the lite engine's key table)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`MliteError` naming the first bad field."""
        if not isinstance(self.model, str) or not self.model.strip():
            raise MliteError("model: give a data/models name (tiny-dense, tiny-moe, tiny-hybrid) or a config path")
        for name in ("layers", "experts", "vocab"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise MliteError(f"{name}: {v!r} must be a positive integer (or None to keep the model's)")
        if self.hf_checkpoint is not None:
            self.hf_checkpoint = str(self.hf_checkpoint)
        for name, lo in (
            ("steps", 1),
            ("nproc", 1),
            ("tokens_per_microbatch", 16),
            ("num_microbatches", 1),
            ("lr_warmup_steps", 0),
            ("seed", 0),
            ("tp", 1),
            ("cp", 1),
            ("ep", 1),
            ("etp", 1),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise MliteError(f"{name}: {v!r} must be an integer >= {lo}")
        for name, allowed in (
            ("device", DEVICES),
            ("optimizer", OPTIMIZERS),
            ("launcher", LAUNCHERS),
            ("moment_dtype", MOMENT_DTYPES),
            ("grad_dtype", GRAD_DTYPES),
            ("recompute", RECOMPUTE),
            ("param_dtype", PARAM_DTYPES),
        ):
            v = getattr(self, name)
            if v not in allowed:
                raise MliteError(f"{name}: {v!r} is not one of {', '.join(allowed)}")
        for name in ("lr", "clip_grad"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise MliteError(f"{name}: {v!r} must be a finite number >= 0")
        if self.lr == 0:
            raise MliteError("lr: 0 would not train; give a positive learning rate such as 3e-3")
        if not isinstance(self.use_distributed_optimizer, bool):
            raise MliteError(f"use_distributed_optimizer: {self.use_distributed_optimizer!r} must be True or False")
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise MliteError(f"threads: {self.threads!r} must be a positive integer (or None for cores // nproc)")
        if self.crash_at_step is not None and (
            isinstance(self.crash_at_step, bool) or not isinstance(self.crash_at_step, int) or self.crash_at_step < 1
        ):
            raise MliteError(f"crash_at_step: {self.crash_at_step!r} must be a step number >= 1 (or None)")
        if self.lr_warmup_steps >= self.steps and self.steps > 2:  # 1- and 2-step smoke runs stay in warmup
            raise MliteError(f"lr_warmup_steps: {self.lr_warmup_steps} must be smaller than steps={self.steps}")
        if not isinstance(self.compile, bool):
            raise MliteError(f"compile: {self.compile!r} must be True or False")
        if isinstance(self.etp, bool) or not isinstance(self.etp, int) or self.etp < 1:
            raise MliteError(f"etp: {self.etp!r} must be a positive integer")
        self.training_options()  # the training rules, written once (mlite.options.rules via TrainingOptions)
        from .verl_checks import check_trainer  # the verl-sft fields (no verl import)

        self.verl_overrides = check_trainer(self)
        if self.out is not None:
            self.out = str(self.out)

    # ------------------------------------------------------------------ derived
    def parallel_config(self):
        """The run's mesh as :class:`mlite.mesh.ParallelConfig`."""
        from ..mesh import ParallelConfig

        return ParallelConfig(tp=self.tp, cp=self.cp, ep=self.ep, etp=self.etp)

    def check_mesh(self, spec=None) -> None:
        """Refuse a mesh the planner (:func:`mlite.mesh.resolve`) rejects for this model and ``nproc``, with its
        reasons. The sequence-length rule does not apply: the runtime pads every sequence to a multiple of 2*CP."""
        from ..mesh import resolve
        from ..runtime.parallel.state import check_mesh

        if self.etp != 1:  # a valid config (it round-trips), refused before a run starts
            raise MliteError(
                f"etp: {self.etp} is not run by the lite runtime (experts stay whole on each EP rank); use --etp 1"
            )
        spec = spec or self.model_spec()
        p = self.parallel_config()
        check_mesh(p)
        plan = resolve(spec, self.nproc, p, seq_len=2 * p.cp, gpus_per_node=self.nproc)
        if not plan.valid:
            reasons = "; ".join(f.message for f in plan.errors)
            raise MliteError(
                f"mesh: --nproc {self.nproc} --tp {self.tp} --cp {self.cp} --ep {self.ep} --etp "
                f"{self.etp} is not a valid mesh for {spec.name}: {reasons}"
            )

    def model_spec(self):
        """The ModelSpec the run trains: ``model`` cut to ``layers`` / ``experts`` / ``vocab`` when given."""
        from .cut import model_spec

        return model_spec(self)

    def model_dict(self) -> dict:
        """The Hugging Face config dict the workers build (cut to size when asked)."""
        from .cut import model_config

        return model_config(self)[2]

    def cut_changes(self) -> list[str]:
        """What cutting the model changed, one sentence each (empty when nothing is cut)."""
        from .cut import model_config

        cut = model_config(self)[3]
        return list(cut.changes) if cut is not None else []

    def resolved_param_dtype(self) -> str:
        """Parameter storage dtype of the run: ``param_dtype``, with auto = bf16 on CUDA or with PAO, else fp32."""
        if self.param_dtype != "auto":
            return self.param_dtype
        return "bf16" if self.device == "cuda" or self.pao else "fp32"

    def worker_threads(self) -> int:
        """Intra-op threads per worker process."""
        return self.threads or max(1, (os.cpu_count() or 1) // self.nproc)

    def default_name(self) -> str:
        """``<model>-<optimizer>[-pao][-offload]-<YYYYmmdd-HHMMSS>-<hex>`` (unique enough for one user)."""
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(self.model).stem if os.sep in self.model else self.model)
        tags = (
            [base, self.optimizer]
            + (["pao"] if self.pao else [])
            + (["offload"] if self.offload_fraction or self.param_offload or self.optimizer_offload else [])
        )
        return "-".join(tags + [time.strftime("%Y%m%d-%H%M%S"), secrets.token_hex(2)])

    def resolved_out(self) -> Path:
        """The run directory (absolute)."""
        return Path(self.out).expanduser().resolve() if self.out else (runs_root() / self.default_name()).resolve()

    def lr_decay(self) -> tuple[str, int | None]:
        """``(lr_decay_style, lr_decay_steps)``: cosine to ``lr / 10`` over the run, constant when the run is no
        longer than its warmup plus one step (1- and 2-step smoke runs); both trainers take it from here."""
        if self.steps > self.lr_warmup_steps + 1:
            return "cosine", self.steps
        return "constant", None

    def runtime_config(self) -> RuntimeConfig:
        """The runtime's ``RuntimeConfig`` (Megatron Lite names) for this run."""
        from ..runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig

        decay, decay_steps = self.lr_decay()
        opt = OptimizerConfig(
            optimizer=self.optimizer,
            optimizer_algorithm=self.optimizer_algorithm,
            lr=float(self.lr),
            min_lr=float(self.lr) / 10,
            clip_grad=float(self.clip_grad),
            lr_warmup_steps=self.lr_warmup_steps,
            lr_decay_style=decay,
            lr_decay_steps=decay_steps,
            use_precision_aware_optimizer=self.pao or None,
            exp_avg_dtype=self.moment_dtype,
            exp_avg_sq_dtype=self.moment_dtype,
            offload_fraction=float(self.offload_fraction) or None,
            use_distributed_optimizer=self.use_distributed_optimizer,
            main_grads_dtype=self.grad_dtype,
        )
        extra: dict[str, Any] = {}
        if self.compile:
            if "compile" not in {f.name for f in fields(RuntimeConfig)}:
                raise MliteError("compile: this runtime has no torch.compile option yet; drop --compile")
            extra["compile"] = True
        from .cut import checkpoint_factory, is_cut

        if self.hf_checkpoint is not None:
            extra["model_factory"] = checkpoint_factory(self, self.recompute)
        model = self.model_dict() if is_cut(self) else self.model
        return RuntimeConfig(
            hf_path=model,
            device=self.device,
            seed=self.seed,
            param_dtype=self.param_dtype,
            backend_cfg=MegatronLiteConfig(
                optimizer=opt, impl_cfg={"recompute": self.recompute}, parallel=self.parallel_config()
            ),
            **extra,
        )

    def training_options(self):
        """The memory estimator's ``TrainingOptions`` for the same run (its optimizer, dtypes and offload)."""
        from ..memory import TrainingOptions

        return TrainingOptions(
            optimizer=self.optimizer,
            optimizer_algorithm=self.optimizer_algorithm,
            use_distributed_optimizer=self.use_distributed_optimizer,
            main_grads_dtype=self.grad_dtype,
            use_precision_aware_optimizer=self.pao,
            exp_avg_dtype=self.moment_dtype,
            exp_avg_sq_dtype=self.moment_dtype,
            offload_fraction=self.offload_fraction,
            param_offload=self.param_offload,
            optimizer_offload=self.optimizer_offload,
            param_dtype=self.resolved_param_dtype(),
            seq_len=self.tokens_per_microbatch,
            micro_batch_size=1,
            num_microbatches=self.num_microbatches,
            recompute=self.recompute,
            fused_cross_entropy=True,
            # the lite activation model describes tp = cp = ep = 1; a mesh run is estimated the Megatron way
            activation_model="lite" if self.tp * self.cp * self.ep == 1 else "megatron",
            lite_device="cpu" if self.device == "cpu" else "cuda",
            framework_overhead_gib=0.0 if self.device == "cpu" else 2.0,
            gpus_per_node=self.nproc,
        )

    def check_environment(self) -> None:
        """What can be checked before starting anything: the model config reads, the runtime accepts the
        optimizer settings, CUDA / GPUs / megatron-core / Ray are there when asked for."""
        from .cut import check_cut

        check_cut(self)
        self.check_mesh(self.model_spec())
        self.runtime_config()
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise MliteError("device: cuda asked for but CUDA is not available here; use --device cpu")
            if self.nproc > torch.cuda.device_count():
                raise MliteError(
                    f"nproc: {self.nproc} processes but {torch.cuda.device_count()} GPU(s) visible; "
                    f"use --nproc {torch.cuda.device_count()} or fewer"
                )
        if self.launcher == "ray":
            import importlib.util

            if importlib.util.find_spec("ray") is None:
                raise MliteError(
                    "launcher: ray is not installed (pip install 'mlite-lab[verl]'); use --launcher torchrun"
                )

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise MliteError(f"config.json: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**d)

    def cli_args(self) -> list[str]:
        """The ``mlite run`` arguments that reproduce this config (``--out`` is the caller's)."""
        from ..options import RUN, command_args

        return command_args(self, RUN, exclude=("out",))
