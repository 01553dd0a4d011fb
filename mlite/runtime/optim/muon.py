"""``DistributedMuon``: Muon on this rank's shard of the DDP buffers, AdamW for the rest (``optimizer dist_opt``).

Which parameters Muon updates: trainable tensors of two or more dimensions that are not the embedding or the output
layer (ISEEKYAN/Megatron-LM ``experimental/lite/megatron/lite/primitive/optimizers/muon_routing.py`` @ 7bafd490;
the router's 2-D weight included; stacked routed experts ``(experts, out, in)`` are one matrix per expert); the rest
(embedding, output layer, norms, biases, 1-D tensors) run :class:`~mlite.runtime.optim.distributed.DistributedAdamW`
unchanged (``muon_scalar_optimizer="adam"``).

The update of one matrix (Emerging-Optimizers ``OrthogonalizedOptimizer.step`` @ 116b71a4 with Megatron-Core's
``TensorParallelMuon`` scale, NVIDIA/Megatron-LM ``megatron/core/optimizer/muon.py`` @ 025c931a):

1. g = this rank's range of the reduced gradient (fp32) x the clip coefficient;
2. decoupled weight decay on the fp32 master: w -= lr x weight_decay x w;
3. momentum (fp32, this rank's range only: the distributed optimizer shards it like Adam's moments):
   m = lerp(m, g, 1 - momentum); the update u = lerp(g, m, momentum) with Nesterov, else m;
4. the FULL matrix of u: every rank writes its range into a zero fp32 matrix and the buffer's group sums it
   (the ranges are disjoint; Megatron Lite gathers the owner's matrix in its compact LayerWise layout);
5. O = Newton-Schulz(u) (:mod:`.newton_schulz`), w -= lr x sqrt(max(rows, cols)) x extra_scale x O on the range,
   the bf16 parameter = round_bf16(w).

``muon_match_adamw_update_rms`` sets ``extra_scale = sqrt((1 - beta1) / (1 + beta1))`` with AdamW's ``betas[0]``
(ISEEKYAN/Megatron-LM ``experimental/lite/examples/muon/README.md`` @ 045fc78a). Matrices are processed one at a
time, in buffer order (the same on every rank); the scaled gradient, the momentum and the update are written in
place into the matrix's range of its zero fp32 full matrix, which is freed after Newton-Schulz, the result after the
master's update, and the zero count and ``round_bf16`` run :data:`~mlite.runtime.optim.optimizer.CHUNK` elements at a
time, so the step's extra memory is one tensor's Newton-Schulz workspace
(:func:`mlite.memory.muon.ns_workspace_bytes`, x the experts of a stack) or one chunk's rounding temporaries,
whichever is larger (:func:`mlite.memory.muon.lite_step_bytes`, which the estimate takes). State per shard element:
Muon matrices ``exp_avg`` (the momentum) + ``master``; the rest AdamW's. TP > 1 is refused (the TP block would
need its own gather).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ...errors import MliteError
from ...options.rules import adamw_matching_scale
from ..config import OptimizerConfig
from .distributed import DistributedAdamW
from .master import round_bf16
from .newton_schulz import newton_schulz, spectral_scale
from .optimizer import CHUNK

EMBEDDING_OR_OUTPUT = ("embed.weight", "lm_head.weight")
"""The lite model's embedding and output-layer parameters (``is_embedding_or_output_parameter``)."""


def is_muon_param(name: str, p: torch.Tensor) -> bool:
    """Muon updates ``p``: two or more dimensions and not the embedding or the output layer."""
    return p.dim() >= 2 and name not in EMBEDDING_OR_OUTPUT


def _local(t: torch.Tensor) -> torch.Tensor:
    return t._local_tensor if hasattr(t, "_local_tensor") else t


