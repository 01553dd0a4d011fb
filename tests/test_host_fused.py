"""The one-pass host AdamW kernel (mlite/runtime/optim/host_kernel.c through host_fused): bitwise equal to the eager
torch-op update (:func:`mlite.runtime.optim.host.update_chunk`, itself held to torch.optim.AdamW and to the device
kernel elsewhere) in every storage mode and dtype, on edge values; through ``ShardedAdamW`` with
``offload_fraction`` 0.5 and 1.0 (the staged path forced on CPU, spans straddling shards), fp32 master and PAO; to
torch.optim.AdamW within fp32 rounding; and the setting's errors."""

from __future__ import annotations

import itertools

import pytest
import torch
from runtime_workers import bits, same_bits

from mlite.errors import MliteError
from mlite.runtime.config import OptimizerConfig
from mlite.runtime.optim import host, host_fused
from mlite.runtime.optim import optimizer as optimizer_mod
from mlite.runtime.optim.adamw import AdamWHyper, step_scalars
from mlite.runtime.optim.master import split_fp32
from mlite.runtime.optim.optimizer import ShardedAdamW

N = 70_001
"""Elements: more than two of the kernel's 32 Ki-element thread blocks, and a partial one."""


def _inputs(seed: int):
    """A master with edge values (bf16 rounding ties and their neighbours, subnormals, zeros, large magnitudes) and
    moments whose bf16 forms hit rounding ties."""
    g = torch.Generator().manual_seed(seed)
    master = torch.randn(N, generator=g) * 0.02
    b = master.view(torch.int32)
    b[:3000] = (b[:3000] & ~0xFFFF) | torch.tensor([0x7FFF, 0x8000, 0x8001]).repeat(1000)  # ties of round_bf16
    master[3000:3100] = torch.randn(100, generator=g) * 1e-39  # subnormals
    master[3100:3200] = 0.0
    master[3200:3300] = torch.randn(100, generator=g) * 1e30
    m = torch.randn(N, generator=g) * 1e-4
    m.view(torch.int32)[:2000] = (m.view(torch.int32)[:2000] & ~0xFFFF) | 0x8000  # bf16 nearest-even ties
    v = torch.rand(N, generator=g) * 1e-6
    grad = torch.randn(N, generator=g) * 1e-3
    grad[::97] = 0.0
    grad[5000:5100] = torch.randn(100, generator=g) * 1e3
    return master, m, v, grad


def _state(mode, master, m, v, mdt, vdt):
    st = {"exp_avg": m.to(mdt, copy=True), "exp_avg_sq": v.to(vdt, copy=True)}
    if mode == "param":
        return master.clone(), st
    p, r = split_fp32(master)
    st["master" if mode == "master" else "remainder"] = master.clone() if mode == "master" else r.clone()
    return p.clone(), st


@pytest.mark.parametrize("mode", ["param", "master", "remainder"])
def test_kernel_equals_the_eager_update_bitwise_in_every_dtype_and_option(mode):
    assert host_fused.status() == "ok"  # this machine builds the kernel (else every path here is the eager one)
    master, m, v, grad = _inputs(1)
    work = host.work_buffers(N, "cpu")
    cases = itertools.product(
        (None, torch.bfloat16, torch.float32),
        (torch.float32, torch.bfloat16),
        (torch.float32, torch.bfloat16),
        ((0.0, 1.0, True), (0.1, 0.7, True), (0.1, 1.0, False)),
    )
    for gdt, mdt, vdt, (wd, clip, dec) in cases:
        if mode == "param" and gdt == torch.bfloat16:
            continue  # fp32 params have fp32 gradients
        gr = None if gdt is None else grad.to(gdt)
        (pa, sa), (pb, sb) = _state(mode, master, m, v, mdt, vdt), _state(mode, master, m, v, mdt, vdt)
        for t in (1, 2):
            h = AdamWHyper(1e-3, 0.9, 0.95, 1e-8, weight_decay=wd, step=t, decoupled=dec, clip_coef=clip)
            sc = step_scalars(h)
            host.update_chunk(mode, pa, gr, sa, 0, N, sc, work)
            host_fused.update_range(mode, pb, gr, sb, 0, N, sc)
        label = (mode, gdt, mdt, vdt, wd, clip, dec)
        assert torch.equal(bits(pa), bits(pb)), label
        for k in sa:
            assert torch.equal(sa[k].view(torch.int8), sb[k].view(torch.int8)), (label, k)
        assert not torch.equal(bits(pa), bits(_state(mode, master, m, v, mdt, vdt)[0])), label  # it did update


