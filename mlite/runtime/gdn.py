"""Gated DeltaNet ops: a pure-PyTorch chunked gated delta rule (varlen, autograd), the packed short causal
convolution, and a dispatcher that uses fla's Triton kernel on CUDA when it works.

Recurrence (per sequence, per value head; state ``S`` is ``[K, V]``, starting at 0), the same as fla's
``naive_recurrent_gated_delta_rule``::

    S_t = exp(g_t) * S_{t-1}
    u_t = beta_t * (v_t - S_t^T k_t)
    S_t = S_t + k_t u_t^T
    o_t = S_t^T (scale * q_t)

``g`` is the log decay (<= 0; the Qwen3-Next layer uses ``g = -exp(A_log) * softplus(a + dt_bias)``), ``beta`` the
write strength (``sigmoid(b)``), ``scale`` defaults to ``K ** -0.5``; the layer L2-normalises q and k first
(``use_qk_l2norm``, eps 1e-6 as fla). More value heads than key heads (GVA) share each key head across
``HV // H`` consecutive value heads (fla's and HF's ``repeat_interleave`` order).

Chunked form (chunk ``C``, cumulative log decay ``G_r`` inside a chunk, chunk-start state ``S0``)::

    (I + A) U = beta*V - beta*exp(G)*K S0,   A_rs = beta_r exp(G_r - G_s) k_r.k_s  (s < r)
    O = exp(G)*Q S0 + [(Q K^T) . exp(G_r - G_s)]_{s<=r} U,   S_C = exp(G_C) S0 + sum_s exp(G_C - G_s) k_s u_s^T

Everything inside a chunk is batched over all chunks of all sequences (one triangular solve); only the chunk-to-chunk
state hand-over ``S' = M S + B`` (``M = exp(G_C) I - (exp(G_C - G) K)^T W_k``, ``B = (exp(G_C - G) K)^T W_v``) is a
loop of one batched GEMM per step, over the chunk index of the longest sequence (sequences sorted by chunk count, so
the active ones are a prefix and each step works on contiguous slices); outputs are computed after it, batched.
Sequences are padded to whole chunks with ``k = v = q = beta = g = 0``, which leaves real outputs unchanged. Computation runs in fp32 (fp64 inputs stay fp64).
No initial state and no final state: training from the start of each sequence only.
"""

from __future__ import annotations

import itertools
import logging
import os
from functools import lru_cache

import torch
import torch.nn.functional as F

from ..errors import MliteError
from ..models.chunks import GDN_TORCH_CHUNK

log = logging.getLogger("mlite.runtime")

BACKENDS = ("auto", "torch", "fla")
"""``MLITE_GDN_BACKEND`` values: ``auto`` (fla on CUDA if its probe passes), ``torch``, ``fla``."""

_FLA: dict = {}
_WHY: dict = {}


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last dim, in fp32 (fla's ``l2norm``)."""
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + eps)).to(x.dtype)


# ---------------------------------------------------------------------- short convolution
def causal_conv1d_packed(x: torch.Tensor, weight: torch.Tensor, seq_pos: torch.Tensor | None = None) -> torch.Tensor:
    """Depthwise causal convolution over packed tokens, never reaching across a sequence start.

    ``x[T, C]``, ``weight[C, 1, K]`` (``nn.Conv1d(groups=C)`` layout), ``seq_pos[T]`` the index of each token in its
    sequence (None: one sequence). ``out[t] = sum_j weight[:, 0, K-1-j] * x[t-j]`` over ``j <= seq_pos[t]``, i.e.
    HF's ``conv1d(padding=K-1)[..., :T]`` applied to each sequence alone. No activation.
    """
    w = weight.reshape(weight.shape[0], -1)
    K = w.shape[1]
    out = x * w[:, K - 1]
    for j in range(1, min(K, x.shape[0])):
        shifted = F.pad(x[:-j], (0, 0, j, 0))
        if seq_pos is not None:
            shifted = shifted * (seq_pos >= j).to(x.dtype)[:, None]
        out = out + shifted * w[:, K - 1 - j]
    return out


