"""The lite runtime: Megatron Lite's runtime API on FSDP2 (``optimizer fsdp2``) or on Megatron-Core's DDP and
distributed optimizer (``optimizer dist_opt``, :mod:`mlite.runtime.ddp`), for single-node debug runs (CPU, one GPU,
one node).

::

    rt = create_runtime(RuntimeConfig(hf_path="tiny-moe", backend_cfg=MegatronLiteConfig(optimizer=OptimizerConfig(
        lr=1e-3, use_precision_aware_optimizer=True, offload_fraction=1.0))))
    h = rt.build_model()
    for step in range(n):
        metrics = forward_backward(h, micro_batches, num_microbatches=len(micro_batches))
        ok, grad_norm, num_zeros = optimizer_step(h)
        zero_grad(h)
        if ok:
            lr_scheduler_step(h)

Tiers as in mlite: pretrain (``build_model``, ``forward_backward``, ``zero_grad``, ``optimizer_step``,
``lr_scheduler_step``, ``save_checkpoint``/``load_checkpoint``, ``train_mode``/``eval_mode``), rl-ready
(``export_weights``), rl-best (``to(handle, device, model=, optimizer=, grad=)``). Each is a method of the runtime and
a module-level function taking the handle.

Loss normalisation (as verl): every micro-batch's summed token loss is scaled by ``DP / G`` where ``G`` is the number
of loss tokens of the whole global batch (all micro-batches on all DP ranks); FSDP2's gradient average over DP then
leaves ``sum of token-loss gradients / G``. The reported loss is ``sum of token losses / G``.

Mesh (``ParallelConfig(tp, cp, ep, etp=1)`` on one node, see :mod:`mlite.runtime.parallel`): "DP" above is DP x CP
(the ranks whose tokens differ: each CP rank holds its load-balanced chunks of every sequence); every rank of a
DP x CP group feeds the micro-batches of its DP rank (data rank = DP rank), the runtime splits each over CP. Expert
gradients (EP-sharded experts, FSDP2 over EDP) are divided by DP x CP as well. Under TP every TP rank computes the
same full loss (vocabulary-parallel cross entropy), so the loss is reduced over DP x CP only; the replicated
parameters' partial gradients are summed over TP before the norm. The gradient norm sums replicated dense shards
over DP x CP, TP-split shards and expert shards over the whole world. Checkpoints of EP > 1 or TP > 1 runs are
refused (their slices carry no global layout for DCP yet).

Memory (per rank, bf16 params, FSDP group size d = world size): parameter shards 2N/d, gradient shards 2N/d (exist
from the first backward of a step until ``zero_grad``, which frees them), optimizer state 12N/d (fp32 master), 10N/d
(PAO remainders) or 6N/d (PAO + bf16 moments), allocated at the first ``optimizer_step``; transient: unsharded units
(see :mod:`mlite.runtime.fsdp`), the update's chunk temporaries (see :mod:`mlite.runtime.optim.optimizer`),
activations. ``memory_stats(handle)`` reports each part and, on CUDA, ``torch.cuda.max_memory_allocated()``.

dist_opt (per rank, d = DP x CP for dense parameters, EDP for experts): parameters 2N (replicated), the gradient
buffer 4N (fp32) or 2N (bf16), optimizer state 12N/d, 10N/d (PAO remainders) or 6N/d (+ bf16 moments) over the
real elements of the rank's buffer shard; without the distributed optimizer d = 1. Gradients are reduced in
``optimizer_step`` (or ``grad_norm``), parameters all-gathered after the update; ``zero_grad`` zeroes the buffers.

How close the measured bytes come to this accounting on a GPU: ``bench/gpu_validate.py`` and
``bench/results/gpu_memory.csv`` (figures live there and in the README, not here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..errors import MliteError
from ..options.optimizers import BACKENDS, load, runtime_class
from .config import RuntimeConfig
from .dist import init_distributed, resolve_device
from .fsdp import build_meshes, check_lite_parallel, expert_modules, expert_param_names
from .optim.clip import (
    LOCAL,
    clip_coefficient,
    clip_scale,
    global_norm_and_zeros,
    global_norm_tensor,
    global_zeros,
)
from .optim.offload import move_model, release_device_cache
from .optim.optimizer import ShardedAdamW, local
from .optim.schedule import LRScheduler

if TYPE_CHECKING:
    from .ddp import DDPBuffers
    from .parallel.cp import CPBatch
    from .parallel.state import Applied

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(eq=False)
class ModelHandle:
    """What ``build_model`` returns: the sharded model and its optimizer, scheduler and runtime."""

    runtime: LiteRuntime
    """The runtime that built it."""
    model: torch.nn.Module
    """The FSDP2-sharded model."""
    optimizer: ShardedAdamW
    """AdamW over the local shards."""
    scheduler: LRScheduler
    """Learning-rate schedule."""
    spec: Any = None
    """The ModelSpec (None for a custom model factory)."""

    @property
    def lr(self) -> float:
        """Learning rate the next optimizer step uses."""
        return self.scheduler.lr


class LiteRuntime:
    """One process's runtime: process group, device, meshes; builds the model handle."""

    def __init__(self, cfg: RuntimeConfig):
        self.cfg = cfg
        bc = cfg.backend_cfg
        check_lite_parallel(bc.parallel)
        self.backend = BACKENDS.entry(bc.optimizer_backend)
        """The optimizer backend's entry (:data:`mlite.options.optimizers.BACKENDS`)."""
        resolve_device(cfg.device)  # fail before touching the process group
        self.info = init_distributed(cfg.device, cfg.dist_timeout_s)
        self.device = self.info.device
        pd = cfg.param_dtype
        if pd == "auto":
            pd = "bf16" if self.device.type == "cuda" or bc.optimizer.pao else "fp32"
        self.param_dtype_name = pd
        self.param_dtype = _DTYPES[pd]
        self.pstate = build_meshes(bc.parallel, self.info.world_size, self.info.rank, self.device.type)
        self.dense_mesh, self.expert_mesh = self.pstate.fsdp_dense_mesh, self.pstate.fsdp_expert_mesh
        self.dp_group = self.pstate.dp_cp_group  # loss / token-count reduction: every rank's tokens differ
        self.edp_group = self.pstate.edp_group
        # expert shards differ over EDP and over EP: their norm is summed over the whole world
        self.expert_norm_group = self.edp_group if self.pstate.ep == 1 else dist.group.WORLD
        self.dp_size = self.dense_mesh.size()
        self.applied: Applied | None = None
        self.ddp: DDPBuffers | None = None
        """dist_opt: the parameter and gradient buffers (None for fsdp2)."""

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    # ------------------------------------------------------------------ build
    def _make_model(self):
        cfg = self.cfg
        if cfg.model_factory is not None:
            return cfg.model_factory(self.param_dtype, self.device, cfg.seed), None
        from ..models import ModelSpec, from_hf_config
        from .models import build_lite_model

        spec = cfg.hf_path if isinstance(cfg.hf_path, ModelSpec) else from_hf_config(cfg.hf_path)
        impl = cfg.backend_cfg.impl_cfg
        model = build_lite_model(
            spec,
            param_dtype=self.param_dtype,
            device=self.device,
            seed=cfg.seed,
            recompute=cfg.backend_cfg.recompute,
            moe_aux_loss_coeff=float(impl.get("moe_aux_loss_coeff", 0.0)),
        )
        return model, spec

    def build_model(self) -> ModelHandle:
        """Build the model (same weights on every rank), shard it and build the optimizer the way the backend's entry
        says (:data:`mlite.options.optimizers.BACKENDS`: FSDP2 or Megatron-Core DDP buffers) with the algorithm's
        runtime class (AdamW), and the schedule."""
        from .parallel import apply_parallelism

        model, spec = self._make_model()
        if self.pstate.ep > 1 and not expert_modules(model):
            raise MliteError(f"ep: EP {self.pstate.ep} needs a model with routed experts; use --ep 1 for a dense model")
        self.applied = apply_parallelism(model, self.pstate)
        if self.cfg.compile:
            compile_blocks(model)
        experts = expert_param_names(model)
        backend = self.cfg.backend_cfg.optimizer_backend  # the registry's entries build it (mlite.options)
        cls = runtime_class(self.cfg.optimizer.optimizer_algorithm, backend)
        opt: ShardedAdamW = load(BACKENDS.entry(backend).setup)(self, model, experts, cls)
        return ModelHandle(
            runtime=self, model=model, optimizer=opt, scheduler=LRScheduler(self.cfg.optimizer), spec=spec
        )

    # ------------------------------------------------------------------ pretrain tier
    def forward_backward(
        self,
        handle: ModelHandle,
        batch,
        loss_fn: Callable | None = None,
        num_microbatches: int | None = None,
        forward_only: bool = False,
    ) -> dict:
        """Run the micro-batches (forward + backward, or forward only); return global loss metrics.

        ``batch``: one PackedBatch (split into ``num_microbatches`` by whole sequences) or a list of PackedBatches
        (the micro-batches). ``loss_fn(model, micro_batch)`` returns the summed token loss (fp32 scalar) or
        ``(loss_sum, num_tokens)``; default ``model.loss``. The normaliser is counted from the batches (positions
        with a label other than -100 and ``loss_mask`` True, all micro-batches, all DP ranks), not from what
        ``loss_fn`` returns. Result: ``loss`` (mean over those tokens), ``num_tokens`` (their count),
        ``num_microbatches``.
        """
        mbs = _microbatches(batch, num_microbatches)
        cp = self.applied.cp if self.applied is not None else None
        metas: list[CPBatch | None] = [None] * len(mbs)
        if cp is not None:
            shares = [cp.split(mb.to("cpu")) for mb in mbs]
            mbs, metas = [mb for mb, _ in shares], [meta for _, meta in shares]
        tp = self.applied.tp if self.applied is not None else None
        if tp is not None and cp is None:  # (CP pads every sequence to a multiple of 2*CP*TP already)
            from .parallel.tp import pad_for_tp

            mbs = [pad_for_tp(mb.to("cpu"), tp.tp) for mb in mbs]
        if tp is not None:
            tp.pending = tp.pending or not forward_only
        counts = [_loss_tokens(mb) for mb in mbs]
        tok = torch.tensor([float(sum(counts))], dtype=torch.float64, device=self.device)
        if self.dp_size > 1:
            dist.all_reduce(tok, group=self.dp_group)
        global_tokens = int(tok.item())
        scale = self.dp_size / max(global_tokens, 1)
        model = handle.model
        fn = loss_fn or _model_loss
        loss_acc = torch.zeros((), dtype=torch.float64, device=self.device)
        with torch.no_grad() if forward_only else nullcontext():
            for mb, meta in zip(mbs, metas):
                with nullcontext() if meta is None or cp is None else cp.active(meta):
                    out = fn(model, mb.to(self.device, non_blocking=True))
                    loss_sum = out[0] if isinstance(out, (tuple, list)) else out
                    if not forward_only:
                        (loss_sum.float() * scale).backward()
                loss_acc += loss_sum.detach().double()
        if self.dp_size > 1:
            dist.all_reduce(loss_acc, group=self.dp_group)
        return {
            "loss": float(loss_acc) / max(global_tokens, 1),
            "num_tokens": global_tokens,
            "num_microbatches": len(mbs),
        }

    def train_step(
        self, handle: ModelHandle, batch, loss_fn: Callable | None = None, num_microbatches: int | None = None
    ) -> dict:
        """One optimizer step the Megatron way: forward_backward, optimizer_step, zero_grad, and (only when the
        update happened) lr_scheduler_step. Returns the metrics with ``ok``, ``grad_norm``, ``num_zeros`` and the
        ``lr`` the step used."""
        lr = handle.scheduler.lr
        out = self.forward_backward(handle, batch, loss_fn, num_microbatches)
        ok, norm, zeros = self.optimizer_step(handle)
        self.zero_grad(handle)
        if ok:
            self.lr_scheduler_step(handle)
        out.update(ok=ok, grad_norm=norm, num_zeros=zeros, lr=lr)
        return out

    def zero_grad(self, handle: ModelHandle) -> None:
        """Free the gradient shards (set to None); dist_opt: zero the gradient buffers (they stay allocated)."""
        handle.model.zero_grad(set_to_none=True)
        if self.ddp is not None:
            self.ddp.zero()
        zero_main = getattr(handle.optimizer, "zero_main_grad", None)  # mfsdp: the fp32 main_grad shards
        if zero_main is not None:
            zero_main()
        if self.applied is not None and self.applied.tp is not None:
            self.applied.tp.pending = False

    def _grad_groups(self, handle: ModelHandle) -> list:
        """``[(local grads, group)]`` whose squares sum to the global norm: dense over DP x CP, experts over EDP (or
        the world under EP), TP-split shards over the world; the TP-replicated partial grads are summed first."""
        if self.ddp is not None:
            return self._buffer_grad_groups(handle)
        tp = self.applied.tp if self.applied is not None else None
        if tp is not None:
            tp.reduce_partial_grads()  # once per step (it keeps a pending flag)
        dense: list[torch.Tensor | None] = []
        tp_split: list[torch.Tensor | None] = []
        expert: list[torch.Tensor | None] = []
        opt = handle.optimizer
        for s in opt.slots:
            g = opt._grad(s)  # the local gradient shard (mfsdp: its fp32 main_grad)
            if s.expert:
                expert.append(g)
            elif tp is not None and tp.is_split(s.name, s.param):
                tp_split.append(g)  # TP shards differ over TP as well: summed over DP x CP x TP
            else:
                dense.append(g)
        groups = [(dense, self.dp_group), (expert, self.expert_norm_group)]
        if tp_split:
            groups.append((tp_split, dist.group.WORLD))
        return groups

    def _buffer_groups(self) -> tuple[Any, Any, Any]:
        """dist_opt: the groups over which (dense, TP-split, expert) shard norms and zero counts are summed.

        With the distributed optimizer every rank holds a disjoint shard of the reduced buffers: dense shards
        differ over DP x CP (replicated over TP), TP-split shards over the whole world, expert shards over EDP and
        EP. Without it every rank holds the whole reduced buffer: only TP (split params) and EP (experts) differ."""
        ps = self.pstate
        if self.cfg.optimizer.use_distributed_optimizer:
            return self.dp_group, dist.group.WORLD, self.expert_norm_group
        return LOCAL, ps.tp_group if ps.tp > 1 else LOCAL, ps.ep_group if ps.ep > 1 else LOCAL

    def _buffer_grad_groups(self, handle: ModelHandle) -> list:
        """dist_opt: reduce the buffers (once per step), then ``[(shard grads, group)]`` as :meth:`_buffer_groups`."""
        assert self.ddp is not None
        self.ddp.sync()
        tp = self.applied.tp if self.applied is not None else None
        opt = handle.optimizer
        dense: list[torch.Tensor | None] = []
        tp_split: list[torch.Tensor | None] = []
        expert: list[torch.Tensor | None] = []
        for s in opt.slots:
            g = opt._grad(s)
            if s.expert:
                expert.append(g)
            elif tp is not None and tp.is_split(s.name, opt.full_params[s.name]):  # type: ignore[attr-defined]
                tp_split.append(g)
            else:
                dense.append(g)
        g_dense, g_split, g_expert = self._buffer_groups()
        groups = [(dense, g_dense), (expert, g_expert)]
        if tp_split:
            groups.append((tp_split, g_split))
        return groups

    def grad_norm(self, handle: ModelHandle) -> tuple[float, int]:
        """Global gradient L2 norm and zero count over all shards (collective)."""
        return global_norm_and_zeros(self._grad_groups(handle), self.device)

    def optimizer_step(self, handle: ModelHandle) -> tuple[bool, float, int]:
        """Clip on the global norm and update: ``(ok, grad_norm, num_zeros)``; ``ok=False`` (no update) when the
        norm is inf or nan. The norm is one fused multi-tensor pass; the zero count comes out of the update pass
        (a separate pass only when TP-split shards are present). dist_opt all-gathers the parameters after it."""
        groups = self._grad_groups(handle)
        opt = handle.optimizer
        if len(groups) > 2:  # TP-split shards: the update pass's per-group zero counts do not split by TP
            norm, zeros = global_norm_and_zeros(groups, self.device)
            if not math.isfinite(norm):
                return False, norm, zeros
            opt.step(lr=handle.scheduler.lr, clip_coef=clip_coefficient(norm, self.cfg.optimizer.clip_grad))
            if self.ddp is not None:
                self.ddp.gather_params()
            return True, norm, zeros
        # the norm, the clip scale and the update are queued without a host wait; the zero counts come out of
        # the update pass (also when the kernel skips the update on an inf/nan norm); one wait at the end
        norm_t = global_norm_tensor(groups, self.device)
        dense0, expert0 = opt.step_async(lr=handle.scheduler.lr, scale=clip_scale(norm_t, self.cfg.optimizer.clip_grad))
        zeros = global_zeros([(dense0, groups[0][1]), (expert0, groups[1][1])], self.device)
        norm = float(norm_t)
        if not math.isfinite(norm):
            opt.cancel_step()
            return False, norm, zeros
        if self.ddp is not None:
            self.ddp.gather_params()
        return True, norm, zeros

    def lr_scheduler_step(self, handle: ModelHandle, increment: int = 1) -> float:
        """Advance the schedule; return the learning rate of the next step."""
        return handle.scheduler.step(increment)

    def train_mode(self, handle: ModelHandle) -> None:
        handle.model.train()

    def eval_mode(self, handle: ModelHandle) -> None:
        handle.model.eval()

    # ------------------------------------------------------------------ rl tiers
    def export_weights(self, handle: ModelHandle, device="cpu") -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(name, full tensor)`` for every parameter (all-gathers: every rank must consume it)."""
        if self.ddp is not None:  # dist_opt: the slots are buffer ranges; the expert buffer names the parameters
            experts = {id(p) for b in self.ddp.buffers if b.expert for p in b.params}
        else:
            experts = {id(p) for s in handle.optimizer.slots if s.expert for p in [s.param]}
        for name, p in handle.model.named_parameters():
            full = p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
            tp = self.applied.tp if self.applied is not None else None
            if tp is not None and name in tp.sliced:  # hand-sliced TP heads -> the whole tensor
                full = tp.unslice(name, full.detach())
            if self.pstate.ep > 1 and id(p) in experts:  # this EP rank's experts -> all of them
                from .parallel.comm import all_gather_dim0

                full = all_gather_dim0(full.detach().contiguous(), self.pstate.ep_group, self.pstate.ep)
            yield name, full.detach().to(device)

    def to(self, handle: ModelHandle, device, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        """Runtime context offload: move parameters (with their gradients) and/or optimizer state.

        Gradients are attached to their FSDP2 parameters and move with them: ``grad`` must equal ``model`` unless
        the gradients are freed (after ``zero_grad``). State of update-offloaded parameters stays on CPU.
        """
        dev = torch.device(device) if str(device) == "cpu" else resolve_device(str(device), self.info.local_rank)
        has_grads = any(s.param.grad is not None for s in handle.optimizer.slots)
        if has_grads and bool(grad) != bool(model):
            raise MliteError(
                f"to(grad={grad}, model={model}): under FSDP2 gradients move with their parameters; "
                "pass grad=model, or call zero_grad(handle) first"
            )
        if self.ddp is not None:
            self.ddp.move(dev, params=model, grads=grad)
            handle.optimizer.rebind(self.ddp.pieces)  # type: ignore[attr-defined]
        elif model:
            move_model(handle.model, dev)
        if optimizer:
            handle.optimizer.move_state(dev)
        if dev.type == "cpu":
            release_device_cache(self.device)

    # ------------------------------------------------------------------ checkpoint
    def save_checkpoint(self, handle: ModelHandle, path) -> Path:
        """Save sharded model + optimizer state and the step counters (see :mod:`mlite.runtime.checkpoint`)."""
        from .checkpoint import save

        self._check_checkpoint_mesh("save_checkpoint")
        return save(handle, path)

    def load_checkpoint(self, handle: ModelHandle, path, load_optimizer: bool = True) -> None:
        """Load what :meth:`save_checkpoint` wrote (same optimizer storage layout)."""
        from .checkpoint import load

        self._check_checkpoint_mesh("load_checkpoint")
        load(handle, path, load_optimizer)

    def _check_checkpoint_mesh(self, what: str) -> None:
        if self.backend.fp32_main_buffers:
            raise MliteError(
                f"{what}: checkpoints of mfsdp runs are not implemented by the lite runtime (M-FSDP's "
                '{"gpu", "cpu"} envelope is not written); checkpoint an fsdp2 run'
            )
        if self.backend.grad_buffer:
            raise MliteError(
                f"{what}: checkpoints of {self.backend.name} runs are not implemented by the lite runtime (the "
                "optimizer state is a range of the gradient buffer, not per-parameter DTensors); checkpoint an fsdp2 run"
            )
        if self.pstate.ep > 1 or self.pstate.tp > 1:
            raise MliteError(
                f"{what}: checkpoints of EP > 1 or TP > 1 runs are not implemented by the lite runtime "
                "(the expert / tensor slices carry no global layout for DCP yet); checkpoint a "
                "data-parallel or CP run"
            )

    # ------------------------------------------------------------------ memory
    def memory_stats(self, handle: ModelHandle) -> dict:
        """Bytes held by this rank: parameter and gradient shards, optimizer state by kind (with devices), and the
        allocator's figures (``max_memory_allocated`` etc. on CUDA, process RSS)."""
        params = _tally(local(p) for p in handle.model.parameters())
        if self.ddp is not None:  # the main-grad views of the buffers (padding reported on its own)
            from .ddp import main_grad

            grads = _tally(main_grad(p) for p in self.ddp.by_name.values())
            extra = {k: v for k, v in self.ddp.memory().items() if k.endswith("padding")}
        elif hasattr(handle.optimizer, "main_grads"):  # mfsdp: the fp32 main_grad shards (held for the whole run)
            grads = _tally(handle.optimizer.main_grads())
            extra = {}
        else:
            grads = _tally(local(p.grad) for p in handle.model.parameters() if p.grad is not None)
            extra = {}
        opt = handle.optimizer.memory()
        out = {
            "params": params,
            "grads": grads,
            **extra,
            **opt,
            "optimizer_bytes": sum(v["bytes"] for v in opt.values()),
            "param_dtype": self.param_dtype_name,
            "device": str(self.device),
            "world_size": self.world_size,
            "mesh": self.pstate.to_dict(),
            "max_memory_allocated": None,
            "memory_allocated": None,
            "memory_reserved": None,
        }
        if self.device.type == "cuda":
            out["max_memory_allocated"] = torch.cuda.max_memory_allocated(self.device)
            out["memory_allocated"] = torch.cuda.memory_allocated(self.device)
            out["memory_reserved"] = torch.cuda.memory_reserved(self.device)
        try:
            import psutil

            out["cpu_rss"] = psutil.Process().memory_info().rss
        except ImportError:  # pragma: no cover - psutil is a dependency
            out["cpu_rss"] = None
        return out


