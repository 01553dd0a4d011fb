"""Mixture of experts: top-k softmax router, routed SwiGLU experts held as 3D parameters, optional gated shared
expert (Qwen3-MoE, Mixtral, Qwen3-Next / Qwen3.5). HF names: ``gate.weight``, ``experts.gate_up_proj``
``[E, 2I, H]`` (gate rows first, then up), ``experts.down_proj`` ``[E, H, I]``, ``shared_expert.*``,
``shared_expert_gate.weight``.

Dispatch (:func:`sort_by_expert`) sorts the ``T*k`` (token, slot) pairs by expert (a stable sort), runs all experts
on their contiguous slices at once and un-sorts with a permutation (no atomics in the forward, so results are
deterministic). Nothing in the local dispatch waits for the device: the tokens per expert come from the sorted ids
by ``searchsorted`` (not ``bincount``, which reads its input's maximum back to the host on CUDA), stay on the device
and feed ``torch._grouped_mm``'s int32 offsets directly; the gather of the token rows (:class:`_GatherSlots`) has a
backward that applies the inverse permutation and sums the ``k`` slots of each token (not the sort and accumulate of
an indexing backward), and so does the routing weight of each sorted pair (``index_select``: its backward scatters
into distinct rows, bitwise the indexing backward without its sort). tests/test_moe_sync.py fails if a host sync
comes back. Learnt from torchtitan's MoE
(pytorch/torchtitan@08dc75a torchtitan/models/moe/moe.py: counts kept on the device with ``histc``, stable argsort)
and Megatron-Core's dispatcher (NVIDIA/Megatron-LM@bed33f8 megatron/core/transformer/moe/token_dispatcher.py: all
host reads of one layer gathered at one sync point). The expert GEMM path is chosen once, when the model is built
(:func:`expert_path`), from what this PyTorch build supports:

* ``grouped`` (CUDA, bf16, compute capability >= 9.0): ``torch._grouped_mm`` -- one grouped GEMM for gate/up and one
  for down over all experts, group ends as an int32 device tensor (no host sync);
* ``padded`` (other CUDA cases): tokens scattered into a zero-padded ``[E, C, H]`` buffer (``C`` = the largest
  expert's token count, one host sync per layer) and two batched matmuls; no per-expert Python loop on a GPU;
* ``loop`` (CPU): one GEMM pair per expert that received tokens, on its contiguous slice (one read of the counts)
  -- the reference the other two are tested against, and what the memory estimator's saved-tensor count models
  exactly on CPU (the grouped op also saves its int32 group offsets, 4 bytes per expert and layer).

Load-balancing loss (Switch Transformer form, per MoE layer): ``E * sum_e f_e * P_e`` with ``f_e`` the fraction
of (token, slot) pairs routed to expert ``e`` and ``P_e`` the mean router probability of ``e`` (Megatron's
``switch_load_balancing_loss_func``; 1.0 at perfect balance); computed only when the model's
``moe_aux_loss_coeff`` is > 0, and summed over MoE layers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .common import SwiGLU

EXPERT_PATHS = ("grouped", "padded", "loop")
"""Expert GEMM paths (see the module docstring)."""


def grouped_mm_supported(device, dtype: torch.dtype) -> bool:
    """``torch._grouped_mm`` has a kernel for this device and dtype in this build."""
    dev = torch.device(device)
    if not hasattr(torch, "_grouped_mm"):
        return False
    if dev.type == "cuda":
        if dtype != torch.bfloat16 or not torch.cuda.is_available():
            return False
        return torch.cuda.get_device_capability(dev) >= (9, 0)
    if dev.type == "cpu":  # a CPU kernel, or the composite op's built-in per-group fallback
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        return dtype in (torch.float32, torch.bfloat16) and (
            has("aten::_grouped_mm", "CPU") or has("aten::_grouped_mm", "CompositeExplicitAutograd")
        )
    return False


def expert_path(device, dtype: torch.dtype) -> str:
    """The expert GEMM path for a model living on ``device`` in ``dtype`` (decided once at model build)."""
    if torch.device(device).type != "cuda":
        return "loop"
    return "grouped" if grouped_mm_supported(device, dtype) else "padded"


def grouped_swiglu(xs: torch.Tensor, counts: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """All experts through ``torch._grouped_mm``: ``xs[M, H]`` sorted by expert, ``counts[E]``,
    ``w1[E, 2I, H]`` (gate rows, then up), ``w2[E, H, I]`` -> ``[M, H]``."""
    offs = counts.cumsum(0, dtype=torch.int32)  # group ends, on the device: _grouped_mm reads them there
    h = torch._grouped_mm(xs, w1.transpose(-2, -1), offs=offs)
    gate, up = h.chunk(2, dim=-1)
    return torch._grouped_mm(F.silu(gate) * up, w2.transpose(-2, -1), offs=offs)


def padded_swiglu(xs: torch.Tensor, counts: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Same as :func:`grouped_swiglu` with two batched matmuls over a zero-padded ``[E, C, H]`` buffer."""
    E, M, H = counts.numel(), xs.shape[0], xs.shape[1]
    if M == 0:
        return xs.new_zeros(0, w2.shape[1])
    cap = int(counts.max())
    starts = counts.cumsum(0) - counts
    expert = torch.repeat_interleave(torch.arange(E, device=xs.device), counts, output_size=M)
    slot = torch.arange(M, device=xs.device) - starts[expert]
    buf = xs.new_zeros(E, cap, H).index_put((expert, slot), xs)
    h = torch.bmm(buf, w1.transpose(-2, -1))
    gate, up = h.chunk(2, dim=-1)
    out = torch.bmm(F.silu(gate) * up, w2.transpose(-2, -1))
    return out[expert, slot]


