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
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MliteError
from ..mesh.axes import RUN_AXES
from ..mesh.config import ParallelConfig
from ..options.optimizers import check_env
from ..options.rules import MUON_FIELDS, mfsdp_lite_mesh
from ..options.table import RUN, rows_by_field
from ..options.table import RUN_DEBUG_MODELS as DEBUG_MODELS
from ..options.table import RUN_DEVICES as DEVICES
from ..options.table import RUN_LAUNCHERS as LAUNCHERS
from ..options.table import RUN_MOMENT_DTYPES as MOMENT_DTYPES
from ..options.table import RUN_OPTIMIZERS as OPTIMIZERS
from ..options.table import RUN_PARAM_DTYPES as PARAM_DTYPES
from ..options.table import RUN_RECOMPUTE as RECOMPUTE
from ..options.training import TrainingOptions

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
    "export_root",
    "runs_root",
]


def runs_root() -> Path:
    """Where runs go by default: ``$MLITE_RUNS``, else ``runs/`` in the current directory -- beside the notebook
    for the views (a kernel runs in its notebook's folder), where the command runs for ``mlite run``. Every
    ``runs/`` folder is git-ignored (``.gitignore``); exports go to :func:`export_root` inside it."""
    env = os.environ.get("MLITE_RUNS")
    return Path(env).expanduser().resolve() if env else (Path.cwd() / "runs").resolve()


def export_root() -> Path:
    """Where the export view writes a plan's files by default (``<runs_root>/export/<experiment name>/``) and where
    notebook 02 looks for the newest one (:func:`mlite.launch.from_plan.newest_plan`)."""
    return runs_root() / "export"


def _rows() -> dict:
    """``field -> row`` of the RUN table (the flat spelling of a RunConfig: flags, ``config.json``)."""
    return rows_by_field(RUN)


def _default(f):
    return f.default_factory() if f.default is MISSING else f.default


_NESTED = ("parallel", "training")
"""The composed fields of a RunConfig."""


def _part(row) -> str:
    """``parallel`` or ``training``: the nested config a RUN row's path points into."""
    return row.path[0].split(".", 1)[0]


def _get_name(path: str) -> str:
    """``training.use_precision_aware_optimizer`` -> ``use_precision_aware_optimizer``."""
    return path.split(".", 1)[1]


def _get(obj, path: str):
    return getattr(obj, _get_name(path))