def compile_blocks(model: torch.nn.Module) -> None:
    """``RuntimeConfig.compile``: replace each decoder block's ``forward`` by its ``torch.compile``d version (module
    identity and parameter names unchanged, so FSDP2 wraps the block as usual and its hooks run outside the graph)."""
    for block in getattr(model, "blocks", None) or []:
        block.forward = torch.compile(block.forward)


def _tally(tensors) -> dict:
    out: dict[str, Any] = {"bytes": 0, "numel": 0, "by_device": {}}
    for t in tensors:
        nb = t.numel() * t.element_size()
        out["bytes"] += nb
        out["numel"] += t.numel()
        out["by_device"][str(t.device)] = out["by_device"].get(str(t.device), 0) + nb
    return out


def _model_loss(model, mb):
    return model.loss(mb)


def _loss_tokens(mb) -> int:
    fn = getattr(mb, "num_loss_tokens", None)
    if callable(fn):
        return int(fn())
    return int((mb.labels != -100).sum())


def _microbatches(batch, num_microbatches: int | None) -> list:
    if isinstance(batch, (list, tuple)):
        if not batch:
            raise MliteError("forward_backward: empty list of micro-batches")
        if num_microbatches not in (None, len(batch)):
            raise MliteError(
                f"num_microbatches: {num_microbatches} given with a list of {len(batch)} micro-batches; "
                "pass num_microbatches=len(list) or one PackedBatch to split"
            )
        return list(batch)
    n = 1 if num_microbatches is None else num_microbatches
    return [batch] if n == 1 else batch.split(n)