def loop_swiglu(xs: torch.Tensor, counts: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Same as :func:`grouped_swiglu`, one expert at a time (one host read of the counts: the CPU reference)."""
    outs = []
    sizes = counts.tolist()
    for e, (xe, n) in enumerate(zip(xs.split(sizes), sizes)):
        if n:
            gate, up = F.linear(xe, w1[e]).chunk(2, dim=-1)
            outs.append(F.linear(F.silu(gate) * up, w2[e]))
    return torch.cat(outs) if outs else xs.new_zeros(0, w2.shape[1])


def sort_by_expert(ids: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids[T, k]`` expert ids -> ``(order[T*k]``: the (token, slot) pairs sorted by expert, stable; ``counts[E]``
    int64: pairs per expert) without a host sync: the counts are where each expert's run starts in the sorted ids."""
    sorted_ids, order = torch.sort(ids.reshape(-1), stable=True)
    edges = torch.arange(num_experts + 1, device=ids.device, dtype=sorted_ids.dtype)
    return order, torch.searchsorted(sorted_ids, edges).diff()


class _GatherSlots(torch.autograd.Function):
    """``x[order // k]`` (the token row of every sorted pair) whose backward applies the inverse permutation and sums
    the ``k`` slots of each token: no sort, no atomics, no host sync (an indexing backward would sort the indices
    and accumulate). Saves the inverse permutation (int64 per pair), as many bytes as indexing's saved index."""

    @staticmethod
    def forward(ctx, x, order, k):
        inv = torch.empty_like(order).index_copy_(0, order, torch.arange(order.numel(), device=order.device))
        ctx.save_for_backward(inv)
        ctx.k = k
        return x.index_select(0, order // k)

    @staticmethod
    def backward(ctx, g):
        (inv,) = ctx.saved_tensors
        return g.index_select(0, inv).view(-1, ctx.k, g.shape[-1]).sum(dim=1), None, None


_PATH_FN = {"grouped": grouped_swiglu, "padded": padded_swiglu, "loop": loop_swiglu}


class Experts(nn.Module):
    """Routed experts as 3D parameters (the unit sharded over the expert-data-parallel mesh)."""

    def __init__(self, num_experts: int, hidden: int, ffn: int, *, path: str = "loop", device=None, dtype=None):
        super().__init__()
        if path not in EXPERT_PATHS:
            raise ValueError(f"expert path {path!r}: use one of {EXPERT_PATHS}")
        self.num_experts, self.hidden, self.ffn = num_experts, hidden, ffn
        self.path = path
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * ffn, hidden, device=device, dtype=dtype))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, ffn, device=device, dtype=dtype))

    def reset_parameters(self, std: float = 0.02) -> None:
        with torch.no_grad():
            self.gate_up_proj.normal_(0.0, std)
            self.down_proj.normal_(0.0, std)

    def forward(self, xs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """``xs[M, H]`` sorted by expert, ``counts[E]`` tokens per expert -> ``[M, H]``."""
        return _PATH_FN[self.path](xs, counts, self.gate_up_proj, self.down_proj)


class Router(nn.Module):
    """``gate``: a bias-free linear layer producing one logit per expert (HF ``*TopKRouter``)."""

    def __init__(self, hidden: int, num_experts: int, *, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class MoE(nn.Module):
    """Top-k softmax routing over routed experts, plus an optional shared expert with a sigmoid gate."""

    def __init__(
        self,
        hidden: int,
        num_experts: int,
        top_k: int,
        ffn: int,
        *,
        norm_topk_prob: bool = True,
        shared_ffn: int = 0,
        shared_name: str = "shared_expert",
        shared_gate: bool = True,
        expert_path: str = "loop",
        device=None,
        dtype=None,
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.num_experts, self.top_k, self.norm_topk_prob = num_experts, top_k, norm_topk_prob
        self.gate = Router(hidden, num_experts, **kw)
        self.experts = Experts(num_experts, hidden, ffn, path=expert_path, **kw)
        # expert-parallel hook (mlite.runtime.parallel.ep.ExpertDispatcher, called as (experts, xs, counts) -> ys):
        # None = every expert is local
        self.expert_dispatcher: Callable[[Experts, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
        self.shared_name = shared_name if shared_ffn else None
        if shared_ffn:
            setattr(self, shared_name, SwiGLU(hidden, shared_ffn, **kw))
            self.shared_expert_gate = nn.Linear(hidden, 1, bias=False, **kw) if shared_gate else None
        else:
            self.shared_expert_gate = None

    def route(self, x: torch.Tensor):
        """``(probs fp32 [T, E], topk weights [T, k] in x.dtype, topk ids [T, k])``."""
        probs = torch.softmax(self.gate(x).float(), dim=-1)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return probs, weights.to(x.dtype), ids

    def forward(self, x: torch.Tensor, want_aux: bool = False):
        """``x[T, H] -> (y[T, H], aux loss scalar or None)``."""
        T, H = x.shape
        k, E = self.top_k, self.num_experts
        probs, weights, ids = self.route(x)
        order, counts = sort_by_expert(ids, E)
        xs = _GatherSlots.apply(x, order, k)
        ys = (
            self.experts(xs, counts)
            if self.expert_dispatcher is None
            else self.expert_dispatcher(self.experts, xs, counts)
        )
        ys = ys * weights.reshape(-1).index_select(0, order).unsqueeze(1)  # backward: a scatter, not a sort
        y = ys.new_empty(T * k, H).index_copy(0, order, ys).view(T, k, H).sum(dim=1)
        if self.shared_name is not None:
            s = getattr(self, self.shared_name)(x)
            if self.shared_expert_gate is not None:
                s = torch.sigmoid(self.shared_expert_gate(x)) * s
            y = y + s
        aux = None
        if want_aux:
            frac = counts.float() / float(T * k)
            aux = E * (frac * probs.mean(dim=0)).sum()
        return y, aux
