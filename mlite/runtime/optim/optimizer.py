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

Allocation is lazy, as in Megatron-Core: the state appears at the first ``step()`` (or when a checkpoint with state is
loaded). The master starts as the exact fp32 value of the bf16 parameter (remainder 0). Transient memory of a step:
the update works through each local shard in flat chunks of at most :data:`CHUNK` elements, holding about eight fp32
temporaries of one chunk (~128 MiB), plus, for update-offloaded tensors, the chunk's CPU copies.

The bf16 parameter is always rewritten as :func:`~mlite.runtime.optim.master.round_bf16` of the new fp32 master (ties
away from zero) in both the fp32-master and the PAO mode, so the two modes are bitwise identical.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...errors import MliteError
from ..config import OptimizerConfig
from .adamw import AdamWHyper, adamw_chunk
from .master import merge_fp32, round_bf16, split_fp32
from .offload import offload_split

CHUNK = 1 << 22
"""Elements per update chunk (16 MiB per fp32 temporary)."""

STATE_KEYS = ("master", "remainder", "exp_avg", "exp_avg_sq")
"""Names of the per-element state tensors (``memory_stats`` reports them separately)."""

_TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


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
    """Flat state tensors by name (see :data:`STATE_KEYS`)."""


class ShardedAdamW:
    """AdamW over FSDP2 shards (see the module docstring for storage and memory)."""

    def __init__(self, named_params, cfg: OptimizerConfig, *, expert_names: set[str], device):
        self.cfg = cfg
        self.home = torch.device(device)
        """Device of the state of parameters that are not update-offloaded."""
        self.step_count = 0
        """Successful optimizer steps (bias-correction step ``t``)."""
        named = [(n, p) for n, p in named_params if p.requires_grad]
        flags = offload_split([p.numel() for _, p in named], cfg.fraction)
        self.slots: list[ParamSlot] = []
        for (name, p), off in zip(named, flags):
            self.slots.append(ParamSlot(name=name, param=p, expert=name in expert_names,
                                        decay=not (name.endswith(".bias") or p.dim() == 1),
                                        offload=off, mode=self._mode(name, p)))

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

    def init_state(self) -> None:
        """Allocate the state (idempotent); the master is the exact fp32 value of the current parameter."""
        for s in self.slots:
            if s.state:
                continue
            lp = local(s.param).detach().reshape(-1)
            dev, n = self.state_device(s), lp.numel()
            if s.mode == "master":
                s.state["master"] = lp.to(device=dev, dtype=torch.float32, copy=True)
            elif s.mode == "remainder":
                s.state["remainder"] = torch.zeros(n, dtype=torch.int16, device=dev)
            s.state["exp_avg"] = torch.zeros(n, dtype=_TORCH_DTYPE[self.cfg.exp_avg_dtype], device=dev)
            s.state["exp_avg_sq"] = torch.zeros(n, dtype=_TORCH_DTYPE[self.cfg.exp_avg_sq_dtype], device=dev)

    def move_state(self, device) -> None:
        """Runtime context offload: move the state of non-offloaded parameters to ``device`` (and allocate there)."""
        self.home = torch.device(device)
        for s in self.slots:
            dev = self.state_device(s)
            for k, t in s.state.items():
                if t.device != dev:
                    s.state[k] = t.to(dev)

    # ------------------------------------------------------------------ update
    @torch.no_grad()
    def step(self, lr: float, clip_coef: float = 1.0) -> None:
        """One AdamW step on every local shard (call only after a finite global grad norm)."""
        self.init_state()
        self.step_count += 1
        c = self.cfg
        for s in self.slots:
            h = AdamWHyper(lr=lr, beta1=c.betas[0], beta2=c.betas[1], eps=c.eps,
                           weight_decay=c.weight_decay if s.decay else 0.0, step=self.step_count,
                           decoupled=c.decoupled, clip_coef=clip_coef)
            self._update(s, h)

    def _update(self, s: ParamSlot, h: AdamWHyper) -> None:
        shard = local(s.param)
        if not shard.is_contiguous():  # FSDP2 shards are contiguous; a copy would silently drop the update
            raise RuntimeError(f"parameter {s.name}: local shard is not contiguous")
        lp = shard.view(-1)
        n = lp.numel()
        if n == 0:
            return
        grad = None if s.param.grad is None else local(s.param.grad).reshape(-1)
        m, v = s.state["exp_avg"], s.state["exp_avg_sq"]
        dev = m.device
        for a in range(0, n, CHUNK):
            b = min(a + CHUNK, n)
            p_c = lp[a:b]
            g_c = (torch.zeros(b - a, dtype=torch.float32, device=dev) if grad is None
                   else grad[a:b].to(dev))
            if s.mode == "param":
                new = adamw_chunk(p_c.to(dev), g_c, m[a:b], v[a:b], h)
                p_c.copy_(new)
            elif s.mode == "master":
                master = s.state["master"][a:b]
                new = adamw_chunk(master, g_c, m[a:b], v[a:b], h)
                master.copy_(new)
                p_c.copy_(round_bf16(new))
            else:
                rem = s.state["remainder"][a:b]
                new = adamw_chunk(merge_fp32(p_c.to(dev), rem), g_c, m[a:b], v[a:b], h)
                hi, r = split_fp32(new)
                rem.copy_(r)
                p_c.copy_(hi)

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
                    d[k] = DTensor.from_local(shaped, p.device_mesh, p.placements, run_check=False,
                                              shape=p.shape, stride=p.stride())
                else:
                    d[k] = t.view(p.shape)
            out[s.name] = d
        return out

    def memory(self) -> dict:
        """``{state_name: {"bytes", "numel", "by_device": {device: bytes}}}`` of the allocated state."""
        out = {k: {"bytes": 0, "numel": 0, "by_device": {}} for k in STATE_KEYS}
        for s in self.slots:
            for k, t in s.state.items():
                nb = t.numel() * t.element_size()
                e = out[k]
                e["bytes"] += nb
                e["numel"] += t.numel()
                e["by_device"][str(t.device)] = e["by_device"].get(str(t.device), 0) + nb
        return out
