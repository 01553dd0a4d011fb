"""``ExportPlan``: everything a launcher and its Slurm job need — model, mesh, training options, cluster, paths, names.

``plan.resolve()`` checks the mesh with the planner (:func:`mlite.mesh.resolve`, uneven layouts allowed: the
planner picks one and the launchers carry it) and returns the model spec and the :class:`MeshPlan`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..errors import MliteError
from ..memory.rl_critic import CriticOptions
from ..memory.rl_fsdp import FsdpOptions
from ..memory.rl_keys import ROLLOUT_KEYS
from ..memory.rl_options import RolloutOptions
from ..mesh import DEFAULT_GPUS_PER_NODE, MeshPlan, ParallelConfig, resolve
from ..options.rl_fsdp import LOG_PROB_FIELDS
from ..options.training import TrainingOptions

TARGETS = ("verl-mlite-sft", "verl-mlite-grpo", "verl-megatron-grpo")
"""What ``mlite export --target`` writes: verl SFT on the mlite engine, verl GRPO with the mlite actor, verl GRPO on
verl's built-in Megatron backend."""

LOCAL_TARGETS = ("verl-lite-sft",)
"""Local variants of a cluster target (the keys that differ: :data:`mlite.options.table.ENGINE_SWITCH`)."""

ROLLOUT_OWNED = (
    "tensor_model_parallel_size",
    "gpu_memory_utilization",
    "n",
    "prompt_length",
    "response_length",
    "train_batch_size",
)
"""RolloutOptions fields an ExportPlan owns through fields of its own (the rest are ``rollout_knobs``)."""


LOG_PROB_OWNED = ("use_dynamic_bsz", "ppo_max_token_len_per_gpu")
"""Log-prob fields the GRPO launchers always write themselves (``actor.use_dynamic_bsz=True`` and the
``PPO_MAX_TOKEN_LEN_PER_GPU`` knob, :func:`mlite.export.grpo.actor_common`); the rest are ``log_prob_knobs``."""
CRITIC_TARGETS = ("verl-megatron-grpo",)
"""The targets that write an active critic (``critic.megatron.*`` exists under ``ppo_megatron_trainer`` only)."""


def default_optimizer(target: str) -> str:
    """The optimizer an export for ``target`` uses when none is chosen: the options' default, but for a target on
    verl's lite engine the first backend that engine builds (its one rule:
    :func:`mlite.options.optimizers.check_verl_lite_engine`), so ``--target verl-lite-sft`` works as given."""
    from ..options.optimizers import BACKENDS

    default = TrainingOptions().optimizer
    if target not in LOCAL_TARGETS or BACKENDS.entry(default).verl_lite_engine:
        return default
    return next(b.name for b in BACKENDS.values() if b.verl_lite_engine)


DEFAULT_LOG_DIR = "runs/slurm"
"""Where Slurm output (``%x-%j.out``) and verl's JSONL metrics go; the analysis notebook looks here."""


