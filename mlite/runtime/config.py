"""Configuration of the lite runtime, named as Megatron Lite names it.

``RuntimeConfig(backend="mlite", hf_path=..., backend_cfg=MegatronLiteConfig(model_name="auto", impl="lite",
parallel=ParallelConfig(...), optimizer=OptimizerConfig(...), impl_cfg={...}))``.

What the lite runtime implements (everything else raises :class:`~mlite.errors.MliteError` saying so):

* parallelism: ``ParallelConfig(tp, cp, ep, etp=1)`` on one node (:mod:`mlite.runtime.parallel`: EP all-to-all,
  load-balanced CP, TP with sequence parallelism on DTensor; FSDP2 over DP x CP and EDP); ``pp = vpp = 1`` and
  ``etp = 1``: the real mlite implements those on GPUs.
* optimizer backends ``fsdp2`` (AdamW on FSDP2 shards) and ``dist_opt`` (Megatron-Core's DDP and distributed
  optimizer: :mod:`mlite.runtime.ddp`, :mod:`mlite.runtime.optim.distributed`), with ``use_distributed_optimizer``
  and ``main_grads_dtype`` as Megatron-Core names them; ``offload_fraction`` runs with fsdp2 only. Backends and
  algorithms (``optimizer_algorithm``: ``adam``) are entries of :mod:`mlite.options.optimizers`, whose rules
  (:mod:`mlite.options.rules`) this config calls.
* ``OptimizerConfig.optimizer`` names the backend as the contract does; ``impl_cfg["optimizer"]`` (verl's
  ``+engine.impl_cfg.optimizer=...``) wins when both are given.

Rules mirrored from Megatron-Core's ``OptimizerConfig`` (written once in :mod:`mlite.options.rules`): bf16 moments
(``exp_avg_dtype``/``exp_avg_sq_dtype``) need ``use_precision_aware_optimizer``; ``store_param_remainders`` (default
True) only acts with PAO and bf16 params.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import MliteError
from ..mesh import ParallelConfig
from ..options.optimizers import BACKENDS, check_algorithm, check_lite_runtime, check_optimizer

DTYPES = {
    "fp32": "fp32",
    "float32": "fp32",
    "torch.float32": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
}
"""Accepted spellings of the two dtypes the lite runtime stores."""

DECAY_STYLES = ("constant", "linear", "cosine")
"""Learning-rate decay styles after warmup (Megatron's names)."""

OPTIMIZERS = BACKENDS.names
"""Optimizer backends of mlite (live names of :data:`mlite.options.optimizers.BACKENDS`)."""


def dtype_name(value: Any, field_name: str) -> str:
    """Normalise a dtype given as string or ``torch.dtype`` to ``"fp32"`` or ``"bf16"``."""
    key = str(value).strip().lower()
    if key not in DTYPES:
        raise MliteError(f"{field_name}: {value!r} is not supported; use 'fp32' or 'bf16'")
    return DTYPES[key]


@dataclass(kw_only=True, slots=True)
class OptimizerConfig:
    """The optimizer (backend, algorithm: AdamW) and its storage/offload options, as Megatron-Core's ``OptimizerConfig``
    names them."""

    optimizer: str = "fsdp2"
    """Backend: ``fsdp2`` (PyTorch ``fully_shard`` + AdamW on shards) or ``dist_opt`` (Megatron-Core DDP + distributed
    optimizer); see :data:`mlite.options.optimizers.BACKENDS`."""
    optimizer_algorithm: str = "adam"
    """Update algorithm (Megatron-Core's ``OptimizerConfig.optimizer``): ``adam``; see
    :data:`mlite.options.optimizers.ALGORITHMS` (its runtime class for the backend is built)."""
    use_distributed_optimizer: bool = True
    """dist_opt: shard the optimizer state over DP x CP / EDP (reduce-scatter); False: plain DDP (all-reduce)."""
    main_grads_dtype: str = "fp32"
    """dist_opt: dtype of the gradient buffer (``fp32``, Megatron's ``grad_reduce_in_fp32``, or ``bf16``)."""
    lr: float = 1e-4
    """Peak learning rate (after warmup)."""
    min_lr: float = 0.0
    """Learning rate at the end of the decay."""
    lr_warmup_init: float = 0.0
    """Learning rate at step 0 of the warmup (Megatron's ``lr_warmup_init``)."""
    weight_decay: float = 0.01
    """Weight decay; not applied to biases and 1-D parameters (Megatron's default rule)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam beta1, beta2."""
    eps: float = 1e-8
    """Adam epsilon."""
    clip_grad: float | None = 1.0
    """Clip gradients to this global L2 norm; 0 or None disables clipping (the norm is still reported)."""
    lr_warmup_steps: int = 0
    """Linear warmup steps from ``lr_warmup_init`` to ``lr``."""
    lr_decay_style: str = "constant"
    """``constant``, ``linear`` or ``cosine`` decay after warmup."""
    lr_decay_steps: int | None = None
    """Step at which the decay reaches ``min_lr`` (needed for linear/cosine)."""
    use_precision_aware_optimizer: bool | None = None
    """PAO: allows bf16 moments and, with bf16 params, int16 master remainders instead of an fp32 master."""
    exp_avg_dtype: str = "fp32"
    """Storage dtype of Adam's first moment (``bf16`` needs PAO)."""
    exp_avg_sq_dtype: str = "fp32"
    """Storage dtype of Adam's second moment (``bf16`` needs PAO)."""
    store_param_remainders: bool = True
    """With PAO and bf16 params: keep int16 remainders (the low half of the fp32 master) instead of the master."""
    offload_fraction: float | None = None
    """Share of parameters whose master and moments live on CPU and are updated there (by count, whole tensors)."""
    decoupled_weight_decay: bool | None = None
    """AdamW (True, the default when None) or Adam with L2 regularisation (False)."""
    muon_momentum: float = 0.95
    """muon: momentum (EMA) coefficient of the matrices' buffer."""
    muon_nesterov: bool = False
    """muon: Nesterov-style momentum."""
    muon_num_ns_steps: int = 5
    """muon: Newton-Schulz iterations per step."""
    muon_coefficient_type: str = "quintic"
    """muon: Newton-Schulz coefficient sets (``quintic`` or ``simple``)."""
    muon_fp32_matmul_prec: str = "medium"
    """muon: Newton-Schulz matmuls in bf16 (``medium``) or fp32 (``high``)."""
    muon_extra_scale_factor: float = 1.0
    """muon: extra update scale (times the spectral scale sqrt(max(rows, cols)))."""
    muon_match_adamw_update_rms: bool = False
    """muon: use sqrt((1 - beta1) / (1 + beta1)) as the extra scale (beta1 = ``betas[0]``)."""
    mfsdp_bucket_size: int = 40_000_000
    """mfsdp: bucket capacity C (elements) of the host gradient ring (``mfsdp_grad_staging="ring"``)."""
    mfsdp_grad_staging: str = "persistent"
    """mfsdp: host gradient staging, ``persistent`` (one pinned fp32 buffer of the offloaded elements, today's
    ``_cpu_grad_bufs``) or ``ring`` (two slots of at most C elements)."""

    def __post_init__(self) -> None:
        for name in ("lr", "min_lr", "lr_warmup_init", "weight_decay", "eps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise MliteError(f"optimizer.{name}: {v!r} must be a finite number >= 0")
        if self.min_lr > self.lr or self.lr_warmup_init > self.lr:
            raise MliteError(
                f"optimizer.min_lr={self.min_lr} / lr_warmup_init={self.lr_warmup_init} must not exceed lr={self.lr}"
            )
        b = tuple(self.betas)
        if len(b) != 2 or not all(isinstance(x, (int, float)) and 0.0 <= x < 1.0 for x in b):
            raise MliteError(f"optimizer.betas: {self.betas!r} must be two numbers in [0, 1)")
        self.betas = (float(b[0]), float(b[1]))
        if self.clip_grad is not None and (not isinstance(self.clip_grad, (int, float)) or self.clip_grad < 0):
            raise MliteError(f"optimizer.clip_grad: {self.clip_grad!r} must be >= 0 (0 or None disables clipping)")
        if not isinstance(self.lr_warmup_steps, int) or self.lr_warmup_steps < 0:
            raise MliteError(f"optimizer.lr_warmup_steps: {self.lr_warmup_steps!r} must be an integer >= 0")
        if self.lr_decay_style not in DECAY_STYLES:
            raise MliteError(
                f"optimizer.lr_decay_style: {self.lr_decay_style!r} is not supported; use one of "
                f"{', '.join(DECAY_STYLES)}"
            )
        if self.lr_decay_style != "constant" and (
            not isinstance(self.lr_decay_steps, int) or self.lr_decay_steps <= self.lr_warmup_steps
        ):
            raise MliteError(
                f"optimizer.lr_decay_steps: {self.lr_decay_steps!r} must be an integer larger than "
                f"lr_warmup_steps={self.lr_warmup_steps} for lr_decay_style={self.lr_decay_style}"
            )
        self.main_grads_dtype = dtype_name(self.main_grads_dtype, "optimizer.main_grads_dtype")
        if not isinstance(self.use_distributed_optimizer, bool):
            raise MliteError(f"optimizer.use_distributed_optimizer: {self.use_distributed_optimizer!r} must be a bool")
        self.exp_avg_dtype = dtype_name(self.exp_avg_dtype, "optimizer.exp_avg_dtype")
        self.exp_avg_sq_dtype = dtype_name(self.exp_avg_sq_dtype, "optimizer.exp_avg_sq_dtype")
        check_algorithm(self)  # names, offload range, what the algorithm refuses; the backend's: check_backend

    @property
    def pao(self) -> bool:
        """use_precision_aware_optimizer with None read as False."""
        return bool(self.use_precision_aware_optimizer)

    @property
    def decoupled(self) -> bool:
        """decoupled_weight_decay with None read as True (AdamW)."""
        return self.decoupled_weight_decay is None or bool(self.decoupled_weight_decay)

    @property
    def fraction(self) -> float:
        """offload_fraction with None read as 0."""
        return float(self.offload_fraction or 0.0)


def check_backend(backend: str, o: OptimizerConfig) -> None:
    """Raise MliteError for optimizer settings ``backend`` does not run: the rules of its registry entry and those
    of the algorithm (:func:`mlite.options.optimizers.check_optimizer`), then what the lite runtime's implementation
    adds (:func:`~mlite.options.optimizers.check_lite_runtime`)."""
    check_optimizer(o, backend)
    check_lite_runtime(o, backend)


@dataclass(kw_only=True, slots=True)
class MegatronLiteConfig:
    """The ``backend_cfg`` of an mlite runtime."""

    model_name: str = "auto"
    """Model family; ``auto`` reads it from the HF config (the only value the lite runtime needs)."""
    impl: str = "lite"
    """Implementation; only ``lite``."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """The mesh (the lite runtime runs tp, cp and ep; pp = vpp = etp = 1)."""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """Optimizer settings."""
    impl_cfg: dict = field(default_factory=dict)
    """Implementation knobs: ``optimizer`` (``fsdp2``/``dist_opt``), ``recompute`` (``none``/``selective``/``full``
    or verl's ``[full]`` list), ``moe_aux_loss_coeff`` (MoE load-balancing loss weight, default 0)."""

    def __post_init__(self) -> None:
        if self.impl != "lite":
            raise MliteError(f"impl: {self.impl!r} is not available; the lite runtime implements impl='lite'")
        if isinstance(self.parallel, dict):
            self.parallel = ParallelConfig(**self.parallel)
        if isinstance(self.optimizer, dict):
            self.optimizer = OptimizerConfig(**self.optimizer)
        if not isinstance(self.impl_cfg, dict):
            raise MliteError(f"impl_cfg: expected a dict, got {type(self.impl_cfg).__name__}")
        known = {"optimizer", "recompute", "moe_aux_loss_coeff"}
        unknown = sorted(set(self.impl_cfg) - known)
        if unknown:
            raise MliteError(
                f"impl_cfg: unknown key(s) {', '.join(unknown)}; the lite runtime reads {', '.join(sorted(known))}"
            )
        opt = self.impl_cfg.get("optimizer")
        if opt is not None and opt not in BACKENDS:
            raise MliteError(f"impl_cfg.optimizer: {opt!r} is not a backend; use one of {', '.join(BACKENDS)}")
        _ = self.recompute  # the property validates impl_cfg's recompute
        check_backend(self.optimizer_backend, self.optimizer)

    @property
    def optimizer_backend(self) -> str:
        """``impl_cfg['optimizer']`` if given, else ``optimizer.optimizer``."""
        return self.impl_cfg.get("optimizer") or self.optimizer.optimizer

    @property
    def recompute(self) -> str:
        """``none``, ``selective`` or ``full`` (a verl-style list like ``["full"]`` is accepted)."""
        r = self.impl_cfg.get("recompute", "none")
        if isinstance(r, (list, tuple)):
            if len(r) > 1:
                raise MliteError(f"impl_cfg.recompute: {r!r}: give one of none, selective, full")
            r = r[0] if r else "none"
        r = "none" if r in (None, False, "") else str(r)
        if r not in ("none", "selective", "full"):
            raise MliteError(f"impl_cfg.recompute: {r!r} is not supported; use none, selective or full")
        return r


@dataclass(kw_only=True, slots=True)
class RuntimeConfig:
    """What ``create_runtime`` needs: the model, the backend config, and where to run."""

    backend: str = "mlite"
    """Runtime backend; only ``mlite``."""
    hf_path: Any = None
    """The model: a ``data/models`` name (``tiny-moe``), a config.json path or dir, a config dict, or a ModelSpec."""
    backend_cfg: MegatronLiteConfig = field(default_factory=MegatronLiteConfig)
    """Megatron Lite settings (mesh, optimizer, impl knobs)."""
    device: str = "auto"
    """``cpu``, ``cuda`` or ``auto`` (cuda when available)."""
    param_dtype: str = "auto"
    """Storage dtype of the parameters: ``fp32``, ``bf16`` or ``auto`` (bf16 on CUDA or with PAO, else fp32)."""
    seed: int = 0
    """Seed of the weight initialisation (identical on every rank)."""
    dist_timeout_s: float = 300.0
    """Timeout of every collective, seconds."""
    compile: bool = False
    """``torch.compile`` each decoder block's forward (FSDP2's hooks stay eager); off by default: compile time per
    distinct packing layout, and not faster everywhere (see README, GPU results)."""
    model_factory: Callable | None = None
    """Optional ``f(param_dtype: torch.dtype, device: torch.device, seed: int) -> nn.Module`` used instead of
    ``build_lite_model`` (tests, custom models); the module should offer ``blocks``, ``expert_modules()`` and
    ``loss(batch)`` like a LiteModel."""

    def __post_init__(self) -> None:
        if self.backend != "mlite":
            raise MliteError(f"backend: {self.backend!r} is not available; the lite runtime implements 'mlite'")
        if isinstance(self.backend_cfg, dict):
            self.backend_cfg = MegatronLiteConfig(**self.backend_cfg)
        if self.param_dtype != "auto":
            self.param_dtype = dtype_name(self.param_dtype, "param_dtype")
        if not isinstance(self.compile, bool):
            raise MliteError(f"compile: {self.compile!r} must be true or false")
        if self.hf_path is None and self.model_factory is None:
            raise MliteError(
                "hf_path: no model given; pass a data/models name (e.g. 'tiny-moe'), a config path or a config dict"
            )

    @property
    def optimizer(self) -> OptimizerConfig:
        return self.backend_cfg.optimizer

    @property
    def parallel(self) -> ParallelConfig:
        return self.backend_cfg.parallel

    def to_dict(self) -> dict:
        """JSON-ready view (the model factory and non-JSON model objects are named, not serialised)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("backend_cfg", "model_factory")}
        if not isinstance(out["hf_path"], (str, dict, type(None))):
            out["hf_path"] = getattr(out["hf_path"], "name", str(out["hf_path"]))
        bc = self.backend_cfg
        out["backend_cfg"] = {
            "model_name": bc.model_name,
            "impl": bc.impl,
            "parallel": _plain(bc.parallel),
            "optimizer": _plain(bc.optimizer),
            "impl_cfg": dict(bc.impl_cfg),
        }
        if self.model_factory is not None:
            out["model_factory"] = getattr(self.model_factory, "__qualname__", repr(self.model_factory))
        return out

    @classmethod
    def from_dict(cls, d: dict) -> RuntimeConfig:
        """Inverse of :meth:`to_dict` (without a model factory)."""
        d = dict(d)
        d.pop("model_factory", None)
        bc = dict(d.pop("backend_cfg", {}) or {})
        if isinstance(bc.get("optimizer"), dict) and "betas" in bc["optimizer"]:
            bc["optimizer"] = dict(bc["optimizer"], betas=tuple(bc["optimizer"]["betas"]))
        return cls(backend_cfg=MegatronLiteConfig(**bc), **d)


def _plain(obj) -> dict:
    try:
        return asdict(obj)
    except TypeError:
        return {f.name: getattr(obj, f.name) for f in fields(obj)}
