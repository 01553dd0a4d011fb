"""Host syncs in the MoE layer (issue 31): one MoE layer's forward + backward on CPU under a recorder of everything
that makes a CUDA host wait (a device-to-host read: ``item``/``tolist``/``bool``, ops whose output size depends on
the data: ``bincount``, ``nonzero``, ``unique``, boolean-mask indexing, ``repeat_interleave`` without
``output_size``; ``torch.cuda.synchronize``). The grouped expert path (the one an H200 runs) must record none, the
expert-parallel dispatcher exactly one per layer forward (its all-to-all split sizes) and none in the backward; the
recorder is shown to catch each kind (so a sync that comes back fails here). The CUDA count is
bench/moe_sync_device.sh's (``torch.cuda.set_sync_debug_mode``)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mlite.runtime.models import moe as moe_mod
from mlite.runtime.models.moe import MoE, _GatherSlots, grouped_mm_supported, sort_by_expert
from mlite.runtime.parallel import ep as ep_mod
from mlite.runtime.parallel.ep import ExpertDispatcher, _expert_major

_DATA_DEPENDENT = {"bincount", "nonzero", "unique", "_unique", "_unique2", "unique_dim", "unique_consecutive"}
_DATA_DEPENDENT |= {"masked_select", "_local_scalar_dense", "item"}


class SyncRecorder(TorchDispatchMode):
    """Records the host syncs (as CUDA would have them) of the ops run inside it."""

    def __init__(self, monkeypatch):
        super().__init__()
        self.syncs: list[str] = []
        for name in ("tolist", "numpy"):
            orig = getattr(torch.Tensor, name)

            def wrapped(t, *a, _orig=orig, _name=name, **k):
                self.syncs.append(f"Tensor.{_name}")
                return _orig(t, *a, **k)

            monkeypatch.setattr(torch.Tensor, name, wrapped)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: self.syncs.append("cuda.synchronize"))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        if name in _DATA_DEPENDENT:
            self.syncs.append(name)
        elif name == "repeat_interleave" and kwargs.get("output_size") is None and len(args) < 3:
            self.syncs.append("repeat_interleave without output_size")
        elif name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or [])
        ):
            self.syncs.append(f"{name} with a boolean mask")
        return func(*args, **kwargs)


def _layer(path: str, k: int = 4):
    torch.manual_seed(0)
    m = MoE(48, 8, k, 32, shared_ffn=24, expert_path=path)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.1)
    return m


def _fwd_bwd(m, rec, T=37):
    x = torch.randn(T, 48, requires_grad=True)
    dy = torch.randn(T, 48)
    with rec:
        y, aux = m(x, want_aux=True)
        forward = len(rec.syncs)
        torch.autograd.backward((y, aux), (dy, torch.tensor(1.0)))
    return forward, rec.syncs[forward:]


def test_grouped_moe_layer_forward_and_backward_make_no_host_sync(monkeypatch):
    # the torch pinned here has a CPU grouped_mm (the path an H200 runs); a build without it fails here, loudly
    assert grouped_mm_supported("cpu", torch.float32)
    rec = SyncRecorder(monkeypatch)
    forward, backward = _fwd_bwd(_layer("grouped"), rec)
    assert rec.syncs == [], rec.syncs
    assert forward == 0 and backward == []


def test_the_recorder_catches_each_kind_of_sync(monkeypatch):
    """Not vacuous: the CPU reference path reads its counts once, the padded fallback its capacity once, and the
    data-dependent ops the dispatch used to call (or might again) are each seen."""
    for path, want in (("loop", ["Tensor.tolist"]), ("padded", ["_local_scalar_dense"])):
        rec = SyncRecorder(monkeypatch)
        _fwd_bwd(_layer(path), rec)
        assert rec.syncs == want, (path, rec.syncs)
    rec = SyncRecorder(monkeypatch)
    ids = torch.tensor([3, 1, 1, 0])
    with rec:
        torch.bincount(ids, minlength=4)
        ids.nonzero()
        torch.unique(ids)
        ids[ids > 0]
        torch.repeat_interleave(ids, ids)
        torch.repeat_interleave(ids, ids, output_size=5)  # not a sync
        bool(ids[0])
        ids.tolist()
        torch.cuda.synchronize()
    assert len(rec.syncs) == 8, rec.syncs


def test_expert_dispatcher_reads_the_split_sizes_once_per_layer_and_never_in_backward(monkeypatch):
    """EP dispatch with the collectives replaced by a two-rank exchange where both ranks route alike (recv = send,
    so the all-to-all keeps the rows): one host read in the forward, none in the backward."""
    monkeypatch.setattr(ep_mod, "exchange_counts", lambda send, group: send.clone())
    monkeypatch.setattr(ep_mod, "all_to_all", lambda x, out_splits, in_splits, group: x * 1.0)
    m = _layer("grouped")
    full = m.experts
    local = moe_mod.Experts(4, 48, 32, path="grouped")
    with torch.no_grad():
        local.gate_up_proj.copy_(full.gate_up_proj[:4])
        local.down_proj.copy_(full.down_proj[:4])
    m.experts = local
    m.expert_dispatcher = ExpertDispatcher(None, 2, 8)
    rec = SyncRecorder(monkeypatch)
    forward, backward = _fwd_bwd(m, rec)
    assert rec.syncs == ["Tensor.tolist"] and forward == 1 and backward == []
    assert local.gate_up_proj.grad is not None and local.gate_up_proj.grad.abs().sum() > 0


def _expert_major_oracle(rows):
    starts, off = [], 0
    for r in rows:
        starts.append([])
        for n in r:
            starts[-1].append(off)
            off += n
    return [
        i for e in range(len(rows[0])) for s in range(len(rows)) for i in range(starts[s][e], starts[s][e] + rows[s][e])
    ]


@pytest.mark.parametrize("P, L", [(1, 3), (2, 4), (4, 2), (3, 5)])
def test_device_expert_major_permutation_equals_the_block_walk(P, L):
    g = torch.Generator().manual_seed(P * 10 + L)
    recv = torch.randint(0, 4, (P, L), generator=g)
    recv[0, 0] = 0  # an empty block
    want = _expert_major_oracle(recv.tolist())
    assert _expert_major(recv, int(recv.sum())).tolist() == want


def test_sort_by_expert_equals_argsort_and_bincount():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 6, (50, 4), generator=g)
    ids[ids == 2] = 3  # expert 2 gets nothing
    order, counts = sort_by_expert(ids, 8)  # experts 6, 7 get nothing either
    assert torch.equal(order, torch.argsort(ids.reshape(-1), stable=True))
    assert torch.equal(counts, torch.bincount(ids.reshape(-1), minlength=8))
    assert counts.dtype == torch.int64


def test_gather_slots_backward_equals_indexing_backward():
    g = torch.Generator().manual_seed(2)
    T, k, H = 13, 4, 5
    order = torch.argsort(torch.randint(0, 3, (T * k,), generator=g), stable=True)
    x = torch.randn(T, H, generator=g, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(T * k, H, generator=g, dtype=torch.float64)
    got = _GatherSlots.apply(x, order, k)
    want = x[order // k]
    assert torch.equal(got, want)
    (ga,) = torch.autograd.grad(got, x, dy)
    (gb,) = torch.autograd.grad(want, x, dy)
    torch.testing.assert_close(ga, gb, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_routing_weight_gather_equals_indexing_to_the_bit(dtype):
    """The MoE layer's ``weights.reshape(-1).index_select(0, order)`` (a scatter in backward) against the indexing
    it replaced (``weights.reshape(-1)[order, None]``, a sort and accumulate in backward): forward and both
    gradients bitwise equal for the layer's sorted-pair permutation."""
    g = torch.Generator().manual_seed(3)
    T, k, E, H = 29, 4, 8, 6
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
    order, _ = sort_by_expert(ids, E)
    ys0 = torch.randn(T * k, H, generator=g).to(dtype)
    w0 = torch.rand(T, k, generator=g).to(dtype)
    dy = torch.randn(T * k, H, generator=g).to(dtype)
    outs = []
    for pick in (lambda w: w.reshape(-1).index_select(0, order).unsqueeze(1), lambda w: w.reshape(-1)[order, None]):
        ys, w = ys0.clone().requires_grad_(), w0.clone().requires_grad_()
        out = ys * pick(w)
        outs.append((out, *torch.autograd.grad(out, (ys, w), dy)))
    for a, b in zip(*outs):
        assert torch.equal(a, b)
