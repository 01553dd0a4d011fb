"""``LiteEngine``: verl's ``BaseEngine`` on the lite runtime (``engine=lite``; registered on import).

verl's engine config and optimizer config map onto :class:`mlite.runtime.RuntimeConfig` (:func:`runtime_config`;
keys: :data:`mlite.options.table.LITE_ENGINE_KEYS`). A step: verl's batch is split into micro-batches by token budget
(verl's partition, the same count on every DP rank), each gathered straight into a :class:`~mlite.runtime.PackedBatch`
by :mod:`.packing` (labels = the next token where verl's rolled ``loss_mask`` is 1, none across a sequence end) and the runtime's
``forward_backward`` scales every micro-batch's summed token loss by ``DP / G``, ``G`` = loss tokens of the global
batch: verl's ``sft_loss`` normalisation (``-sum(log_prob * loss_mask) / batch_num_tokens * dp_size``, summed over
micro-batches, averaged over DP). Offload follows verl's mode switches (``BaseEngineCtx`` calls :meth:`to`).
"""

from __future__ import annotations

import os
from contextlib import nullcontext

import torch
from verl.utils.device import get_device_name
from verl.workers.engine.base import BaseEngine, BaseEngineCtx, EngineRegistry

from ..errors import MliteError
from ..options.optimizers import check_verl_lite_engine
from ..options.table import LITE_ENGINE, LITE_OPTIM_OVERRIDES
from .packing import micro_batches

_DTYPES = {"auto": "auto", "bfloat16": "bf16", "bf16": "bf16", "float32": "fp32", "fp32": "fp32"}


def _optimizer_config(optim, total_steps: int):
    """verl's (Megatron) optimizer config -> :class:`mlite.runtime.OptimizerConfig`."""
    from ..runtime.config import OptimizerConfig

    ov = dict(getattr(optim, "override_optimizer_config", None) or {})
    unknown = sorted(set(ov) - set(LITE_OPTIM_OVERRIDES))
    if unknown:
        raise MliteError(f"optim.override_optimizer_config: {', '.join(unknown)} not read by the lite engine")
    frac = ov.get("offload_fraction", ov.get("optimizer_offload_fraction"))
    if frac is None and ov.get("optimizer_cpu_offload"):
        frac = 1.0
    pao = bool(ov.get("use_precision_aware_optimizer", getattr(optim, "use_precision_aware_optimizer", False)))
    warm = getattr(optim, "lr_warmup_steps", -1)
    if warm is None or warm < 0:
        warm = int(getattr(optim, "lr_warmup_steps_ratio", 0.0) * max(total_steps, 0))
    style = getattr(optim, "lr_decay_style", "constant")
    decay_steps = getattr(optim, "lr_decay_steps", None) or (total_steps if style != "constant" else None)
    return OptimizerConfig(
        optimizer="fsdp2",
        lr=float(optim.lr),
        min_lr=float(getattr(optim, "min_lr", 0.0) or 0.0),
        lr_warmup_init=float(getattr(optim, "lr_warmup_init", 0.0) or 0.0),
        weight_decay=float(optim.weight_decay),
        betas=tuple(optim.betas),
        eps=float(ov.get("adam_eps", 1e-8)),
        clip_grad=float(optim.clip_grad),
        lr_warmup_steps=int(warm),
        lr_decay_style=style,
        lr_decay_steps=decay_steps,
        use_precision_aware_optimizer=pao,
        exp_avg_dtype=getattr(optim, "exp_avg_dtype", "fp32"),
        exp_avg_sq_dtype=getattr(optim, "exp_avg_sq_dtype", "fp32"),
        offload_fraction=None if frac is None else float(frac),
        decoupled_weight_decay=ov.get("decoupled_weight_decay"),
    )


def runtime_config(model_config, engine_config, optimizer_config):
    """The :class:`mlite.runtime.RuntimeConfig` of verl's configs (mesh, optimizer, impl knobs, dtype, device)."""
    from ..mesh import ParallelConfig
    from ..runtime.config import MegatronLiteConfig, RuntimeConfig

    e = engine_config
    impl = {k: v for k, v in dict(e.impl_cfg or {}).items() if k != "use_thd"}
    if impl.get("optimizer") is not None:
        check_verl_lite_engine(impl["optimizer"], "engine.impl_cfg.optimizer")
    if e.router_aux_loss_coef is not None:
        impl["moe_aux_loss_coeff"] = float(e.router_aux_loss_coef)
    if e.dtype not in _DTYPES:
        raise MliteError(f"engine.dtype: {e.dtype!r} is not supported; use auto, bfloat16 or float32")
    parallel = ParallelConfig(tp=e.tp, pp=e.pp, vpp=e.vpp, cp=e.cp, ep=e.ep, etp=e.etp)
    opt = _optimizer_config(optimizer_config, int(getattr(optimizer_config, "total_training_steps", -1) or -1))
    path = getattr(model_config, "local_path", None) or model_config.path
    return RuntimeConfig(
        hf_path=str(path),
        backend_cfg=MegatronLiteConfig(
            model_name=e.model_name, impl=e.impl, parallel=parallel, optimizer=opt, impl_cfg=impl
        ),
        device=get_device_name(),
        param_dtype=_DTYPES[e.dtype],
        seed=int(e.seed),
    )


