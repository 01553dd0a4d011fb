"""The fla capability probe of :mod:`mlite.runtime.gdn` catches what fla raises when its kernel cannot run here (the
caller then takes the PyTorch path) and nothing else: a bug inside the probe propagates. fla is replaced by a stub
module whose kernel raises what the test asks (the probe on a real CPU takes the RuntimeError path)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from mlite.runtime import gdn


def _stub_fla(monkeypatch, kernel) -> None:
    for name in ("fla", "fla.ops"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    mod = types.ModuleType("fla.ops.gated_delta_rule")
    mod.chunk_gated_delta_rule = kernel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fla.ops.gated_delta_rule", mod)


def _raises(exc):
    def kernel(*args, **kwargs):
        raise exc

    return kernel


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results"),
        AssertionError("head dim must be a multiple of 16"),
        TypeError("chunk_gated_delta_rule() got an unexpected keyword argument 'cu_seqlens'"),
        ImportError("No module named 'tilelang'"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_kernel_that_cannot_run_here_is_a_verdict(monkeypatch, exc):
    _stub_fla(monkeypatch, _raises(exc))
    ok, why = gdn._fla_probe(torch.device("cpu"), torch.float32)
    assert not ok and why.startswith(f"fla kernel failed ({type(exc).__name__}: {str(exc)[:40]}")


def test_a_bug_in_the_probe_is_not_swallowed(monkeypatch):
    _stub_fla(monkeypatch, _raises(KeyError("cu_seqlens")))
    with pytest.raises(KeyError):
        gdn._fla_probe(torch.device("cpu"), torch.float32)


def test_fla_that_does_not_import_is_a_verdict(monkeypatch):
    monkeypatch.setitem(sys.modules, "fla.ops.gated_delta_rule", None)  # import raises ModuleNotFoundError
    ok, why = gdn._fla_probe(torch.device("cpu"), torch.float32)
    assert not ok and why.startswith("fla does not import")


def test_a_kernel_that_runs_and_agrees_passes(monkeypatch):
    """The probe's own comparison: a 'kernel' that is the PyTorch reference passes, a wrong one does not."""

    def reference(q, k, v, g, beta, cu_seqlens=None, use_qk_l2norm_in_kernel=True):
        lens = torch.diff(cu_seqlens).tolist()
        return gdn.chunk_gated_delta_rule_torch(q, k, v, g, beta, lengths=lens, use_qk_l2norm=True), None

    _stub_fla(monkeypatch, reference)
    assert gdn._fla_probe(torch.device("cpu"), torch.float32) == (True, "ok")
    _stub_fla(monkeypatch, lambda *a, **kw: (reference(*a, **kw)[0] * 1.5, None))
    assert gdn._fla_probe(torch.device("cpu"), torch.float32) == (
        False,
        "fla forward disagrees with the PyTorch reference",
    )


def test_a_kernel_whose_backward_disagrees_fails_the_probe(monkeypatch):
    """The forward alone is not the verdict: a 'kernel' with the reference's output but gradients 1.5x too large
    (the value of ``o + (o / 2 - (o / 2).detach())`` is ``o``, its gradient 1.5 times ``o``'s) fails on the
    backward."""

    def wrong_backward(q, k, v, g, beta, cu_seqlens=None, use_qk_l2norm_in_kernel=True):
        lens = torch.diff(cu_seqlens).tolist()
        o = gdn.chunk_gated_delta_rule_torch(q, k, v, g, beta, lengths=lens, use_qk_l2norm=True)
        return o + (o / 2 - (o / 2).detach()), None

    _stub_fla(monkeypatch, wrong_backward)
    ok, why = gdn._fla_probe(torch.device("cpu"), torch.float32)
    assert not ok and why.startswith("fla backward (d") and why.endswith("disagrees with the PyTorch reference")


@pytest.mark.parametrize(
    "setting, probe, device, want",
    [
        ("auto", (True, "ok"), "cuda", "fla's chunk kernels (the probe passed)"),
        ("auto", (False, "fla kernel failed (RuntimeError: Triton < 3.7.1)"), "cuda", "(fla kernel failed (Runtime"),
        ("torch", (True, "ok"), "cuda", "(MLITE_GDN_BACKEND=torch)"),
        ("auto", (True, "ok"), "cpu", "(fla's kernels need CUDA)"),
    ],
)
def test_the_run_log_line_names_the_path_taken_and_why(monkeypatch, setting, probe, device, want):
    """``backend_note`` is the train.log line of a hybrid run: the implementation taken and the probe's verdict."""
    monkeypatch.setenv("MLITE_GDN_BACKEND", setting)
    monkeypatch.setattr(gdn, "_FLA", {})
    monkeypatch.setattr(gdn, "_WHY", {})
    calls = []
    monkeypatch.setattr(gdn, "_fla_probe", lambda d, t: calls.append(d) or probe)
    note = gdn.backend_note(torch.device(device), torch.bfloat16)
    assert want in note
    assert note.startswith("fla") == (probe[0] and setting == "auto" and device == "cuda")
    assert len(calls) == (1 if setting == "auto" and device == "cuda" else 0)  # probed once, on CUDA only
