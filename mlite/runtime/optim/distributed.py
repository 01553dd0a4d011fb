"""``DistributedAdamW``: AdamW on this rank's shard of the DDP buffers (Megatron-Core's ``DistributedOptimizer``).

Each trainable parameter that intersects the rank's shard range of its buffer (:mod:`mlite.runtime.ddp`) is one
slot whose "parameter" is the flat view of ``param_data`` over the intersection and whose gradient is the same range
of ``grad_data`` (fp32 or bf16 main grads, read as they are: the update widens them to fp32 chunk by chunk, and PAO
reads the bf16 buffer directly, Megatron's ``decoupled_grad``). The state kinds, storage modes (fp32 master, PAO int16
remainders, bf16 moments), grouping and update paths are :class:`~mlite.runtime.optim.optimizer.ShardedAdamW`'s, so
the same operation sequence runs and PAO stays bitwise equal to the fp32 master. State exists only for the real
elements of the shard (none for the buffers' padding). Without the distributed optimizer the shard is the whole
buffer: every rank keeps the full state.
"""

from __future__ import annotations

import torch

from ..config import OptimizerConfig
from .optimizer import ParamSlot, ShardedAdamW


class DistributedAdamW(ShardedAdamW):
    """AdamW over buffer shards: ``pieces`` are :class:`mlite.runtime.ddp.ShardPiece` (see the module docstring)."""

    def __init__(self, pieces, cfg: OptimizerConfig, *, device, kernel: str = "auto"):
        super().__init__([], cfg, expert_names=set(), device=device, kernel=kernel)
        self.grads: dict[str, torch.Tensor] = {}
        """Slot name -> its range of the gradient buffer."""
        self.full_params: dict[str, torch.nn.Parameter] = {}
        """Slot name -> the model parameter the range belongs to."""
        for x in pieces:
            p = x.param
            self.slots.append(
                ParamSlot(
                    name=x.name,
                    param=x.param_shard,
                    expert=x.expert,
                    decay=not (x.name.endswith(".bias") or p.dim() == 1),
                    offload=False,
                    mode=self._mode(x.name, x.param_shard),
                )
            )
            self.grads[x.name] = x.grad_shard
            self.full_params[x.name] = p

    def _grad(self, s: ParamSlot) -> torch.Tensor | None:  # type: ignore[override]
        return self.grads[s.name]

    def rebind(self, pieces) -> None:
        """After the buffers moved (context offload): the slots' views of the new buffers."""
        by_name = {x.name: x for x in pieces}
        for s in self.slots:
            s.param = by_name[s.name].param_shard
            self.grads[s.name] = by_name[s.name].grad_shard
