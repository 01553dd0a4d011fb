"""Gated DeltaNet ops against fla's naive references (forward and gradients), varlen, GVA, the packed short conv."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mlite.errors import MliteError
from mlite.runtime import gdn
from mlite.runtime.gdn import causal_conv1d_packed, chunk_gated_delta_rule_torch, gated_delta_rule


def _load_fla_naive():
    """fla's ``ops/gated_delta_rule/naive.py`` loaded on its own: importing the ``fla`` package pulls in Triton and
    every kernel (~14 s); the reference file needs only torch and einops."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("fla")  # locates the installed package without importing it
    assert spec is not None and spec.origin, "flash-linear-attention is a test dependency (extra 'fla')"
    path = Path(spec.origin).parent / "ops" / "gated_delta_rule" / "naive.py"
    mod_spec = importlib.util.spec_from_file_location("_fla_gdn_naive", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod


naive = _load_fla_naive()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny ops run fastest on one thread (and several threads thrash on a busy 2-core CI box)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _inputs(B, T, H, K, V, *, HV=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    HV = HV or H
    q = torch.randn(B, T, H, K, generator=g, dtype=dtype)
    k = F.normalize(torch.randn(B, T, H, K, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, T, HV, V, generator=g, dtype=dtype)
    gate = -F.softplus(torch.randn(B, T, HV, generator=g, dtype=dtype))  # log decay <= 0
    beta = torch.rand(B, T, HV, generator=g, dtype=dtype)
    return [x.requires_grad_() for x in (q, k, v, gate, beta)]


def _grads(out, xs, seed=1):
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad(out, xs, go)


def _ref(q, k, v, g, beta, **kw):
    """fla's recurrent reference (it computes in fp32)."""
    return naive.naive_recurrent_gated_delta_rule(q, k, v, beta, g, **kw)[0]


def _assert_close(a, b, tol, what=""):
    err = (a.float() - b.float()).abs().max().item()
    assert err <= tol * max(1.0, b.float().abs().max().item()), (what, err)


@pytest.mark.parametrize(
    "B,T,H,K,V,chunk",
    [(2, 37, 3, 8, 6, 16), (1, 130, 2, 16, 16, 64), (1, 64, 2, 8, 8, 64), (3, 5, 1, 4, 4, 16), (1, 300, 4, 32, 32, 64)],
)
def test_matches_naive_recurrent_forward_and_backward(B, T, H, K, V, chunk):
    xs = _inputs(B, T, H, K, V)
    out = chunk_gated_delta_rule_torch(*xs, chunk_size=chunk)
    ref = _ref(*xs)
    _assert_close(out, ref, 2e-5, "forward")
    for name, a, b in zip(["q", "k", "v", "g", "beta"], _grads(out, xs), _grads(ref, xs)):
        _assert_close(a, b, 5e-5, name)


def test_matches_naive_chunk_with_scale():
    xs = _inputs(2, 100, 2, 16, 8)
    out = chunk_gated_delta_rule_torch(*xs, scale=0.3, chunk_size=32)
    q, k, v, g, beta = xs
    ref = naive.naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64, scale=0.3)[0]
    _assert_close(out, ref, 2e-5, "forward")
    for name, a, b in zip(["q", "k", "v", "g", "beta"], _grads(out, xs), _grads(ref, xs)):
        _assert_close(a, b, 5e-5, name)


@pytest.mark.parametrize("lens", [(20, 1, 45, 7), (64, 64), (130,), (3, 70, 16)])
def test_varlen_equals_each_sequence_alone(lens):
    T = sum(lens)
    xs = _inputs(1, T, 2, 8, 8, seed=3)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])
    out = chunk_gated_delta_rule_torch(*xs, cu_seqlens=cu, chunk_size=16)
    refs, s = [], 0
    for n in lens:
        refs.append(_ref(*(x[:, s : s + n] for x in xs)))
        s += n
    ref = torch.cat(refs, dim=1)
    _assert_close(out, ref, 2e-5, "forward")
    for name, a, b in zip(["q", "k", "v", "g", "beta"], _grads(out, xs), _grads(ref, xs)):
        _assert_close(a, b, 5e-5, name)