def _params(seed=3):
    g = torch.Generator().manual_seed(seed)
    shapes = {"w1.weight": (37, 11), "w1.bias": (37,), "big.weight": (300, 250), "norm.weight": (11,)}
    shapes["w2.weight"] = (5, 37)
    return [(n, torch.nn.Parameter(torch.randn(*s, generator=g).bfloat16())) for n, s in shapes.items()]


def _run(monkeypatch, frac, pao, host_kernel, staged):
    if staged:  # the offload path (staging buffers, spans, copy-back) on CPU
        monkeypatch.setattr(ShardedAdamW, "_staged", lambda self, g: g.offload)
    else:
        monkeypatch.setattr(ShardedAdamW, "_staged", lambda self, g: False)
    params = _params()
    opt = ShardedAdamW(
        params,
        OptimizerConfig(use_precision_aware_optimizer=pao, offload_fraction=frac),
        expert_names=set(),
        device="cpu",
    )
    opt.host_kernel = host_kernel
    g = torch.Generator().manual_seed(4)
    zeros = []
    for t in range(5):
        for i, (_, p) in enumerate(params):
            p.grad = None if (i == 1 and t % 2) else (torch.randn(p.shape, generator=g) * 0.1).bfloat16()
            if p.grad is not None:
                p.grad.view(-1)[: t + 1] = 0
        zeros.append(opt.step(lr=1e-2, clip_coef=0.5 if t % 3 == 0 else 1.0))
    state = {f"{s.name}.{k}": t for s in opt.slots for k, t in s.state.items()}
    return {n: p.detach().clone() for n, p in params}, zeros, state, opt


@pytest.mark.parametrize("pao", [False, True])
@pytest.mark.parametrize("frac", [0.5, 1.0])
def test_offload_update_with_the_kernel_equals_the_eager_resident_update(monkeypatch, frac, pao):
    monkeypatch.setattr(optimizer_mod, "CHUNK", 500)  # spans of several shards, the big shard alone
    ref = _run(monkeypatch, 0.0, pao, "torch", staged=False)
    calls = []
    real = host_fused.update_range
    monkeypatch.setattr(host_fused, "update_range", lambda *a: calls.append(a[4:6]) or real(*a))
    got = _run(monkeypatch, frac, pao, "c", staged=True)
    opt = got[3]
    assert {g.offload for g in opt.groups} == ({True, False} if frac == 0.5 else {True})
    assert calls and any(b - a > 500 for a, b in calls)  # the kernel ran, over spans and whole shards
    assert same_bits(ref[0], got[0]) == []
    assert ref[1] == got[1]
    assert same_bits(ref[2], got[2]) == []


def test_kernel_fp32_params_follow_torch_optim_adamw():
    g = torch.Generator().manual_seed(7)
    p0 = torch.randn(70, 1000, generator=g) * 0.1  # 2-D: weight decay applies
    ours = [("w.weight", torch.nn.Parameter(p0.clone()))]
    ref = torch.nn.Parameter(p0.clone())
    opt = ShardedAdamW(ours, OptimizerConfig(weight_decay=0.1), expert_names=set(), device="cpu")
    opt.host_kernel = "c"
    cfg = opt.cfg
    topt = torch.optim.AdamW([ref], lr=1e-3, betas=cfg.betas, eps=cfg.eps, weight_decay=0.1)
    for _ in range(5):
        gr = torch.randn(p0.shape, generator=g) * 1e-2
        ours[0][1].grad, ref.grad = gr.clone(), gr.clone()
        opt.step(lr=1e-3)
        topt.step()
    torch.testing.assert_close(ours[0][1].detach(), ref.detach(), rtol=1e-5, atol=1e-7)
    assert not torch.equal(ours[0][1].detach(), p0)


def test_host_kernel_setting_and_a_missing_compiler(monkeypatch):
    with pytest.raises(MliteError, match="host_kernel 'fast': use one of auto, c, torch"):
        host_fused.choose("fast")
    monkeypatch.setattr(host_fused, "_LIB", {})
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert host_fused.choose("auto") == "torch"
    assert "no C compiler" in host_fused.status()
    with pytest.raises(MliteError, match="host_kernel 'c': the host AdamW kernel cannot be built"):
        host_fused.choose("c")