@dataclass(kw_only=True)
class ExportPlan:
    """A plan to hand over to verl (launcher) and Slurm + Ray (sbatch)."""

    model: str
    """Model config: a name in ``data/models/`` or a path to a ``config.json`` (for the mesh checks)."""
    target: str = "verl-mlite-grpo"
    """One of :data:`TARGETS`."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """The mesh (tp, pp, vpp, cp, ep, etp, pp_layout)."""
    options: TrainingOptions = field(default_factory=TrainingOptions)
    """Optimizer, PAO, offload, recompute, sequence length, micro-batches (as for the memory estimate)."""
    nodes: int = 1
    """Slurm nodes (``trainer.nnodes``)."""
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    """GPUs per node (``trainer.n_gpus_per_node``, ``--gpus-per-node``)."""
    model_path: str | None = None
    """Hugging Face checkpoint directory on the cluster; default: the model name (a hub id style placeholder)."""
    train_files: str = "~/data/gsm8k/train.parquet"
    """Training parquet (SFT: a ``messages`` column; GRPO: a ``prompt`` column as verl's GSM8K preprocessing)."""
    val_files: str = "~/data/gsm8k/test.parquet"
    """Validation parquet."""
    log_dir: str = DEFAULT_LOG_DIR
    """Folder for ``%x-%j.out`` and the ``VERL_FILE_LOGGER_PATH`` JSONL (relative: to the Slurm submit directory)."""
    project_name: str = "mlite-lab"
    """``trainer.project_name``."""
    experiment_name: str | None = None
    """``trainer.experiment_name`` and the Slurm job name; default ``<model>-<target>-<nodes>x<gpus>``."""
    lr: float | None = None
    """Learning rate; default 1e-5 (SFT) or 1e-6 (GRPO), as verl's mlite examples."""
    train_batch_size: int | None = None
    """SFT: sequences per step (default micro_batch x num_microbatches x DP); GRPO: prompts per step (default
    max(32, DP))."""
    total_epochs: int = 1
    """``trainer.total_epochs``."""
    rollout_n: int = 8
    """GRPO: responses per prompt (``actor_rollout_ref.rollout.n``)."""
    rollout_tp: int | None = None
    """GRPO: vLLM tensor parallel size; default the GPUs per node (at most 8)."""
    rollout_gpu_memory_utilization: float = 0.6
    """GRPO: vLLM ``gpu_memory_utilization`` (the training state shares the GPU)."""
    max_prompt_length: int | None = None
    """GRPO: prompt tokens; default min(1024, seq_len // 2); responses get the rest of ``options.seq_len``."""
    rollout_knobs: dict = field(default_factory=dict)
    """GRPO: the rollout engine's other knobs, by :class:`~mlite.memory.rl_options.RolloutOptions` field (``name``,
    ``free_cache_engine``, ``max_model_len``, ``max_num_batched_tokens``, ``max_num_seqs``, ``dtype``,
    ``enforce_eager``, ``update_weights_bucket_megabytes``); the fields above own n, TP, the memory share and lengths."""
    log_prob_knobs: dict = field(default_factory=dict)
    """GRPO: the old_log_prob / ref forwards' sizing, by :class:`~mlite.memory.rl_fsdp.FsdpOptions` field
    (``log_prob_micro_batch_size_per_gpu``, ``ref_log_prob_micro_batch_size_per_gpu``,
    ``log_prob_max_token_len_per_gpu``, ``ref_log_prob_max_token_len_per_gpu``; unset: the update's)."""
    critic: CriticOptions = field(default_factory=CriticOptions)
    """GRPO/PPO: ``algorithm.adv_estimator`` and PPO's critic (active: ``verl-megatron-grpo`` only)."""
    partition: str | None = None
    """``#SBATCH --partition`` (left as a commented line when None)."""
    account: str | None = None
    """``#SBATCH --account`` (left as a commented line when None)."""
    time_limit: str | None = None
    """``#SBATCH --time`` (e.g. ``24:00:00``; commented when None)."""
    cpus_per_task: int = 64
    """``#SBATCH --cpus-per-task``: CPUs for the one task per node (Ray's ``--num-cpus``); set to the node's cores."""
    ray_port: int = 6379
    """Ray head GCS port."""
    ray_wait_timeout: int = 900
    """Seconds the job waits for every GPU to join the Ray cluster before it fails with a clear error."""
    setup: tuple[str, ...] = ()
    """Shell lines run on every node before Ray/torchrun starts (module load, venv activate, ...)."""
    source_launcher: str | None = None
    """Launcher this plan was imported from (``mlite import-launcher``), for the header's mesh accounting."""
    source_rule_dp: float | None = None
    """DP that ``source_launcher`` computed with verl's rule ngpu/PP = TP*EP*DP (None: it did not use that rule)."""
    hardware: str | None = None
    """Time-model profile of the header's predicted step (a shipped name, :func:`mlite.time.hardware_names`, or a
    profile file); None: :data:`mlite.time.hardware.DEFAULT_HARDWARE` (``mlite export`` passes the ``--gpu-mem``
    GPU's profile where it names one)."""
    train_mtp: bool | None = None
    """Train the model's MTP layers (verl's ``mtp.enable`` and ``enable_train``, placed in the last stage): None
    trains them when the model has some; False (an imported launcher that does not train MTP) writes neither key."""

    def __post_init__(self):
        if self.target not in TARGETS + LOCAL_TARGETS:
            raise MliteError(f"--target {self.target!r}: expected one of {', '.join(TARGETS + LOCAL_TARGETS)}")
        for name in (
            "nodes",
            "gpus_per_node",
            "total_epochs",
            "rollout_n",
            "cpus_per_task",
            "ray_port",
            "ray_wait_timeout",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise MliteError(f"{name.replace('_', '-')} must be a positive integer, got {v!r}")
        for name in ("train_batch_size", "rollout_tp", "max_prompt_length"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise MliteError(f"{name} must be a positive integer or None, got {v!r}")
        owned = set(ROLLOUT_OWNED)
        writable = [f for f, _key in ROLLOUT_KEYS if f not in owned]
        for k in self.rollout_knobs:
            if k not in writable:
                raise MliteError(
                    f"rollout_knobs: '{k}' is not a rollout knob of its own that a launcher writes (n, TP, the "
                    f"memory share and the lengths have their own fields; others: {', '.join(writable)})"
                )
        knobs = [f for f in LOG_PROB_FIELDS if f not in LOG_PROB_OWNED]
        for k in self.log_prob_knobs:
            if k not in knobs:
                raise MliteError(
                    f"log_prob_knobs: '{k}' is not a log-prob knob a launcher writes (one of {', '.join(knobs)})"
                )
        _ = self.log_prob_options  # FsdpOptions validates the values
        if self.critic.active and self.target not in CRITIC_TARGETS:
            raise MliteError(
                f"--target {self.target}: PPO's critic (algorithm.adv_estimator={self.critic.adv_estimator}) is "
                f"exported on {', '.join(CRITIC_TARGETS)} only (its critic.megatron.* keys); pick that target"
            )
        if self.critic.active and self.critic.strategy != "megatron":
            raise MliteError(
                f"critic.strategy {self.critic.strategy}: the export writes a Megatron critic "
                "(critic.megatron.*, ppo_megatron_trainer); use critic.strategy=megatron"
            )
        _ = self.rollout_options  # RolloutOptions validates the knob values and the memory share, (0, 1] as vLLM's
        if self.max_prompt_length is not None and self.max_prompt_length >= self.options.seq_len:
            raise MliteError(
                f"max_prompt_length {self.max_prompt_length} leaves no room for responses in seq_len "
                f"{self.options.seq_len}: lower it or raise --seq-len"
            )
        for name in ("model", "train_files", "val_files", "log_dir", "project_name"):
            if not str(getattr(self, name)).strip():
                raise MliteError(f"{name} must not be empty")
        if self.options.gpus_per_node != self.gpus_per_node:
            self.options = replace(self.options, gpus_per_node=self.gpus_per_node)

    # -- derived -------------------------------------------------------------------------------------------------
    @property
    def ngpu(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def is_sft(self) -> bool:
        return self.target in ("verl-mlite-sft", "verl-lite-sft")

    @property
    def is_mlite(self) -> bool:
        return self.target.startswith("verl-mlite")

    @property
    def name(self) -> str:
        """The experiment / job name (safe for file names and Slurm)."""
        if self.experiment_name:
            return _safe(self.experiment_name)
        base = self.model.rstrip("/").split("/")[-1]
        base = base[:-5] if base.endswith(".json") else base
        if base == "config" and "/" in self.model:
            base = self.model.rstrip("/").split("/")[-2]
        return _safe(f"{base}-{self.target.removeprefix('verl-')}-{self.nodes}x{self.gpus_per_node}")

    @property
    def checkpoint_path(self) -> str:
        """``model.path`` default: the given checkpoint path, else the model name."""
        if self.model_path:
            return self.model_path
        base = self.model.rstrip("/").split("/")[-1]
        return base[:-5] if base.endswith(".json") else base

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else (1e-5 if self.is_sft else 1e-6)

    @property
    def prompt_length(self) -> int:
        return self.max_prompt_length or min(1024, self.options.seq_len // 2)

    @property
    def response_length(self) -> int:
        return self.options.seq_len - self.prompt_length

    @property
    def rollout_tensor_parallel(self) -> int:
        return self.rollout_tp or min(self.gpus_per_node, 8)

    @property
    def rollout_options(self) -> RolloutOptions:
        """The rollout engine as :func:`mlite.memory.rl.rl_estimate` sees it: this plan's fields plus its knobs, and no
        reference model (the GRPO launchers write ``use_kl_loss=False`` and ``use_kl_in_reward=False``)."""
        return RolloutOptions(
            ref="none",
            tensor_model_parallel_size=self.rollout_tensor_parallel,
            gpu_memory_utilization=self.rollout_gpu_memory_utilization,
            n=self.rollout_n,
            prompt_length=self.prompt_length,
            response_length=self.response_length,
            **self.rollout_knobs,
        )

    @property
    def log_prob_options(self) -> FsdpOptions:
        """The log-prob forwards' sizing as :func:`mlite.memory.rl.rl_estimate` sees it (strategy megatron): the
        launcher's packing (``use_dynamic_bsz=True``, ``seq_len x micro_batch`` tokens) and :attr:`log_prob_knobs`."""
        o = self.options
        return FsdpOptions(
            strategy="megatron",
            use_dynamic_bsz=True,
            ppo_max_token_len_per_gpu=o.seq_len * o.micro_batch_size,
            **self.log_prob_knobs,
        )

    def batch_size(self, dp: int) -> int:
        """``data.train_batch_size`` for a DP size (see :attr:`train_batch_size`)."""
        if self.train_batch_size:
            return self.train_batch_size
        o = self.options
        return o.micro_batch_size * o.num_microbatches * dp if self.is_sft else max(32, dp)

    def resolve(self) -> tuple[object, MeshPlan]:
        """``(ModelSpec, MeshPlan)`` for this plan's model on ``nodes x gpus_per_node`` GPUs."""
        from ..models import from_hf_config

        spec = from_hf_config(self.model)
        plan = resolve(
            spec,
            self.ngpu,
            self.parallel,
            seq_len=self.options.seq_len,
            gpus_per_node=self.gpus_per_node,
            auto_uneven=True,
            train_mtp=self.train_mtp,
        )
        return spec, plan


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.") or "run"