class DistributedMuon(DistributedAdamW):
    """Muon for the matrices, AdamW for the rest, on the buffers' shards (see the module docstring)."""

    needs_buffers = True
    """The backend passes the DDP buffers (every rank takes part in every matrix's sum)."""

    def __init__(self, pieces, cfg: OptimizerConfig, *, device, buffers, kernel: str = "auto"):
        super().__init__(pieces, cfg, device=device, kernel=kernel)
        self.matrices: list[tuple] = []
        """``(buffer, name, param, start)`` of every Muon matrix, in buffer order (this rank's piece or not)."""
        for b in buffers:
            for name, p, a in zip(b.names, b.params, b.starts):
                if p.requires_grad and is_muon_param(name, _local(p)):
                    self.matrices.append((b, name, p, a))
        names = {m[1] for m in self.matrices}
        self.muon_slots = [s for s in self.slots if s.name in names]
        """This rank's pieces of Muon matrices."""
        self.adam_slots = [s for s in self.slots if s.name not in names]
        """The pieces AdamW updates."""
        self.offsets = {x.name: x.param_shard.storage_offset() - _local(x.param).storage_offset() for x in pieces}
        """Slot name -> start of its piece inside its parameter."""
        c = cfg
        self.extra_scale = (
            adamw_matching_scale(c.betas[0]) if c.muon_match_adamw_update_rms else c.muon_extra_scale_factor
        )
        """The extra scale factor in effect."""

    # ------------------------------------------------------------------ state
    def init_state(self) -> None:
        """AdamW's state for its pieces (the parent's groups), then an fp32 momentum (``exp_avg``) and, for bf16
        parameters, an fp32 master per Muon piece."""
        if self.initialized:
            return
        every = self.slots
        self.slots = self.adam_slots
        try:
            super().init_state()
        finally:
            self.slots = every
        for s in self.muon_slots:
            n = s.param.numel()
            s.state = {"exp_avg": torch.zeros(n, dtype=torch.float32, device=self.home)}
            if s.mode == "master":
                s.state["master"] = s.param.detach().reshape(-1).float().clone()
            elif s.mode != "param":
                raise MliteError(f"optimizer: muon keeps an fp32 master for {s.name} (no PAO remainders); drop --pao")

    @property
    def initialized(self) -> bool:
        return all(bool(s.state) for s in self.slots) if self.slots else False

    def move_state(self, device) -> None:
        super().move_state(device)
        for s in self.muon_slots:
            s.state = {k: t.to(self.home) for k, t in s.state.items()}

    # ------------------------------------------------------------------ update
    @torch.no_grad()
    def step_async(self, lr: float, scale: torch.Tensor):
        self.init_state()
        dense, expert = super().step_async(lr, scale)
        clip, finite = scale.tolist()
        by_name = {s.name: s for s in self.muon_slots}
        zeros = {False: dense, True: expert}
        c = self.cfg
        for b, name, p, _start in self.matrices:
            s = by_name.get(name)
            shape = tuple(_local(p).shape)
            full: torch.Tensor | None = None
            if s is not None:
                zeros[s.expert] = zeros[s.expert] + count_zeros(self.grads[name])
            if not finite:
                continue
            if s is not None or b.distributed:
                full = torch.zeros(_local(p).numel(), dtype=torch.float32, device=b.grad_data.device)
            if s is not None:
                assert full is not None
                off = self.offsets[name]
                u = full[off : off + s.param.numel()]  # g, then the update, built in place in the matrix's range
                u.copy_(self.grads[name])
                u.mul_(clip)
                m = s.state["exp_avg"]
                m.lerp_(u, 1.0 - c.muon_momentum)
                if c.muon_nesterov:
                    u.lerp_(m, c.muon_momentum)
                else:
                    u.copy_(m)
                del u
            if b.distributed and b.size > 1:
                dist.all_reduce(full, group=b.group)
            if s is None or full is None:
                continue
            o = newton_schulz(full.view(shape), c.muon_num_ns_steps, c.muon_coefficient_type, c.muon_fp32_matmul_prec)
            del full
            off, n = self.offsets[name], s.param.numel()
            w = s.state["master"] if s.mode == "master" else s.param
            if c.weight_decay and s.decay:
                w.mul_(1.0 - lr * c.weight_decay) if s.mode == "master" else w.add_(w, alpha=-lr * c.weight_decay)
            step = spectral_scale(shape[-2], shape[-1], self.extra_scale)
            w.add_(o.reshape(-1)[off : off + n], alpha=-lr * step)
            del o
            if s.mode == "master":
                for x in range(0, n, CHUNK):  # round_bf16's integer temporaries for one chunk at a time
                    y = min(x + CHUNK, n)
                    s.param[x:y].copy_(round_bf16(w[x:y]))
        return zeros[False], zeros[True]


def count_zeros(g: torch.Tensor) -> torch.Tensor | int:
    """Elements of ``g`` equal to zero, counted :data:`~mlite.runtime.optim.optimizer.CHUNK` elements at a time:
    on CUDA ``torch.count_nonzero`` builds a bool mask and an int64 copy of it (9 bytes per element: the H200 row's
    mfsdp offload arms showed 9 x the embedding's 67,108,864 elements over the steady state), so a whole matrix at
    once would cost 9 bytes per element of the largest one."""
    flat = g.reshape(-1)
    z: torch.Tensor | int = 0
    for x in range(0, flat.numel(), CHUNK):
        part = flat[x : x + CHUNK]
        z = z + (part.numel() - torch.count_nonzero(part))
    return z
