"""``ShardedAdamW``: AdamW on the local FSDP2 shards, with mlite's storage and offload modes.

Per parameter (in model order, trainable ones only) the optimizer keeps flat 1-D state tensors of the *local shard's*
element count ``n`` (FSDP2 ``Shard(0)`` without padding):

====================================  ==========================================  =================
mode                                  state                                       bytes / element
====================================  ==========================================  =================
fp32 params                           exp_avg, exp_avg_sq (the param is master)   4 + 4
bf16 params, fp32 master (default)    master fp32, exp_avg, exp_avg_sq            4 + 4 + 4
bf16 params, PAO + remainders         remainder int16, exp_avg, exp_avg_sq        2 + 4 + 4
  ... + ``exp_avg(_sq)_dtype=bf16``   remainder int16, exp_avg bf16, exp_avg_sq   2 + 2 + 2
====================================  ==========================================  =================

plus the parameter shard (2 B bf16 / 4 B fp32) and its gradient shard (same dtype as the parameter, FSDP2 casts the
fp32-reduced gradient back), i.e. 16 / 14 / 10 bytes per parameter for bf16 runs, 16 for fp32 runs (divided by the
FSDP group size for the per-rank figure).

Flat per-group buffers: parameters that share the state device, the storage mode, weight decay and the expert flag
form a :class:`StateGroup`; each state kind of a group is one flat buffer and every slot's state tensor is a view of
its range (so ``slot.state`` keeps its per-parameter shape for checkpoints and memory accounting, and a move is one
copy per buffer). Allocation is lazy, as in Megatron-Core: the state appears at the first ``step()`` (or when a
checkpoint with state is loaded). The master starts as the exact fp32 value of the bf16 parameter (remainder 0).

How a group is updated (chosen from where its state and parameters live):

* device state on CUDA with Triton: the fused kernel of :mod:`.fused`, one launch per group over all its shards (a
  cached device table of shard addresses), one pass over the memory (merge the remainder, clip scale, AdamW, write
  the bf16 param and the remainder or the master); the clip scale and the finite flag come from device memory
  (:meth:`ShardedAdamW.step_async`), so the step never waits for the grad norm;
* CPU state with the parameters on another device (``offload_fraction``): the group's gradients (and, for PAO, the bf16
  params) are copied into a pinned host buffer of the group, the update runs over the flat group buffers on the host
  in spans of whole shards of at least :data:`CHUNK` elements as the gradients land, one pass per span with the C
  kernel of :mod:`.host_fused` (or the eager chunks of :mod:`.host` where it does not build), and each span's new
  parameters are copied back asynchronously while the next span is updated. Extra host memory: one gradient and one
  parameter copy of the offloaded parameters;
* otherwise (CPU runs, CUDA without Triton): the same update per shard (the C kernel on CPU, else eager torch ops
  chunk by chunk); :meth:`ShardedAdamW._host_c` is the one rule for the host path.

All three evaluate the same operation sequence (:mod:`.adamw`), so the storage modes, the offload split and the
device that runs the update do not change a bit of the result. The bf16 parameter is always written as
:func:`~mlite.runtime.optim.master.round_bf16` of the new fp32 master (ties away from zero) in both the fp32-master
and the PAO mode, so the two modes are bitwise identical.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ...errors import MliteError
from ...memory.optimizer import UPDATE_CHUNK
from ..config import OptimizerConfig
from . import fused, host, host_fused
from .adamw import AdamWHyper, StepScalars, step_scalars
from .master import merge_fp32
from .offload import offload_split

STATE_ALIGN = 8
"""Elements a GPU state group aligns each shard's start to (16 bytes of fp32 state)."""
CHUNK = UPDATE_CHUNK
"""Elements per chunk of the torch-op update (4 MiB per fp32 work buffer)."""

STATE_KEYS = ("master", "remainder", "exp_avg", "exp_avg_sq")
"""Names of the per-element state tensors (``memory_stats`` reports them separately)."""

_TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}
_MODE_ID = {"param": fused.MODE_PARAM, "master": fused.MODE_MASTER, "remainder": fused.MODE_REMAINDER}


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    """A gradient as the kernel reads it (FSDP2's are contiguous already; a copy is only read)."""
    return t if t.is_contiguous() else t.contiguous()


