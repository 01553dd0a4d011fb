"""The one-pass host AdamW (``host_kernel.c``), for ``offload_fraction``'s host update and CPU runs.

:func:`.host.update_chunk` evaluates the update as about 20 eager torch passes per chunk (each op reads and writes
whole fp32 work buffers, torch does not fuse on the CPU); this module compiles ``host_kernel.c`` once per machine
with the system C compiler and calls it through ``ctypes`` (the GIL is released during the call): per element one
read of the gradient, moments and master (or bf16 param + int16 remainder) and one write of each result, OpenMP
threads over the range (torch's intra-op thread count). Its operation sequence is :mod:`.adamw`'s, compiled with
``-ffp-contract=off`` and without fast-math, so its bits equal :func:`.host.update_chunk`'s
(``tests/test_host_fused.py`` holds it to that function, every mode and dtype, bitwise).

Where it applies (:func:`usable`): contiguous CPU tensors, bf16 or fp32 gradients (or none), fp32 or bf16 moments,
a little-endian host. Which path runs is :func:`choose`: ``torch`` (eager), ``c`` (this kernel; an error if it cannot
be built) or ``auto`` (this kernel when a compiler is found and the build succeeds, else eager, with the reason in
:func:`status`). The build goes to ``$MLITE_CACHE_DIR`` (default ``~/.cache/mlite``), keyed by the source, the
compiler and the CPU's flags (``-march=native``), written to a temporary name and renamed (concurrent ranks).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from ...errors import MliteError
from .adamw import StepScalars
from .master import LITTLE_ENDIAN

SOURCE = Path(__file__).with_name("host_kernel.c")
"""The kernel's C source (package data)."""
FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fopenmp", "-fPIC", "-shared"]
"""Compiler flags: no contraction to FMA, no fast-math (IEEE division and square root), vectorised, OpenMP."""
HOST_KERNELS = ("auto", "c", "torch")
"""Values of ``ShardedAdamW.host_kernel``."""

_MODE = {"param": 0, "master": 1, "remainder": 2}
_GRAD = {torch.bfloat16: 1, torch.float32: 2}
_LIB: dict = {}


class _Scalars(ctypes.Structure):
    _fields_ = [(k, ctypes.c_float) for k in ("clip", "b1", "omb1", "b2", "omb2", "ibc1", "ibc2", "eps", "wd", "lr")]
    _fields_ += [("decoupled", ctypes.c_int32)]


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc"))


def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    return next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")


def _build() -> tuple[ctypes.CDLL | None, str]:
    """Compile (or find in the cache) and load the kernel: ``(library, "")`` or ``(None, reason)``."""
    cc = _compiler()
    if cc is None:
        return None, f"no C compiler ({os.environ.get('CC', 'cc')!r} not on PATH)"
    if not LITTLE_ENDIAN:
        return None, "big-endian host"
    src = SOURCE.read_bytes()
    key = hashlib.sha256(src + cc.encode() + " ".join(FLAGS).encode() + _cpu_flags().encode()).hexdigest()[:16]
    cache = Path(os.environ.get("MLITE_CACHE_DIR", Path.home() / ".cache" / "mlite")) / "host_kernel"
    so = cache / f"host_kernel_{key}.so"
    if not so.exists():
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
        os.close(fd)
        r = subprocess.run([cc, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True)
        if r.returncode != 0:
            os.unlink(tmp)
            return None, f"{cc} failed: {(r.stderr or r.stdout).strip()[:400]}"
        os.replace(tmp, so)
    lib = ctypes.CDLL(str(so))
    fn = lib.mlite_adamw_host
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int] * 4 + [ctypes.c_int64] + [ctypes.c_void_p] * 6
    fn.argtypes += [ctypes.POINTER(_Scalars), ctypes.c_int]
    return lib, ""


def _library() -> ctypes.CDLL | None:
    if "lib" not in _LIB:
        _LIB["lib"], _LIB["reason"] = _build()
    return _LIB["lib"]


def status() -> str:
    """``"ok"`` once the kernel is loaded, else why it is not used (building it if not tried yet)."""
    return "ok" if _library() is not None else _LIB["reason"]


def choose(host_kernel: str) -> str:
    """The host update path for the setting ``host_kernel`` (:data:`HOST_KERNELS`): ``"c"`` or ``"torch"``."""
    if host_kernel not in HOST_KERNELS:
        raise MliteError(f"host_kernel {host_kernel!r}: use one of {', '.join(HOST_KERNELS)}")
    if host_kernel == "torch":
        return "torch"
    if _library() is not None:
        return "c"
    if host_kernel == "c":
        raise MliteError(
            f"host_kernel 'c': the host AdamW kernel cannot be built ({_LIB['reason']}); use auto or torch"
        )
    return "torch"


def usable(p: torch.Tensor, grad: torch.Tensor | None, state: dict) -> bool:
    """Whether the kernel takes this range: CPU, contiguous, supported dtypes."""
    ts = [p, state["exp_avg"], state["exp_avg_sq"]] + ([grad] if grad is not None else [])
    ts += [state[k] for k in ("master", "remainder") if k in state]
    return (
        all(t.device.type == "cpu" and t.is_contiguous() for t in ts)
        and (grad is None or grad.dtype in _GRAD)
        and all(state[k].dtype in (torch.float32, torch.bfloat16) for k in ("exp_avg", "exp_avg_sq"))
    )


def takes(host_kernel: str, p: torch.Tensor, grad: torch.Tensor | None, state: dict) -> bool:
    """The one rule for a host update's path: the C kernel when ``host_kernel`` selects it (:func:`choose`) and it
    takes these tensors (:func:`usable`), else the eager torch ops of :mod:`.host` (the runtime and
    :func:`mlite.time.calibrate.host_adam_rate` both ask this)."""
    return choose(host_kernel) == "c" and usable(p, grad, state)


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def update_range(mode: str, p: torch.Tensor, grad: torch.Tensor | None, state: dict, a: int, b: int, sc: StepScalars):
    """:func:`.host.update_chunk`'s update of ``p`` (the range's parameter elements) and ``state[k][a:b]`` in one
    pass (call :func:`choose` first; the tensors must pass :func:`usable`)."""
    lib = _library()
    assert lib is not None, "choose() returned 'c' before this call"
    n = b - a
    if (grad is not None and grad.numel() != n) or p.numel() != n:
        raise ValueError(f"range of {n} elements, param {p.numel()}, grad {None if grad is None else grad.numel()}")
    m, v = state["exp_avg"][a:b], state["exp_avg_sq"][a:b]
    master = state["master"][a:b] if mode == "master" else None
    rem = state["remainder"][a:b] if mode == "remainder" else None
    s = _Scalars(sc.clip, sc.b1, sc.omb1, sc.b2, sc.omb2, sc.ibc1, sc.ibc2, sc.eps, sc.wd, sc.lr, int(sc.decoupled))
    rc = lib.mlite_adamw_host(
        _MODE[mode],
        0 if grad is None else _GRAD[grad.dtype],
        int(m.dtype == torch.bfloat16),
        int(v.dtype == torch.bfloat16),
        n,
        _ptr(p),
        _ptr(grad),
        _ptr(master),
        _ptr(rem),
        _ptr(m),
        _ptr(v),
        ctypes.byref(s),
        torch.get_num_threads(),
    )
    if rc != 0:
        raise ValueError(f"host AdamW kernel: mode {mode!r} / gradient {None if grad is None else grad.dtype}")