# ---------------------------------------------------------------------------------------------- module-level API
def create_runtime(cfg: RuntimeConfig) -> LiteRuntime:
    """Start (or join) the process group and set up the meshes for ``cfg``."""
    if not isinstance(cfg, RuntimeConfig):
        raise MliteError(f"create_runtime: expected a RuntimeConfig, got {type(cfg).__name__}")
    return LiteRuntime(cfg)


def forward_backward(
    handle: ModelHandle,
    batch,
    loss_fn: Callable | None = None,
    num_microbatches: int | None = None,
    forward_only: bool = False,
) -> dict:
    return handle.runtime.forward_backward(handle, batch, loss_fn, num_microbatches, forward_only)


def train_step(
    handle: ModelHandle, batch, loss_fn: Callable | None = None, num_microbatches: int | None = None
) -> dict:
    return handle.runtime.train_step(handle, batch, loss_fn, num_microbatches)


def zero_grad(handle: ModelHandle) -> None:
    handle.runtime.zero_grad(handle)


def optimizer_step(handle: ModelHandle) -> tuple[bool, float, int]:
    return handle.runtime.optimizer_step(handle)


def lr_scheduler_step(handle: ModelHandle, increment: int = 1) -> float:
    return handle.runtime.lr_scheduler_step(handle, increment)


def to(handle: ModelHandle, device, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
    handle.runtime.to(handle, device, model=model, optimizer=optimizer, grad=grad)


def save_checkpoint(handle: ModelHandle, path) -> Path:
    return handle.runtime.save_checkpoint(handle, path)


def load_checkpoint(handle: ModelHandle, path, load_optimizer: bool = True) -> None:
    handle.runtime.load_checkpoint(handle, path, load_optimizer)


def train_mode(handle: ModelHandle) -> None:
    handle.runtime.train_mode(handle)


def eval_mode(handle: ModelHandle) -> None:
    handle.runtime.eval_mode(handle)


def export_weights(handle: ModelHandle, device="cpu") -> Iterator[tuple[str, torch.Tensor]]:
    return handle.runtime.export_weights(handle, device)


def memory_stats(handle: ModelHandle) -> dict:
    return handle.runtime.memory_stats(handle)