class LiteEngineCtx(BaseEngineCtx):
    """verl's train/eval mode switch; frees the gradients on leaving train mode (``zero_grad_on_exit``)."""

    engine: LiteEngine
    """The engine this context switches (verl's base class types it as ``BaseEngine``)."""

    def __exit__(self, exc_type, exc_val, exc_tb):
        if self.mode == "train" and self.zero_grad_on_exit and self.engine.handle is not None:
            self.engine.optimizer_zero_grad()
        super().__exit__(exc_type, exc_val, exc_tb)


@EngineRegistry.register(model_type="language_model", backend=LITE_ENGINE, device=["cuda", "cpu"])
class LiteEngine(BaseEngine):
    """The lite runtime behind verl's engine interface (SFT: ``language_model``)."""

    def __init__(self, model_config, engine_config, optimizer_config, checkpoint_config, **_):
        from ..runtime import create_runtime

        self.model_config, self.engine_config = model_config, engine_config
        self.optimizer_config, self.checkpoint_config = optimizer_config, checkpoint_config
        self.mode = None
        self.handle = None
        self.runtime = create_runtime(runtime_config(model_config, engine_config, optimizer_config))
        self.pstate = self.runtime.pstate
        self._data_group = _data_parallel_group(self.pstate)

    # ------------------------------------------------------------------ build
    def initialize(self):
        """Build the model (weights from the seed) and its optimizer; the schedule reads total_training_steps."""
        if self.handle is None:
            self.runtime.cfg.backend_cfg.optimizer = _optimizer_config(
                self.optimizer_config, int(self.optimizer_config.total_training_steps)
            )
            self.handle = self.runtime.build_model()
            if self.engine_config.param_offload or self.engine_config.optimizer_offload:
                self.to(
                    "cpu",
                    model=self.engine_config.param_offload,
                    optimizer=self.engine_config.optimizer_offload,
                    grad=self.engine_config.param_offload,
                )

    @property
    def is_param_offload_enabled(self) -> bool:
        return bool(self.engine_config.param_offload)

    @property
    def is_optimizer_offload_enabled(self) -> bool:
        return bool(self.engine_config.optimizer_offload)

    def train_mode(self, **kwargs):
        return LiteEngineCtx(self, mode="train", **kwargs)

    def eval_mode(self, **kwargs):
        return LiteEngineCtx(self, mode="eval", **kwargs)

    # ------------------------------------------------------------------ step
    def optimizer_zero_grad(self):
        self.runtime.zero_grad(self.handle)

    def optimizer_step(self):
        _ok, norm, _zeros = self.runtime.optimizer_step(self.handle)
        return norm

    def lr_scheduler_step(self):
        return self.runtime.lr_scheduler_step(self.handle)

    def forward_backward_batch(self, data, loss_function, forward_only=False):
        """Pack verl's micro-batches and run the runtime's forward/backward (verl's SFT normalisation)."""
        mbs = micro_batches(data, self.get_data_parallel_group())
        _maybe_dump(mbs, self.pstate)
        with torch.no_grad() if forward_only else nullcontext():
            out = self.runtime.forward_backward(self.handle, mbs, forward_only=forward_only)
        # verl sums the per-micro-batch losses and averages over DP: one entry holding the global mean
        return {"loss": [out["loss"]], "metrics": {}, "model_output": {}}

    # ------------------------------------------------------------------ mesh
    def get_data_parallel_size(self):
        return self.pstate.dp

    def get_data_parallel_rank(self):
        return self.pstate.dp_rank

    def get_data_parallel_group(self):
        return self._data_group

    def is_mp_src_rank_with_outputs(self):
        return self.pstate.tp_rank == 0 and self.pstate.cp_rank == 0

    # ------------------------------------------------------------------ offload / checkpoint
    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True):
        super().to(device, model=model, optimizer=optimizer, grad=grad)
        if self.handle is None or not (model or optimizer):
            return
        self.runtime.to(self.handle, device, model=model, optimizer=optimizer, grad=grad)

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None, **kwargs):
        if self.pstate.ep > 1 or self.pstate.tp > 1:
            if self.pstate.rank == 0:
                print(
                    f"[mlite] checkpoint at step {global_step} not written: the lite runtime does not checkpoint "
                    "TP > 1 or EP > 1 runs",
                    flush=True,
                )
            return
        self.runtime.save_checkpoint(self.handle, os.path.join(local_path, "lite"))

    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=True, **kwargs):
        self.runtime.load_checkpoint(self.handle, os.path.join(local_path, "lite"))


def _data_parallel_group(ps):
    """verl's DP group: the ranks that hold different data (the dense mesh's ``dp`` dimension; same TP and CP
    coordinates). None when DP is 1."""
    if ps.dp == 1:
        return None
    return ps.meshes.dense["dp"].get_group()


def _maybe_dump(mbs, ps) -> None:
    """``MLITE_VERL_DUMP_BATCH=DIR``: save this rank's first step's micro-batches (the equivalence check reads
    them to feed the same batch to a plain lite run)."""
    d = os.environ.get("MLITE_VERL_DUMP_BATCH")
    if not d:
        return
    path = os.path.join(d, f"first_batch_rank{ps.rank}.pt")
    if os.path.exists(path):
        return
    os.makedirs(d, exist_ok=True)
    torch.save([{"input_ids": m.input_ids, "labels": m.labels, "seq_lens": m.seq_lens} for m in mbs], path)