def test_gva_and_l2norm_match_repeated_heads():
    """HV = 2H value heads: key head i serves value heads 2i and 2i+1 (fla / HF order); q, k L2-normalised."""
    xs = _inputs(1, 50, 2, 8, 4, HV=4)
    out = chunk_gated_delta_rule_torch(*xs, use_qk_l2norm=True, chunk_size=16)
    q, k, v, g, beta = xs
    qn = F.normalize(q, dim=-1, eps=0).repeat_interleave(2, dim=2)
    kn = F.normalize(k, dim=-1, eps=0).repeat_interleave(2, dim=2)
    ref = _ref(qn, kn, v, g, beta)
    _assert_close(out, ref, 1e-4, "forward")
    for name, a, b in zip(["q", "k", "v", "g", "beta"], _grads(out, xs), _grads(ref, xs)):
        _assert_close(a, b, 2e-4, name)


def test_gradcheck_float64_varlen():
    xs = [x.detach().double().requires_grad_() for x in _inputs(1, 14, 2, 3, 2, seed=5)]
    assert torch.autograd.gradcheck(lambda *a: chunk_gated_delta_rule_torch(*a, lengths=(5, 2, 7), chunk_size=4), xs)


def test_float64_stays_float64_and_matches_fp32_reference():
    xs = [x.detach().double().requires_grad_() for x in _inputs(2, 40, 2, 8, 8, seed=7)]
    out = chunk_gated_delta_rule_torch(*xs, chunk_size=16)
    assert out.dtype == torch.float64
    _assert_close(out, _ref(*xs), 2e-5)


def test_dispatcher_uses_torch_on_cpu_and_checks_setting(monkeypatch):
    xs = _inputs(1, 40, 2, 8, 8)
    q, k, v, g, beta = (x[0] for x in xs)
    out = gated_delta_rule(q, k, v, g, beta, lengths=(25, 15), use_qk_l2norm=False)
    ref = chunk_gated_delta_rule_torch(*xs, lengths=(25, 15))[0]
    assert torch.equal(out, ref)
    assert gdn.backend_for(torch.device("cpu"), torch.float32) == "torch"
    monkeypatch.setenv("MLITE_GDN_BACKEND", "cuda-please")
    with pytest.raises(MliteError, match="MLITE_GDN_BACKEND"):
        gdn.backend_for(torch.device("cpu"), torch.float32)


def test_gva_requires_multiple_heads():
    xs = _inputs(1, 8, 2, 4, 4, HV=3)
    with pytest.raises(MliteError, match="multiple of key heads"):
        chunk_gated_delta_rule_torch(*xs)


@pytest.mark.parametrize("lens", [(9,), (5, 1, 2, 8), (1, 1, 1)])
def test_packed_causal_conv_respects_sequence_starts(lens):
    """Same as HF's ``conv1d(padding=K-1)[..., :T]`` run on each sequence alone."""
    C, K = 6, 4
    g = torch.Generator().manual_seed(0)
    x = torch.randn(sum(lens), C, generator=g, requires_grad=True)
    w = torch.randn(C, 1, K, generator=g, requires_grad=True)
    starts = torch.tensor([0, *torch.tensor(lens).cumsum(0)[:-1].tolist()])
    pos = torch.arange(sum(lens)) - torch.repeat_interleave(starts, torch.tensor(lens))
    out = causal_conv1d_packed(x, w, pos if len(lens) > 1 else None)
    refs, s = [], 0
    for n in lens:
        seg = x[s : s + n].t()[None]
        refs.append(F.conv1d(seg, w, padding=K - 1, groups=C)[0, :, :n].t())
        s += n
    ref = torch.cat(refs)
    torch.testing.assert_close(out, ref)
    go = torch.randn(out.shape, generator=g)
    for a, b in zip(torch.autograd.grad(out, (x, w), go), torch.autograd.grad(ref, (x, w), go)):
        torch.testing.assert_close(a, b)
