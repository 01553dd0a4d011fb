"""Tensor parallelism on DTensor, with sequence parallelism (Megatron's ``--sequence-parallel``).

What is split over the TP group (``torch.distributed.tensor.parallel``; FSDP2 then shards the DTensors over
DP x CP, the 2D layout of torchtitan):

* full attention: ``q_proj``, ``k_proj``, ``v_proj`` column-wise (whole heads per rank; the output-gated
  ``q_proj`` of Qwen3-Next / Qwen3.5 keeps each head's query and gate rows together), ``o_proj`` row-wise;
* the dense MLP: ``gate_proj`` and ``up_proj`` column-wise, ``down_proj`` row-wise.

Sequence parallelism: between those regions the residual stream is split along the tokens: rank ``t`` holds tokens
``t*T/TP .. (t+1)*T/TP - 1`` (the micro-batch is padded with one extra, loss-free sequence so that TP divides T).
Entering attention / MLP the stream is all-gathered (DTensor ``Shard(0) -> Replicate``), leaving it the row-wise
output is reduce-scattered (``Partial -> Shard(0)``); the norms run on the local tokens.

Not split (replicated on every TP rank, each rank computing with its own tokens): the embedding (full lookup, then
this rank's tokens), the final norm, the router and the routed experts (ETP = 1: experts are sharded by EP / EDP
only) and the shared expert (on the local tokens), the q/k norms, and the Gated DeltaNet layers (the input is
all-gathered over TP, the layer runs on whole sequences, this rank's tokens are kept). The lm_head and the cross
entropy are not vocab-parallel: the final hidden states are all-gathered over TP and every TP rank computes the
same full loss (so the loss and its token count are reduced over DP x CP only, as without TP).

Gradients: DTensor's autograd completes the split weights' gradients. The replicated parameters that only saw this
rank's tokens (or heads) -- embedding, norms, router, shared expert, q/k norms, Gated DeltaNet -- hold a partial
gradient; :meth:`TensorParallel.reduce_partial_grads` sums their (FSDP2-reduced) shards over TP once per step,
before the norm and the update (Megatron all-reduces its sequence-parallel layernorm gradients the same way). The
lm_head's gradient is already complete on every TP rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ...errors import MliteError
from ..batch import IGNORE_INDEX, PackedBatch
from .comm import all_gather_dim0


class _GatherKeepLocalGrad(torch.autograd.Function):
    """All-gather along dim 0; backward keeps this rank's slice (every rank's downstream computation is the same)."""

    @staticmethod
    def forward(ctx, x, group, size, rank):
        ctx.rank, ctx.n = rank, x.shape[0]
        out = x.new_empty((size * x.shape[0], *x.shape[1:]))
        dist.all_gather_into_tensor(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        return g[ctx.rank * ctx.n:(ctx.rank + 1) * ctx.n], None, None, None


def pad_for_tp(batch: PackedBatch, tp: int) -> PackedBatch:
    """``batch`` with one extra loss-free sequence so that TP divides the token count (unchanged if it does)."""
    extra = -batch.num_tokens % tp
    if not extra:
        return batch
    pad = PackedBatch(torch.zeros(extra, dtype=torch.long), torch.full((extra,), IGNORE_INDEX, dtype=torch.long),
                      torch.tensor([extra], dtype=torch.int32),
                      None if batch.loss_mask is None else torch.zeros(extra, dtype=torch.bool),
                      None if batch.position_ids is None else torch.arange(extra))
    return PackedBatch.concat([batch, pad])


class TensorParallel:
    """TP + SP over one group (see the module docstring)."""

    def __init__(self, state):
        self.mesh, self.group, self.tp, self.rank = state.tp_mesh, state.tp_group, state.tp, state.tp_rank
        self.partial: list[nn.Parameter] = []
        self.pending = False

    # ------------------------------------------------------------------ hooks of the sequence-parallel region
    def _local_tokens(self, module, args, out):
        n = out.shape[0] // self.tp
        return out[self.rank * n:(self.rank + 1) * n]

    def _gather_keep_local(self, module, args, out):
        return _GatherKeepLocalGrad.apply(out, self.group, self.tp, self.rank)

    def _gather_pre(self, module, args):
        x, *rest = args
        return (all_gather_dim0(x, self.group, self.tp), *rest)

    # ------------------------------------------------------------------ install
    def install(self, model) -> None:
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                       parallelize_module)

        from ..models.attention import Attention
        from ..models.common import SwiGLU
        from ..models.deltanet import GatedDeltaNet

        tp = self.tp
        split: set[int] = set()
        for block in model.blocks:
            plan = {}
            mixer = block.mixer
            if isinstance(mixer, Attention):
                if mixer.heads % tp or mixer.kv_heads % tp:
                    raise MliteError(f"tp: attention heads {mixer.heads} / KV heads {mixer.kv_heads} are not divisible "
                                     f"by TP {tp}")
                plan.update({"self_attn": PrepareModuleInput(input_layouts=(Shard(0), None, None),
                                                             desired_input_layouts=(Replicate(), None, None)),
                             "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                             "self_attn.v_proj": ColwiseParallel(),
                             "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(0))})
                mixer.heads //= tp
                mixer.kv_heads //= tp
            elif isinstance(mixer, GatedDeltaNet):
                mixer.register_forward_pre_hook(self._gather_pre)
                mixer.register_forward_hook(self._local_tokens)
            if isinstance(block.mlp, SwiGLU):
                plan.update({"mlp": PrepareModuleInput(input_layouts=(Shard(0),), desired_input_layouts=(Replicate(),)),
                             "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                             "mlp.down_proj": RowwiseParallel(output_layouts=Shard(0))})
            if plan:
                parallelize_module(block, self.mesh, plan)
            for name, p in block.named_parameters():
                if hasattr(p, "placements"):
                    split.add(id(p))
        model.embed.register_forward_hook(self._local_tokens)
        model.norm.register_forward_hook(self._gather_keep_local)
        experts = {id(p) for m in model.modules() if type(m).__name__ == "Experts" for p in m.parameters()}
        head = id(model.lm_head.weight)
        tied = model.lm_head.weight is model.embed.weight
        if tied:
            raise MliteError("tp: tied embeddings are not supported with TP > 1 by the lite runtime; use --tp 1")
        self.partial_names = [n for n, p in model.named_parameters()
                              if id(p) not in split and id(p) not in experts and id(p) != head]

    def bind(self, model) -> None:
        """After FSDP2: find the (now sharded) partial-gradient parameters by name."""
        params = dict(model.named_parameters())
        self.partial = [params[n] for n in self.partial_names]

    def reduce_partial_grads(self) -> None:
        """Sum the partial gradients of the replicated parameters over TP (once per step; see module docstring)."""
        if not self.pending:
            return
        self.pending = False
        grads = [p.grad for p in self.partial if p.grad is not None]
        for g in grads:
            t = g.to_local() if hasattr(g, "to_local") else g
            dist.all_reduce(t, group=self.group)
