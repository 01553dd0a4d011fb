"""Tensor parallelism on DTensor, with sequence parallelism (Megatron's ``--sequence-parallel``).

What is split over the TP group (``torch.distributed.tensor.parallel``; FSDP2 then shards the DTensors over
DP x CP, the 2D layout of torchtitan):

* full attention: ``q_proj``, ``k_proj``, ``v_proj`` column-wise (whole heads per rank; the output-gated
  ``q_proj`` of Qwen3-Next / Qwen3.5 keeps each head's query and gate rows together), ``o_proj`` row-wise;
* the dense MLP and the shared expert: ``gate_proj`` and ``up_proj`` column-wise, ``down_proj`` row-wise;
* Gated DeltaNet: key and value heads (``in_proj_*``, the conv channels, ``A_log``, ``dt_bias`` column-wise,
  ``out_proj`` row-wise) -- sliced by hand into plain tensors, because the layer reads its conv weight, ``A_log``
  and ``dt_bias`` directly; its input is all-gathered over TP and its output reduce-scattered back, like attention;
* the embedding and the lm_head by vocabulary rows (vocabulary-parallel, as Megatron; the vocabulary must be
  divisible by TP, the lite runtime does not pad it), with a vocabulary-parallel fused cross entropy: the final
  hidden states are all-gathered over TP, every TP rank computes its vocabulary share of the logits and the max,
  sum of exponentials and target logit are all-reduced, so every TP rank holds the same full loss (the loss and its
  token count are then reduced over DP x CP only, as without TP).

Sequence parallelism: between those regions the residual stream is split along the tokens: rank ``t`` holds tokens
``t*T/TP .. (t+1)*T/TP - 1`` (the micro-batch is padded with one extra, loss-free sequence so that TP divides T).
Entering attention / MLP the stream is all-gathered (DTensor ``Shard(0) -> Replicate``), leaving it the row-wise
output is reduce-scattered (``Partial -> Shard(0)``); the embedding's output is reduce-scattered into the split
stream; the norms run on the local tokens.

Not split (replicated on every TP rank, each computing with its own tokens): the norms, the router and the routed
experts (ETP = 1: experts are sharded by EP / EDP only), the shared-expert gate, the q/k norms and the Gated DeltaNet output norm.

Gradients: DTensor's autograd completes the split weights' gradients. The replicated parameters that only saw this
rank's tokens (or heads) -- norms, router, shared-expert gate -- hold a partial
gradient; :meth:`TensorParallel.reduce_partial_grads` sums their (FSDP2-reduced) shards over TP once per step,
before the norm and the update (Megatron all-reduces its sequence-parallel layernorm gradients the same way).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ...errors import MliteError
from ..batch import IGNORE_INDEX, PackedBatch
from .comm import all_gather_dim0, reduce_scatter_dim0


class _VocabParallelLinearCE(torch.autograd.Function):
    """Summed cross entropy of ``hidden @ W.T`` with ``W`` split by vocabulary rows over TP (Megatron's
    ``vocab_parallel_cross_entropy`` fused with the lm_head GEMM, chunked over rows like
    :func:`mlite.runtime.models.loss.linear_cross_entropy`): the max, the sum of exponentials and the target logit
    are all-reduced over TP, so every TP rank gets the same loss. Gradients are computed in the forward pass; the
    hidden-state gradient is this rank's vocabulary share (partial: the caller's all-gather backward sums it)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk, group, vocab_start, grad_enabled):
        n, Vl = hidden.shape[0], weight.shape[0]
        want_h, want_w = grad_enabled and ctx.needs_input_grad[0], grad_enabled and ctx.needs_input_grad[1]
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        gh = torch.empty_like(hidden) if want_h else None
        gw = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_w else None
        for s in range(0, n, chunk):
            hc, tc = hidden[s : s + chunk], targets[s : s + chunk]
            logits = (hc @ weight.t()).float()
            m = logits.max(dim=-1).values
            dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
            ex = torch.exp(logits - m[:, None])
            se = ex.sum(dim=-1)
            dist.all_reduce(se, group=group)
            lt = tc - vocab_start
            own = (lt >= 0) & (lt < Vl)
            rows = torch.arange(hc.shape[0], device=hc.device)
            tl = torch.where(own, logits[rows, lt.clamp(0, Vl - 1)], torch.zeros_like(m))
            dist.all_reduce(tl, group=group)
            total += (m + torch.log(se) - tl).sum()
            if want_h or want_w:
                p = ex / se[:, None]
                p[rows[own], lt[own]] -= 1.0
                p = p.to(hidden.dtype)
                if gh is not None:
                    gh[s : s + chunk] = p @ weight
                if want_w:
                    gw += (p.t() @ hc).float()
        ctx.save_for_backward(gh, gw)
        ctx.weight_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx, g):
        gh, gw = ctx.saved_tensors
        dh = None if gh is None else gh * g.to(gh.dtype)
        dw = None if gw is None else (gw * g.to(gw.dtype)).to(ctx.weight_dtype)
        return dh, dw, None, None, None, None, None


