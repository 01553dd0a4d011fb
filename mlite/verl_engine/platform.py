"""The CPU platform shim: lets verl's SFT trainer run on a machine without an accelerator (gloo, ``cpu`` device).

verl 0.9.1 resolves its device through a platform singleton (``verl.plugin.platform``) that knows CUDA, ROCm and NPU
only; without a GPU it falls back to CUDA and the trainer fails on ``torch.cuda`` calls. :class:`CPUPlatform`
answers the calls the SFT trainer makes: ``device_name == "cpu"``, ``current_device() == "cpu"`` (verl moves tensors
with ``.to(get_device_id())``, so an index would mean ``cuda:N``), ``gloo`` as the collective backend, and a
``torch.cpu``-like module whose peak memory counters report the process's peak RSS (CPU runs have no device
allocator; verl logs them as ``perf/max_memory_*_gb``: on CPU that is host memory of rank 0, Python and torch
included) and whose current counters report 0. :func:`install` sets it before verl reads the platform. Nothing
here is used on a GPU.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

__all__ = ["install", "patch_process_group"]


def _zero(*_a, **_k) -> int:
    return 0


def _none(*_a, **_k) -> None:
    return None


def _peak_rss(*_a, **_k) -> int:
    """The process's peak resident set size in bytes (Linux ``ru_maxrss`` is in KiB)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _device_module():
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on its device module (no-ops; the peak
    counters verl logs as ``perf/max_memory_*_gb`` report the process's peak RSS, the current ones 0)."""
    import torch

    mod = SimpleNamespace(
        max_memory_allocated=_peak_rss, max_memory_reserved=_peak_rss, memory_allocated=_zero, memory_reserved=_zero
    )
    for n in (
        "empty_cache",
        "synchronize",
        "set_device",
        "reset_peak_memory_stats",
        "manual_seed",
        "manual_seed_all",
        "ipc_collect",
    ):
        setattr(mod, n, _none)
    mod.is_available = lambda: True
    mod.device_count = lambda: 1
    mod.current_device = lambda: "cpu"
    mod.mem_get_info = lambda *_a: (0, 0)
    mod.get_device_name = lambda *_a: "CPU"
    mod.get_rng_state = torch.get_rng_state
    mod.set_rng_state = torch.set_rng_state
    mod.Stream = getattr(torch.cpu, "Stream", None)
    mod.current_stream = getattr(torch.cpu, "current_stream", None)
    mod.stream = getattr(torch.cpu, "stream", None)
    return mod


class _CPUCalls:
    """The calls verl's SFT trainer makes on its platform, answered for a CPU-only host (gloo); a mixin, so that
    this module loads without verl (verl's ``PlatformBase`` is imported by :func:`_platform_class`)."""

    device_name = "cpu"
    vendor_name = "cpu"

    def __init__(self):
        self._mod = _device_module()

    @property
    def device_module(self):
        return self._mod

    def is_available(self) -> bool:
        return True

    def current_device(self):
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        return None

    def synchronize(self, device_index=None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        self.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return (None, None)

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None


def _platform_class():
    """:class:`_CPUCalls` on verl's ``PlatformBase`` (imported here: verl loads only when the shim is used)."""
    from verl.plugin.platform.platform_base import PlatformBase

    class CPUPlatform(_CPUCalls, PlatformBase):
        """verl platform of a CPU-only host (gloo)."""

    return CPUPlatform


def __getattr__(name: str):
    if name == "CPUPlatform":
        return _platform_class()
    raise AttributeError(name)


def install() -> None:
    """Make verl's platform singleton the CPU platform (call before verl's trainer starts)."""
    from verl.plugin.platform import platform_manager

    platform_manager.set_platform(_platform_class()())
    patch_process_group()


def _init_gloo(timeout_second=36000):
    """verl's ``initialize_global_process_group`` with the backend ``gloo`` (verl builds
    ``cpu:gloo,<device>:<backend>``, which torch refuses when the device is ``cpu`` too)."""
    import os
    from datetime import timedelta

    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="gloo", timeout=timedelta(seconds=timeout_second))
    return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def patch_process_group() -> None:
    """Second (and last) part of the shim: a gloo process group on CPU."""
    import verl.utils.distributed as vd

    vd.initialize_global_process_group = _init_gloo