@dataclass(kw_only=True, init=False)
class RunConfig:
    """A debug run: what to train, on how many local processes (:attr:`parallel`, the mesh), with which training
    options (:attr:`training`, the estimator's vocabulary), plus what only a run has (steps, data, launcher, output).

    Built from the flat names of the ``mlite run`` flags and ``config.json`` (``RunConfig(pao=True, tp=2)``): a RUN
    row with a ``path`` (:attr:`mlite.options.schema.Option.path`) sets that nested field, and reading the flat name
    (``cfg.pao``) reads it back. ``parallel=`` / ``training=`` may be given too (flat names win). The run-only
    defaults live on the rows (optimizer fsdp2, one micro-batch); the training options a run decides itself follow
    its fields: ``param_dtype`` resolved, ``seq_len`` = tokens per micro-batch, one sequence per micro-batch, the
    lite runtime's activation model, ``gpus_per_node`` = nproc."""

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
    device: str = "cpu"
    """``cpu`` (gloo) or ``cuda`` (nccl, one GPU per process)."""
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
    parallel: ParallelConfig = field(default_factory=lambda: ParallelConfig(etp=1))
    """The mesh of the run (TP, CP, EP, ETP; the flags ``--tp`` ... set it)."""
    training: TrainingOptions = field(default_factory=TrainingOptions)
    """The training options of the run (optimizer, dtypes, offload, micro-batches, recompute), as the estimator
    names them; the flags ``--optimizer``, ``--pao``, ``--grad-dtype`` ... set them."""

    def __init__(self, *, parallel: ParallelConfig | None = None, training: TrainingOptions | None = None, **values):
        rows = _rows()
        unknown = sorted(set(values) - set(rows))
        if unknown:
            raise TypeError(f"RunConfig() got an unexpected keyword argument {unknown[0]!r}")
        for f in fields(self):
            if f.name not in _NESTED:
                object.__setattr__(self, f.name, values[f.name] if f.name in values else _default(f))
        nested = {r.field: r.default for r in rows.values() if r.path}
        for part, obj in (("parallel", parallel), ("training", training)):
            if obj is not None:
                nested.update({r.field: _get(obj, r.path[0]) for r in rows.values() if r.path and _part(r) == part})
        nested.update({k: v for k, v in values.items() if rows[k].path})
        self._build(nested)

    def __getattr__(self, name: str) -> Any:
        """The flat name of a nested field (``pao`` -> ``training.use_precision_aware_optimizer``)."""
        row = _rows().get(name) if not name.startswith("_") else None
        if row is None or not row.path or self.__dict__.get(_part(row)) is None:
            raise AttributeError(name)
        return _get(self.__dict__[_part(row)], row.path[0])

    def __setattr__(self, name: str, value) -> None:
        row = _rows().get(name)
        if row is not None and row.path:
            raise AttributeError(f"{name}: a field of RunConfig.{_part(row)}; use cfg.updated({name}=...)")
        object.__setattr__(self, name, value)

    def updated(self, **values) -> RunConfig:
        """A copy with ``values`` (flat names, as :meth:`to_dict` spells them: ``tp=2, pao=True``) changed."""
        return type(self).from_dict({**self.to_dict(), **values})

    def _nested(self) -> dict:
        """The flat values of the nested fields (``{"pao": ..., "tp": ...}``)."""
        return {r.field: getattr(self, r.field) for r in _rows().values() if r.path}

    def _build(self, v: dict) -> None:
        """Check the fields (flat values ``v`` of the nested ones), then compose :attr:`parallel` and
        :attr:`training` (their own rules run there: :mod:`mlite.options.rules`)."""
        self._check_fields(v)
        rows = _rows()
        mesh = {_get_name(p): v[r.field] for r in rows.values() for p in r.path if p.startswith("parallel.")}
        object.__setattr__(self, "parallel", ParallelConfig(**mesh))
        train = {_get_name(p): v[r.field] for r in rows.values() for p in r.path if p.startswith("training.")}
        device = self.device
        train.update(
            param_dtype=self.param_dtype
            if self.param_dtype != "auto"
            else ("bf16" if device == "cuda" or train["use_precision_aware_optimizer"] else "fp32"),
            seq_len=self.tokens_per_microbatch,
            micro_batch_size=1,
            fused_cross_entropy=True,
            # the lite activation model describes tp = cp = ep = 1; a mesh run is estimated the Megatron way
            activation_model="lite" if v["tp"] * v["cp"] * v["ep"] == 1 else "megatron",
            lite_device="cpu" if device == "cpu" else "cuda",
            framework_overhead_gib=0.0 if device == "cpu" else 2.0,
            gpus_per_node=self.nproc,
        )
        object.__setattr__(self, "training", TrainingOptions(**train))
        from .verl_checks import check_trainer  # the verl-sft fields (no verl import)

        self.verl_overrides = check_trainer(self)
        if self.out is not None:
            self.out = str(self.out)

    def validate(self) -> None:
        """Raise :class:`MliteError` naming the first bad field (and compose the nested configs again)."""
        self._build(self._nested())

    def _check_fields(self, flat: dict) -> None:
        """The run's own checks, on the run-only fields and the flat values ``flat`` of the nested ones."""

        def get(name):
            return flat[name] if name in flat else getattr(self, name)

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
            *((a.name, 1) for a in RUN_AXES),
        ):
            x = get(name)
            if isinstance(x, bool) or not isinstance(x, int) or x < lo:
                raise MliteError(f"{name}: {x!r} must be an integer >= {lo}")
        # the training fields' values (optimizer, dtypes, recompute) are TrainingOptions' to check, with its messages
        for name, allowed in (("device", DEVICES), ("launcher", LAUNCHERS), ("param_dtype", PARAM_DTYPES)):
            x = get(name)
            if x not in allowed:
                raise MliteError(f"{name}: {x!r} is not one of {', '.join(allowed)}")
        for name in ("lr", "clip_grad"):
            x = get(name)
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                raise MliteError(f"{name}: {x!r} must be a finite number >= 0")
        if self.lr == 0:
            raise MliteError("lr: 0 would not train; give a positive learning rate such as 3e-3")
        if not isinstance(flat["use_distributed_optimizer"], bool):
            raise MliteError(f"use_distributed_optimizer: {flat['use_distributed_optimizer']!r} must be True or False")
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

    # ------------------------------------------------------------------ derived
    def parallel_config(self):
        """The run's mesh as :class:`mlite.mesh.ParallelConfig` (:attr:`parallel`)."""
        return self.parallel

    def check_mesh(self, spec=None) -> None:
        """Refuse a mesh the planner (:func:`mlite.mesh.resolve`) rejects for this model and ``nproc``, with its
        reasons. The sequence-length rule does not apply: the runtime pads every sequence to a multiple of 2*CP."""
        from ..mesh import resolve
        from ..runtime.parallel.state import check_mesh

        p = self.parallel_config()
        check_mesh(p)  # the axes the lite runtime does not run (etp > 1: a valid config, refused before a start)
        spec = spec or self.model_spec()
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
        t = self.training
        opt = OptimizerConfig(
            optimizer=t.optimizer,
            optimizer_algorithm=t.optimizer_algorithm,
            lr=float(self.lr),
            min_lr=float(self.lr) / 10,
            clip_grad=float(self.clip_grad),
            lr_warmup_steps=self.lr_warmup_steps,
            lr_decay_style=decay,
            lr_decay_steps=decay_steps,
            use_precision_aware_optimizer=t.use_precision_aware_optimizer or None,
            exp_avg_dtype=t.exp_avg_dtype,
            exp_avg_sq_dtype=t.exp_avg_sq_dtype,
            offload_fraction=float(t.offload_fraction) or None,
            use_distributed_optimizer=t.use_distributed_optimizer,
            main_grads_dtype=t.main_grads_dtype,
            mfsdp_bucket_size=t.mfsdp_bucket_size,
            mfsdp_grad_staging=t.mfsdp_grad_staging,
            **{k: getattr(t, k) for k in MUON_FIELDS},
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

    def training_options(self) -> TrainingOptions:
        """The memory estimator's ``TrainingOptions`` for the same run: :attr:`training` (composed from the run)."""
        return self.training

    def check_environment(self) -> None:
        """What can be checked before starting anything: the model config reads, the runtime accepts the
        optimizer settings, CUDA / GPUs / megatron-core / Ray are there when asked for."""
        from .cut import check_cut

        check_cut(self)
        check_env(self.optimizer, os.environ)  # the backend's launch-environment rules (mfsdp: CUDA_DEVICE_MAX_...)
        mfsdp_lite_mesh(self.optimizer, self.tp, self.ep)
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
        """The flat ``config.json`` of a run: one key per ``mlite run`` flag (the RUN rows), as runs always wrote."""
        return {name: getattr(self, name) for name in _rows()}

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        """A RunConfig from :meth:`to_dict`'s flat keys (every run directory's ``config.json``), optionally with
        nested ``parallel`` / ``training`` dicts."""
        known = [*_rows(), *_NESTED]
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise MliteError(f"config.json: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        d = dict(d)
        if isinstance(d.get("parallel"), dict):
            d["parallel"] = ParallelConfig(**d["parallel"])
        if isinstance(d.get("training"), dict):
            d["training"] = TrainingOptions(**d["training"])
        return cls(**d)

    def cli_args(self) -> list[str]:
        """The ``mlite run`` arguments that reproduce this config (``--out`` is the caller's)."""
        from ..options import RUN, command_args

        return command_args(self.to_dict(), RUN, exclude=("out",))