def pad_for_tp(batch: PackedBatch, tp: int) -> PackedBatch:
    """``batch`` with one extra loss-free sequence so that TP divides the token count (unchanged if it does)."""
    extra = -batch.num_tokens % tp
    if not extra:
        return batch
    pad = PackedBatch(
        torch.zeros(extra, dtype=torch.long),
        torch.full((extra,), IGNORE_INDEX, dtype=torch.long),
        torch.tensor([extra], dtype=torch.int32),
        None if batch.loss_mask is None else torch.zeros(extra, dtype=torch.bool),
        None if batch.position_ids is None else torch.arange(extra),
    )
    return PackedBatch.concat([batch, pad])


class TensorParallel:
    """TP + SP over one group (see the module docstring)."""

    def __init__(self, state) -> None:
        self.mesh, self.group, self.tp, self.rank = state.tp_mesh, state.tp_group, state.tp, state.tp_rank
        self.partial: list[nn.Parameter] = []
        self.sliced: dict[str, tuple[int, tuple[int, ...]]] = {}
        self.pending = False

    # ------------------------------------------------------------------ hooks of the sequence-parallel region
    def _gather(self, module, args, out):
        return all_gather_dim0(out, self.group, self.tp)

    def cross_entropy(self, hidden, weight, targets, chunk):
        """Vocabulary-parallel fused lm_head + cross entropy (the model's ``cross_entropy`` hook)."""
        w = weight.to_local() if hasattr(weight, "to_local") else weight
        if hidden.shape[0] == 0:
            return (hidden.sum() + w.sum()).float() * 0.0
        return _VocabParallelLinearCE.apply(
            hidden, w, targets, int(chunk), self.group, self.rank * w.shape[0], torch.is_grad_enabled()
        )

    def _gather_pre(self, module, args):
        x, *rest = args
        return (all_gather_dim0(x, self.group, self.tp), *rest)

    def _reduce_scatter(self, module, args, out):
        return reduce_scatter_dim0(out, self.group, self.tp)

    # ------------------------------------------------------------------ Gated DeltaNet: heads sliced by hand
    def _slice_gdn(self, prefix: str, m) -> None:
        """Keep this rank's key / value heads of a Gated DeltaNet layer (plain tensors: the layer reads its conv
        weight, ``A_log`` and ``dt_bias`` directly, so they cannot be DTensors next to local activations)."""
        tp, t = self.tp, self.rank
        if m.h % tp or m.hv % tp:
            raise MliteError(f"tp: Gated DeltaNet key heads {m.h} and value heads {m.hv} must be divisible by TP {tp}")
        kd, vd = m.key_dim_total, m.value_dim_total
        conv = (kd, kd, vd)
        segs = {
            "conv1d.weight": (0, conv),
            "dt_bias": (0, (m.hv,)),
            "A_log": (0, (m.hv,)),
            "out_proj.weight": (1, (vd,)),
        }
        if m.fused:  # grouped per key head already: whole groups per rank
            segs.update({"in_proj_qkvz.weight": (0, (m.conv_dim + vd,)), "in_proj_ba.weight": (0, (2 * m.hv,))})
        else:
            segs.update(
                {
                    "in_proj_qkv.weight": (0, conv),
                    "in_proj_z.weight": (0, (vd,)),
                    "in_proj_b.weight": (0, (m.hv,)),
                    "in_proj_a.weight": (0, (m.hv,)),
                }
            )
        for name, (dim, sizes) in segs.items():
            mod, attr = (m, name) if "." not in name else (getattr(m, name.split(".")[0]), name.split(".")[1])
            full = getattr(mod, attr).detach()
            parts = [seg.chunk(tp, dim=dim)[t] for seg in full.split(list(sizes), dim=dim)]
            setattr(mod, attr, nn.Parameter(torch.cat(parts, dim=dim).clone()))
            self.sliced[f"{prefix}.{name}"] = (dim, sizes)
        m.h, m.hv = m.h // tp, m.hv // tp
        m.key_dim_total, m.value_dim_total, m.conv_dim = kd // tp, vd // tp, m.conv_dim // tp

    def unslice(self, name: str, local: torch.Tensor) -> torch.Tensor:
        """The full tensor of a hand-sliced parameter from every TP rank's ``local`` (collective over TP)."""
        dim, sizes = self.sliced[name]
        parts = [torch.empty_like(local) for _ in range(self.tp)]
        dist.all_gather(parts, local.contiguous(), group=self.group)
        per = [p.split([s // self.tp for s in sizes], dim=dim) for p in parts]
        return torch.cat([per[r][i] for i in range(len(sizes)) for r in range(self.tp)], dim=dim)

    def is_split(self, name: str, param) -> bool:
        """The parameter's shards differ over TP (DTensor on the TP mesh, or a hand-sliced one)."""
        mesh = getattr(param, "device_mesh", None)
        return name in self.sliced or (mesh is not None and "tp" in (mesh.mesh_dim_names or ()))

    # ------------------------------------------------------------------ install
    def install(self, model) -> None:
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            PrepareModuleInput,
            RowwiseParallel,
            parallelize_module,
        )

        from ..models.attention import Attention
        from ..models.common import SwiGLU
        from ..models.deltanet import GatedDeltaNet

        tp = self.tp
        for i, block in enumerate(model.blocks):
            plan = {}
            mixer = block.mixer
            if isinstance(mixer, Attention):
                if mixer.heads % tp or mixer.kv_heads % tp:
                    raise MliteError(
                        f"tp: attention heads {mixer.heads} / KV heads {mixer.kv_heads} are not divisible by TP {tp}"
                    )
                plan.update(
                    {
                        "self_attn": PrepareModuleInput(
                            input_layouts=(Shard(0), None, None), desired_input_layouts=(Replicate(), None, None)
                        ),
                        "self_attn.q_proj": ColwiseParallel(),
                        "self_attn.k_proj": ColwiseParallel(),
                        "self_attn.v_proj": ColwiseParallel(),
                        "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(0)),
                    }
                )
                mixer.heads //= tp
                mixer.kv_heads //= tp
            elif isinstance(mixer, GatedDeltaNet):
                self._slice_gdn(f"blocks.{i}.linear_attn", mixer)
                mixer.register_forward_pre_hook(self._gather_pre)
                mixer.register_forward_hook(self._reduce_scatter)
            mlps = [("mlp", block.mlp)] if isinstance(block.mlp, SwiGLU) else []
            shared = getattr(block.mlp, "shared_name", None)
            if shared:
                mlps.append((f"mlp.{shared}", getattr(block.mlp, shared)))
            for name, _ in mlps:
                plan.update(
                    {
                        name: PrepareModuleInput(input_layouts=(Shard(0),), desired_input_layouts=(Replicate(),)),
                        f"{name}.gate_proj": ColwiseParallel(),
                        f"{name}.up_proj": ColwiseParallel(),
                        f"{name}.down_proj": RowwiseParallel(output_layouts=Shard(0)),
                    }
                )
            if plan:
                parallelize_module(block, self.mesh, plan)
        if model.lm_head.weight is model.embed.weight:
            raise MliteError("tp: tied embeddings are not supported with TP > 1 by the lite runtime; use --tp 1")
        vocab = model.embed.weight.shape[0]
        if vocab % tp:
            raise MliteError(
                f"tp: vocabulary {vocab} is not divisible by TP {tp} (the lite runtime does not pad it); "
                "choose a TP that divides the vocabulary"
            )
        # vocabulary-parallel embedding (reduce-scatter into the sequence-parallel stream) and lm_head
        parallelize_module(
            model,
            self.mesh,
            {
                "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
                "lm_head": ColwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
            },
        )
        model.norm.register_forward_hook(self._gather)
        model.cross_entropy = self.cross_entropy
        split = {id(p) for p in model.parameters() if hasattr(p, "placements")}
        experts = {id(p) for m in model.modules() if type(m).__name__ == "Experts" for p in m.parameters()}
        self.partial_names = [
            n
            for n, p in model.named_parameters()
            if id(p) not in split and id(p) not in experts and n not in self.sliced
        ]

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