def local(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor (aliasing its storage), or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


@dataclass(slots=True)
class ParamSlot:
    """One trainable parameter and its optimizer state."""

    name: str
    """Parameter name in the model."""
    param: torch.nn.Parameter
    """The (FSDP2 DTensor) parameter."""
    expert: bool
    """Held by an ``experts`` module (sharded over EDP)."""
    decay: bool
    """Weight decay applies (not a bias, not 1-D)."""
    offload: bool
    """Update-state offload: state on CPU, update on CPU."""
    mode: str
    """``param`` (fp32 params), ``master`` (fp32 master copy) or ``remainder`` (PAO int16 remainders)."""
    state: dict = field(default_factory=dict)
    """Flat state tensors by name (see :data:`STATE_KEYS`), views of the group's buffers."""


@dataclass(slots=True)
class StateGroup:
    """Slots updated together: same state placement, storage mode, weight decay and expert flag."""

    slots: list[ParamSlot]
    """Members, in model order."""
    offsets: list[int]
    """Start of each member's range in the flat buffers."""
    numel: int
    """Total local elements."""
    offload: bool
    """State on CPU (update-state offload)."""
    mode: str
    """Storage mode of every member."""
    decay: bool
    """Weight decay applies to every member."""
    expert: bool
    """Members are expert parameters."""
    bufs: dict = field(default_factory=dict)
    """Flat state buffers by name."""
    staging: dict = field(default_factory=dict)
    """Host copies (gradient, parameter) of an offloaded group whose parameters are on another device."""
    launch: Any = None
    """The group's cached :class:`~.fused.MultiTensorLaunch` (device groups on the Triton path)."""
    work: dict = field(default_factory=dict)
    """Work buffers of the torch-op update (allocated once, reused every step)."""


class ShardedAdamW:
    """AdamW over FSDP2 shards (see the module docstring for storage, grouping and the update paths)."""

    def __init__(self, named_params, cfg: OptimizerConfig, *, expert_names: set[str], device, kernel: str = "auto"):
        if kernel not in ("auto", "triton", "torch"):
            raise ValueError(f"kernel {kernel!r}: use auto, triton or torch")
        self.cfg = cfg
        self.kernel = kernel
        """Update path of device-resident groups: ``auto`` (Triton on CUDA when installed), ``triton`` (always; on
        CPU tensors only under ``TRITON_INTERPRET=1``, for tests) or ``torch``."""
        self.host_kernel = "auto"
        """Update path of host tensors (CPU runs, ``offload_fraction``): ``auto`` (the one-pass C kernel of
        :mod:`.host_fused` when it builds, else eager torch ops), ``c`` or ``torch``."""
        self.home = torch.device(device)
        """Device of the state of parameters that are not update-offloaded."""
        self.step_count = 0
        """Successful optimizer steps (bias-correction step ``t``)."""
        named = [(n, p) for n, p in named_params if p.requires_grad]
        flags = offload_split([p.numel() for _, p in named], cfg.fraction)
        self.slots: list[ParamSlot] = []
        for (name, p), off in zip(named, flags):
            self.slots.append(
                ParamSlot(
                    name=name,
                    param=p,
                    expert=name in expert_names,
                    decay=not (name.endswith(".bias") or p.dim() == 1),
                    offload=off,
                    mode=self._mode(name, p),
                )
            )
        self.groups: list[StateGroup] = []
        """State groups (built with the state)."""
        self.last_zeros: tuple[int, int] = (0, 0)
        """Local zero-gradient counts ``(dense, expert)`` of the last :meth:`step`."""

    def _mode(self, name: str, p: torch.Tensor) -> str:
        if p.dtype == torch.float32:
            return "param"
        if p.dtype != torch.bfloat16:
            raise MliteError(f"param_dtype: parameter {name} is {p.dtype}; the lite runtime stores fp32 or bf16")
        return "remainder" if self.cfg.pao and self.cfg.store_param_remainders else "master"

    # ------------------------------------------------------------------ state
    @property
    def initialized(self) -> bool:
        return bool(self.slots) and bool(self.slots[0].state)

    def state_device(self, slot: ParamSlot) -> torch.device:
        return torch.device("cpu") if slot.offload else self.home

    def _group_device(self, g: StateGroup) -> torch.device:
        return torch.device("cpu") if g.offload else self.home

    def init_state(self) -> None:
        """Allocate the state (idempotent); the master is the exact fp32 value of the current parameter."""
        if self.initialized:
            return
        by_key: dict = {}
        for s in self.slots:
            by_key.setdefault((s.offload, s.mode, s.decay, s.expert), []).append(s)
        self.groups = []
        for (off, mode, decay, expert), slots in by_key.items():
            # on a GPU each shard's state starts on a multiple of STATE_ALIGN elements: the kernel's state
            # accesses are then 16-byte vectors (at most STATE_ALIGN - 1 unused elements per shard, not counted
            # in memory(): see padding_numel); on the host the buffers are exactly the shards
            align = self._state_align(torch.device("cpu") if off else self.home)
            offsets, n = [], 0
            for s in slots:
                offsets.append(n)
                n += -(-local(s.param).numel() // align) * align
            g = StateGroup(slots=slots, offsets=offsets, numel=n, offload=off, mode=mode, decay=decay, expert=expert)
            dev = self._group_device(g)
            if mode == "master":
                g.bufs["master"] = torch.empty(n, dtype=torch.float32, device=dev)
            elif mode == "remainder":
                g.bufs["remainder"] = torch.zeros(n, dtype=torch.int16, device=dev)
            g.bufs["exp_avg"] = torch.zeros(n, dtype=_TORCH_DTYPE[self.cfg.exp_avg_dtype], device=dev)
            g.bufs["exp_avg_sq"] = torch.zeros(n, dtype=_TORCH_DTYPE[self.cfg.exp_avg_sq_dtype], device=dev)
            self._bind(g)
            if mode == "master":
                for s in slots:
                    s.state["master"].copy_(local(s.param).detach().reshape(-1))
            self.groups.append(g)

    @staticmethod
    def _bind(g: StateGroup) -> None:
        """Point every member's state at its range of the group buffers."""
        for s, a in zip(g.slots, g.offsets):
            n = local(s.param).numel()
            s.state = {k: buf[a : a + n] for k, buf in g.bufs.items()}

    def move_state(self, device) -> None:
        """Runtime context offload: move the state of non-offloaded parameters to ``device`` (and allocate there)."""
        self.home = torch.device(device)
        for g in self.groups:
            dev = self._group_device(g)
            if any(t.device != dev for t in g.bufs.values()):
                g.bufs = {k: t.to(dev) for k, t in g.bufs.items()}
                g.launch, g.work = None, {}
                self._bind(g)

    # ------------------------------------------------------------------ update
    @torch.no_grad()
    def step(self, lr: float, clip_coef: float = 1.0) -> tuple[int, int]:
        """One AdamW step on every local shard (call only after a finite global grad norm); returns the local
        zero-gradient counts ``(dense, expert)``."""
        dense, expert = self.step_async(lr, fused.scale_tensor(clip_coef, self.home))
        self.last_zeros = (int(dense), int(expert))
        return self.last_zeros

    @torch.no_grad()
    def step_async(self, lr: float, scale: torch.Tensor) -> tuple[torch.Tensor | int, torch.Tensor | int]:
        """One AdamW step without a host wait on device-resident groups. ``scale``: fp32 ``[clip_coef, finite]``
        on the home device (:func:`.clip.clip_scale`); where ``finite`` is 0 nothing is updated (the caller then
        calls :meth:`cancel_step`). Returns the local zero-gradient counts ``(dense, expert)`` (device scalars or
        ints); they are counted whether or not the update applies. Host groups (CPU runs, ``offload_fraction``)
        read the scale on the host, after every device kernel and staging copy is queued."""
        self.init_state()
        self.step_count += 1
        c = self.cfg
        counts: dict = {False: [], True: []}
        later = []
        for g in self.groups:
            h = AdamWHyper(
                lr=lr,
                beta1=c.betas[0],
                beta2=c.betas[1],
                eps=c.eps,
                weight_decay=c.weight_decay if g.decay else 0.0,
                step=self.step_count,
                decoupled=c.decoupled,
            )
            dev = self._group_device(g)
            pdev = local(g.slots[0].param).device
            if self._fused(dev) and dev.type == pdev.type:
                counts[g.expert].append(self._update_fused(g, step_scalars(h), scale.to(dev, non_blocking=True)))
            elif self._staged(g):
                later.append((g, h, "staged", self._stage_in(g)))
            else:
                later.append((g, h, "torch", None))
        if later:  # host updates after every device kernel and copy is queued
            clip, finite = scale.tolist()
            for g, h, kind, event in later:
                sc = step_scalars(replace(h, clip_coef=clip))
                if kind == "torch":
                    counts[g.expert].append(self._update_torch(g, sc, finite != 0.0))
                else:
                    counts[g.expert].append(self._update_staged(g, sc, event, finite != 0.0))
        return sum(counts[False], 0), sum(counts[True], 0)

    def cancel_step(self) -> None:
        """Undo the step count of a :meth:`step_async` whose ``finite`` flag was 0 (nothing was updated)."""
        self.step_count -= 1

    def _staged(self, g: StateGroup) -> bool:
        """The group's state is on the host and its parameters elsewhere: staged host update."""
        return self._group_device(g).type != local(g.slots[0].param).device.type

    def _fused(self, dev: torch.device) -> bool:
        if self.kernel == "auto":
            return dev.type == "cuda" and fused.HAVE_TRITON
        return self.kernel == "triton"

    @staticmethod
    def _shard(s: ParamSlot) -> torch.Tensor:
        shard = local(s.param)
        if not shard.is_contiguous():  # FSDP2 shards are contiguous; a copy would silently drop the update
            raise RuntimeError(f"parameter {s.name}: local shard is not contiguous")
        return shard.view(-1)

    @staticmethod
    def _grad(s: ParamSlot) -> torch.Tensor | None:
        return None if s.param.grad is None else local(s.param.grad).reshape(-1)

    def _update_fused(self, g: StateGroup, sc: StepScalars, scale: torch.Tensor) -> torch.Tensor:
        """Triton: one launch over the group's shards; returns the group's zero count (a device scalar)."""
        params = [local(s.param) for s in g.slots]
        if g.launch is None:
            g.launch = fused.MultiTensorLaunch([p.numel() for p in params], g.offsets, g.bufs["exp_avg"].device)
        grads = [None if (x := self._grad(s)) is None else _contiguous(x) for s in g.slots]  # dist_opt: buffer views
        key = "master" if g.mode == "master" else "remainder" if g.mode == "remainder" else None
        w = g.bufs[key] if key else None
        return g.launch(params, grads, w, g.bufs["exp_avg"], g.bufs["exp_avg_sq"], _MODE_ID[g.mode], sc, scale)

    @staticmethod
    def _work_for(g: StateGroup, n: int, device) -> dict:
        """The group's cached work buffers for chunks of up to ``n`` elements on ``device``."""
        key = (str(device), n)
        if g.work.get("key") != key:
            g.work = {"key": key, "bufs": host.work_buffers(n, device)}
        return g.work["bufs"]

    def _update_torch(self, g: StateGroup, sc: StepScalars, apply: bool = True):
        """Torch ops on the shard's own device, chunk by chunk (CPU runs; CUDA without Triton)."""
        zeros: torch.Tensor | int = 0
        work = None
        for s in g.slots:
            lp, grad = self._shard(s), self._grad(s)
            n = lp.numel()
            if grad is not None and n:
                zeros = zeros + (n - torch.count_nonzero(grad))
            if not apply:
                continue
            if self._host_c(lp, grad, s.state):
                host_fused.update_range(g.mode, lp, grad, s.state, 0, n, sc)
                continue
            if work is None:
                work = self._work_for(g, min(CHUNK, max(local(x.param).numel() for x in g.slots)), lp.device)
            for a in range(0, n, CHUNK):
                b = min(a + CHUNK, n)
                host.update_chunk(g.mode, lp[a:b], None if grad is None else grad[a:b], s.state, a, b, sc, work)
        return zeros

    def _stage_in(self, g: StateGroup):
        """Queue the copies of an offloaded group's gradients (and PAO / fp32 params) into pinned host buffers and
        count the zero gradients where they are (on the device: no host pass). Returns ``(zero count, events)``;
        ``events``: ``[(start offset, event)]`` per shard on CUDA (the host update starts on a chunk as soon as the
        copies it needs have landed), else None."""
        pdtype = local(g.slots[0].param).dtype
        if not g.staging:
            pin = torch.cuda.is_available()
            g.staging = {k: torch.empty(g.numel, dtype=pdtype, pin_memory=pin) for k in ("grad", "param")}
        gs, ps = g.staging["grad"], g.staging["param"]
        cuda = torch.cuda.is_available() and local(g.slots[0].param).is_cuda
        events: list = []
        zeros: torch.Tensor | int = 0
        for s, a in zip(g.slots, g.offsets):
            lp, grad = self._shard(s), self._grad(s)
            n = lp.numel()
            if grad is None:
                gs[a : a + n].zero_()
            else:
                gs[a : a + n].copy_(grad, non_blocking=True)
                if n:
                    zeros = zeros + (n - torch.count_nonzero(grad))
            if g.mode != "master":
                ps[a : a + n].copy_(lp, non_blocking=True)
            if cuda and n:
                ev = torch.cuda.Event()
                ev.record()
                events.append((a, ev))
        return zeros, (events if cuda else None)

    def _update_staged(self, g: StateGroup, sc: StepScalars, staged, apply: bool = True):
        """Host update of an offloaded group over its flat buffers, chunk by chunk as its gradients land; each
        shard's new parameters are copied back as soon as its last chunk is done. Returns the zero count."""
        zeros, events = staged
        pending = list(events or [])
        if apply and self._host_c(g.staging["param"], g.staging["grad"], g.bufs):
            self._update_staged_c(g, sc, pending)
        elif apply:
            gs, ps = g.staging["grad"], g.staging["param"]
            work = self._work_for(g, min(CHUNK, g.numel), "cpu")
            ends = [a + local(s.param).numel() for s, a in zip(g.slots, g.offsets)]
            back = 0  # next slot to copy back
            for a in range(0, g.numel, CHUNK):
                b = min(a + CHUNK, g.numel)
                while pending and pending[0][0] < b:  # every shard that starts before b has landed
                    pending.pop(0)[1].synchronize()
                host.update_chunk(g.mode, ps[a:b], gs[a:b], g.bufs, a, b, sc, work)
                while back < len(g.slots) and ends[back] <= b:
                    self._copy_back(g, back)
                    back += 1
        for _, ev in pending:
            ev.synchronize()
        return zeros

    def _update_staged_c(self, g: StateGroup, sc: StepScalars, pending: list) -> None:
        """The one-pass kernel over spans of whole shards of at least :data:`CHUNK` elements: a span starts once
        its shards' gradients have landed, and its shards are copied back (asynchronously) when it ends, so the
        copies of one span overlap the update of the next."""
        gs, ps = g.staging["grad"], g.staging["param"]
        ends = [a + local(s.param).numel() for s, a in zip(g.slots, g.offsets)]
        start, first = 0, 0
        for i, end in enumerate(ends):
            if end - start < CHUNK and i + 1 < len(ends):
                continue
            while pending and pending[0][0] < end:
                pending.pop(0)[1].synchronize()
            if end > start:
                host_fused.update_range(g.mode, ps[start:end], gs[start:end], g.bufs, start, end, sc)
            for j in range(first, i + 1):
                self._copy_back(g, j)
            start, first = end, i + 1

    def _host_c(self, p: torch.Tensor, grad: torch.Tensor | None, state: dict) -> bool:
        """The host update's path for these tensors under :attr:`host_kernel` (:func:`.host_fused.takes`)."""
        return host_fused.takes(self.host_kernel, p, grad, state)

    def _copy_back(self, g: StateGroup, i: int) -> None:
        s, a = g.slots[i], g.offsets[i]
        lp = self._shard(s)
        lp.copy_(g.staging["param"][a : a + lp.numel()], non_blocking=True)

    # ------------------------------------------------------------------ introspection / checkpoint
    def master_weight(self, s: ParamSlot) -> torch.Tensor:
        """The fp32 master of a slot's local shard (rebuilt for PAO; the param itself for fp32 params)."""
        lp = local(s.param).detach().reshape(-1)
        if s.mode == "param":
            return lp.float()
        if not s.state:
            return lp.float()
        if s.mode == "master":
            return s.state["master"]
        return merge_fp32(lp.to(s.state["remainder"].device), s.state["remainder"])

    def state_dtensors(self) -> dict:
        """``{param_name: {state_name: DTensor}}`` sharing storage with the state (for torch.distributed.checkpoint)."""
        from torch.distributed.tensor import DTensor

        out = {}
        for s in self.slots:
            p, d = s.param, {}
            for k, t in s.state.items():
                if isinstance(p, DTensor):
                    shaped = t.view(local(p).shape)
                    d[k] = DTensor.from_local(
                        shaped, p.device_mesh, p.placements, run_check=False, shape=p.shape, stride=p.stride()
                    )
                else:
                    d[k] = t.view(p.shape)
            out[s.name] = d
        return out

    @staticmethod
    def _state_align(device: torch.device) -> int:
        """Alignment (elements) of each shard's start in a state group on ``device``."""
        return STATE_ALIGN if device.type == "cuda" else 1

    @property
    def padding_numel(self) -> int:
        """Elements of the group buffers between shards (the GPU alignment of each shard's state; 0 on the host)."""
        return sum(g.numel - sum(local(x.param).numel() for x in g.slots) for g in self.groups)

    def memory(self) -> dict:
        """``{state_name: {"bytes", "numel", "by_device": {device: bytes}}}`` of the allocated state."""
        out: dict[str, dict[str, Any]] = {k: {"bytes": 0, "numel": 0, "by_device": {}} for k in STATE_KEYS}
        for s in self.slots:
            for k, t in s.state.items():
                nb = t.numel() * t.element_size()
                e = out[k]
                e["bytes"] += nb
                e["numel"] += t.numel()
                e["by_device"][str(t.device)] = e["by_device"].get(str(t.device), 0) + nb
        return out