# ---------------------------------------------------------------------- chunk layout
@lru_cache(maxsize=16)
def _layout(lengths: tuple[int, ...], chunk: int, device: str):
    """Token -> padded chunk row map, chunk count and the (offset, count) slices of each state hand-over step."""
    nch = [-(-n // chunk) for n in lengths]
    order = sorted(range(len(lengths)), key=lambda i: -nch[i])
    rank = [0] * len(lengths)
    for r, i in enumerate(order):
        rank[i] = r
    steps, off = [], 0
    for j in range(max(nch)):
        m = sum(1 for c in nch if c > j)
        steps.append((off, m))
        off += m
    dev = torch.device(device)
    lens = torch.tensor(lengths, device=dev)
    T = sum(lengths)
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=dev), lens, output_size=T)
    starts = torch.cumsum(lens, 0) - lens
    pos = torch.arange(T, device=dev) - starts[seq]
    offs = torch.tensor([s[0] for s in steps], device=dev)
    dest = (offs[pos // chunk] + torch.tensor(rank, device=dev)[seq]) * chunk + pos % chunk
    return dest, off, tuple(steps)


def _to_chunks(x: torch.Tensor, dest, n_chunks: int, chunk: int, single: bool) -> torch.Tensor:
    """``[T, H(, D)]`` -> ``[n_chunks, H, C(, D)]`` (zero padded)."""
    T = x.shape[0]
    if single:
        buf = F.pad(x, (0, 0) * (x.dim() - 1) + (0, n_chunks * chunk - T))
    else:
        buf = x.new_zeros(n_chunks * chunk, *x.shape[1:]).index_copy(0, dest, x)
    return buf.view(n_chunks, chunk, *x.shape[1:]).transpose(1, 2)


def _chunk_gdr(q, k, v, g, beta, lengths: tuple[int, ...], chunk: int, scale: float) -> torch.Tensor:
    """Packed ``q, k[T, H, K]``, ``v[T, H, V]``, ``g, beta[T, H]`` (same head count) -> ``o[T, H, V]``."""
    T, H, Kd = k.shape
    Vd = v.shape[-1]
    dest, n, steps = _layout(lengths, chunk, str(q.device))
    single = len(lengths) == 1
    q, k, v, g, beta = (_to_chunks(x, dest, n, chunk, single) for x in (q * scale, k, v, g, beta))
    dev = q.device
    incl = torch.ones(chunk, chunk, dtype=torch.bool, device=dev).tril()
    strict = incl.tril(-1)
    gam = g.cumsum(-1)  # [n, H, C]
    decay = (gam[..., :, None] - gam[..., None, :]).masked_fill(~incl, float("-inf")).exp()
    kb = k * beta[..., None]
    A = ((kb @ k.transpose(-1, -2)) * decay).masked_fill(~strict, 0.0)
    rhs = torch.cat((v * beta[..., None], kb * gam.exp()[..., None]), dim=-1)
    W = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)
    Wv, Wk = W.split((Vd, Kd), dim=-1)
    Aqk = (q @ k.transpose(-1, -2)) * decay
    qg = q * gam.exp()[..., None]
    glast = gam[..., -1]  # [n, H]
    kd = k * (glast[..., None] - gam).exp()[..., None]  # decay from each token to chunk end
    # chunk-to-chunk state map S' = M S + B (M = exp(G_C) I - kd^T Wk, B = kd^T Wv): one batched GEMM per step
    eye = torch.eye(Kd, dtype=q.dtype, device=dev)
    kdT = kd.transpose(-1, -2)
    M = (glast.exp()[..., None, None] * eye - kdT @ Wk).flatten(0, 1)  # [n*H, K, K]
    Bm = (kdT @ Wv).flatten(0, 1)  # [n*H, K, V]
    S = q.new_zeros(steps[0][1] * H, Kd, Vd)
    states = []
    for i, (off, m) in enumerate(steps):
        S = S[: m * H]
        states.append(S)
        if i + 1 < len(steps):
            S = torch.baddbmm(Bm[off * H : (off + m) * H], M[off * H : (off + m) * H], S)
    S0 = torch.cat(states).view(n, H, Kd, Vd)  # state at each chunk's start
    o = qg @ S0 + Aqk @ (Wv - Wk @ S0)
    o = o.transpose(1, 2).reshape(n * chunk, H, Vd)
    return o[:T] if single else o.index_select(0, dest)


def _lengths(T: int, B: int, cu_seqlens, lengths) -> tuple[int, ...]:
    if lengths is not None:
        return tuple(int(x) for x in lengths)
    if cu_seqlens is not None:
        if B != 1:
            raise MliteError(f"cu_seqlens: packed input needs batch size 1, got {B}")
        cu = [int(x) for x in cu_seqlens.tolist()]
        return tuple(b - a for a, b in itertools.pairwise(cu))
    return (T,) * B


def chunk_gated_delta_rule_torch(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale: float | None = None,
    cu_seqlens=None,
    lengths=None,
    chunk_size: int = 64,
    use_qk_l2norm: bool = False,
) -> torch.Tensor:
    """Pure-PyTorch gated delta rule in fla's layout: ``q, k[B, T, H, K]``, ``v[B, T, HV, V]``, ``g, beta[B, T, HV]``
    -> ``o[B, T, HV, V]`` (in ``v``'s dtype). ``cu_seqlens`` (or host ``lengths``) with ``B == 1`` runs each packed
    sequence from a zero state, like fla's varlen mode."""
    B, T, H, Kd = q.shape
    HV = v.shape[2]
    if HV % H:
        raise MliteError(f"gated delta rule: value heads {HV} must be a multiple of key heads {H}")
    lens = _lengths(T, B, cu_seqlens, lengths)
    if sum(lens) != B * T:
        raise MliteError(f"cu_seqlens: lengths sum to {sum(lens)}, expected {B * T} tokens")
    scale = Kd**-0.5 if scale is None else float(scale)
    out_dtype = v.dtype
    ct = torch.promote_types(v.dtype, torch.float32)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q, k, v, g, beta = (x.reshape(B * T, *x.shape[2:]).to(ct) for x in (q, k, v, g, beta))
    if HV != H:
        q, k = q.repeat_interleave(HV // H, dim=1), k.repeat_interleave(HV // H, dim=1)
    o = _chunk_gdr(q, k, v, g, beta, lens, int(chunk_size), scale)
    return o.view(B, T, HV, -1).to(out_dtype)


# ---------------------------------------------------------------------- dispatcher
def _backend_setting() -> str:
    b = os.environ.get("MLITE_GDN_BACKEND", "auto").strip().lower() or "auto"
    if b not in BACKENDS:
        raise MliteError(f"MLITE_GDN_BACKEND: '{b}' is not one of {', '.join(BACKENDS)}")
    return b


def _fla_failures() -> tuple[type[BaseException], ...]:
    """What fla's kernel raises when it cannot run here: its own refusals and CUDA errors (RuntimeError, e.g.
    Hopper with Triton < 3.7.1), shape or API assertions and mismatches between fla and torch versions
    (AssertionError, ValueError, TypeError, NotImplementedError), a backend it imports lazily (ImportError), and
    Triton's compile and launch errors (TritonError: CompilationError, OutOfResources, PTXASError)."""
    found: tuple[type[BaseException], ...] = (RuntimeError, AssertionError, ValueError, TypeError, ImportError)
    try:
        from triton.errors import TritonError
    except ImportError:  # fla imported without triton's error module: the others still apply
        return found
    return (*found, TritonError)


def _fla_probe(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    """Run fla's chunk kernel forward + backward on a tiny varlen problem and compare with the PyTorch version.

    A capability probe: a failure here means "fla's kernel does not run on this device", the caller then takes the
    PyTorch path (or, with ``MLITE_GDN_BACKEND=fla``, refuses); only the failures :func:`_fla_failures` names are
    caught, anything else is a bug and propagates."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except (ImportError, RuntimeError, AttributeError) as e:  # not installed, or its import of triton / torch fails
        return False, f"fla does not import ({str(e).splitlines()[0][:160] if str(e) else type(e).__name__})"
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        T, H, HV, Kd, Vd = 150, 2, 4, 64, 64
        lens = (100, 50)

        def r(*s):
            return torch.randn(*s, device=device, dtype=torch.float32, generator=gen)

        base = [r(1, T, H, Kd), r(1, T, H, Kd), r(1, T, HV, Vd), -F.softplus(r(1, T, HV)), torch.sigmoid(r(1, T, HV))]
        grads, outs = [], []
        cu = torch.tensor([0, lens[0], T], device=device, dtype=torch.long)
        for use_fla in (True, False):
            xs = [
                x.to(dtype if i < 3 else (torch.float32 if i == 3 else dtype), copy=True).requires_grad_()
                for i, x in enumerate(base)
            ]
            if use_fla:
                o, _ = chunk_gated_delta_rule(*xs[:3], xs[3], xs[4], cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
            else:
                o = chunk_gated_delta_rule_torch(xs[0], xs[1], xs[2], xs[3], xs[4], lengths=lens, use_qk_l2norm=True)
            o.float().square().sum().backward()
            outs.append(o.float())
            grads.append([x.grad.float() for x in xs])
        tol = 2e-3 if dtype == torch.float32 else 6e-2

        def close(a, b):
            a, b = a.detach(), b.detach()
            return float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))

        if not close(outs[0], outs[1]):
            return False, "fla forward disagrees with the PyTorch reference"
        for name, a, b in zip(("q", "k", "v", "g", "beta"), grads[0], grads[1]):
            if not close(a, b):
                return False, f"fla backward (d{name}) disagrees with the PyTorch reference"
        return True, "ok"
    except _fla_failures() as e:  # fla refuses or fails to compile / launch here
        return False, f"fla kernel failed ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})"


def backend_for(device: torch.device, dtype: torch.dtype) -> str:
    """``fla`` or ``torch`` for tensors on ``device`` of ``dtype`` (fla probed once per device and dtype)."""
    setting = _backend_setting()
    if setting == "torch" or device.type != "cuda":
        return "torch"
    key = (str(device), dtype)
    if key not in _FLA:
        ok, why = _fla_probe(device, dtype)
        if not ok and setting == "fla":
            raise MliteError(f"MLITE_GDN_BACKEND=fla: {why}; unset it to fall back to the PyTorch implementation")
        if not ok and not _FLA.get("warned"):
            log.warning("Gated DeltaNet: %s; using the pure-PyTorch chunked implementation", why)
            _FLA["warned"] = True
        _FLA[key] = "fla" if ok else "torch"
        _WHY[key] = why
    return _FLA[key]


def backend_note(device: torch.device, dtype: torch.dtype) -> str:
    """Which implementation Gated DeltaNet takes for ``device`` and ``dtype``, and why (a run log line)."""
    if backend_for(device, dtype) == "fla":
        return "fla's chunk kernels (the probe passed)"
    if _backend_setting() == "torch":
        return "the PyTorch chunked implementation (MLITE_GDN_BACKEND=torch)"
    if device.type != "cuda":
        return "the PyTorch chunked implementation (fla's kernels need CUDA)"
    return f"the PyTorch chunked implementation ({_WHY.get((str(device), dtype), 'the fla probe failed')})"


def gated_delta_rule(
    q,
    k,
    v,
    g,
    beta,
    *,
    lengths: tuple[int, ...],
    cu_seqlens: torch.Tensor | None = None,
    scale: float | None = None,
    use_qk_l2norm: bool = True,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Packed ``q, k[T, H, K]``, ``v[T, HV, V]``, ``g, beta[T, HV]`` -> ``o[T, HV, V]``: fla's chunk kernel on CUDA
    where it works, else :func:`chunk_gated_delta_rule_torch` (chunk
    :data:`~mlite.models.chunks.GDN_TORCH_CHUNK` per device type unless ``chunk_size`` is given). ``g`` should be
    fp32."""
    if backend_for(q.device, q.dtype) == "fla":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        cu = None
        if len(lengths) > 1:
            cu = (
                cu_seqlens.long()
                if cu_seqlens is not None
                else torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=q.device)
            )
        o, _ = chunk_gated_delta_rule(
            q[None],
            k[None],
            v[None],
            g[None],
            beta[None],
            scale=scale,
            cu_seqlens=cu,
            use_qk_l2norm_in_kernel=use_qk_l2norm,
        )
        return o[0]
    chunk = chunk_size or GDN_TORCH_CHUNK.get(q.device.type, GDN_TORCH_CHUNK["cpu"])
    o = chunk_gated_delta_rule_torch(
        q[None],
        k[None],
        v[None],
        g[None],
        beta[None],
        scale=scale,
        lengths=lengths,
        chunk_size=chunk,
        use_qk_l2norm=use_qk_l2norm,
    )
    return o[0]
