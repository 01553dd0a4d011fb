"""Process-group plumbing for the lite runtime: device selection, init/teardown, and a local multi-process runner.

* :func:`init_distributed` joins (or creates) the default process group: under ``torchrun`` it reads ``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; without them it starts a one-process group on an
  in-process store (no port, so no race with other programs for one), so a runtime also works in a plain script or a
  test. Backend: ``nccl`` on CUDA, ``gloo`` on CPU.
  Every collective has a timeout (default 300 s), so a lost peer ends a run with an error instead of a hang.
* :func:`destroy_distributed` barriers, then destroys the group (gloo needs the barrier or the peer that exits first
  may leave the other blocked in a pending collective).
* :func:`run_local` starts ``nprocs`` worker processes on this machine (``spawn`` start method, fresh interpreters),
  each inside an initialised process group, and returns what each rank's function returned. Tests use it for the
  2-process gloo runs; it kills the workers when one fails or the timeout passes.
"""

from __future__ import annotations

import datetime
import os
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import MliteError

DEFAULT_TIMEOUT_S = 300.0
"""Collective timeout of the process group, seconds."""


@dataclass(frozen=True, slots=True)
class DistInfo:
    """Where this process sits in the job."""

    rank: int
    """Global rank."""
    world_size: int
    """Number of processes."""
    local_rank: int
    """Rank on this node (selects the GPU)."""
    device: Any
    """``torch.device`` this rank computes on (``cpu`` or ``cuda:<local_rank>``)."""
    backend: str
    """Process-group backend: ``gloo`` or ``nccl``."""


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resolve_device(device: str | None, local_rank: int = 0):
    """``"auto"``/None -> cuda if available else cpu; ``"cuda"`` -> ``cuda:<local_rank>``; checks availability."""
    import torch

    name = (device or "auto").strip().lower()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise MliteError(
                f"device: {device!r} asked for but CUDA is not available on this machine; use device='cpu'"
            )
        idx = int(name.split(":", 1)[1]) if ":" in name else local_rank % torch.cuda.device_count()
        return torch.device("cuda", idx)
    if name == "cpu":
        return torch.device("cpu")
    raise MliteError(f"device: {device!r} is not supported by the lite runtime; use 'cpu', 'cuda' or 'auto'")


def init_distributed(device: str | None = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> DistInfo:
    """Join the default process group (creating it if needed) and pick this rank's device."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        dev = resolve_device(device, local_rank)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        return DistInfo(rank, world, local_rank, dev, dist.get_backend())
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    dev = resolve_device(device, local_rank)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    kwargs: dict[str, Any] = {"device_id": dev} if dev.type == "cuda" else {}
    if world == 1 and "MASTER_PORT" not in os.environ:
        # one process and no rendezvous given: a store in this process. A port picked free and bound a moment later
        # can be taken in between by another program (CI lost that race as EADDRINUSE); a HashStore binds nothing.
        kwargs["store"] = dist.HashStore()
    else:
        if "MASTER_PORT" not in os.environ:
            raise MliteError("MASTER_PORT is not set for a multi-process run; start the workers with torchrun")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        kwargs["init_method"] = "env://"
    dist.init_process_group(
        backend=backend,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
        **kwargs,
    )
    return DistInfo(rank, world, local_rank, dev, backend)


def destroy_distributed() -> None:
    """Barrier, then destroy the default process group (no-op when none is up)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    try:
        dist.barrier()
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------- local runner
def _worker(local_rank: int, fn: Callable, world: int, port: int, outdir: str, args: tuple, device: str) -> None:
    os.environ.update(
        RANK=str(local_rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(local_rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    out = Path(outdir) / f"rank{local_rank}.pt"
    try:
        init_distributed(device)
        result = fn(local_rank, world, *args)
        destroy_distributed()
        torch.save({"ok": True, "result": result}, out)
    except BaseException:
        torch.save({"ok": False, "error": traceback.format_exc()}, out)
        raise


def run_local(
    fn: Callable, nprocs: int = 2, args: tuple = (), *, device: str = "cpu", timeout_s: float = 120.0
) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``nprocs`` fresh processes with a process group; return the results.

    ``fn`` must be importable by name (a module-level function). Its return value travels back with ``torch.save``
    (tensors, numbers, dicts). A failing rank raises ``RuntimeError`` here with that rank's traceback. If the
    rendezvous port was taken in the meantime by another program, the start is retried once on a new port.
    """
    try:
        return _run_local_once(fn, nprocs, args, device, timeout_s)
    except RuntimeError as e:
        if "address already in use" not in str(e).lower() and "EADDRINUSE" not in str(e):
            raise
        return _run_local_once(fn, nprocs, args, device, timeout_s)


def _run_local_once(fn: Callable, nprocs: int, args: tuple, device: str, timeout_s: float) -> list:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="mlite-dist-") as tmp:
        ctx = mp.start_processes(
            _worker,
            args=(fn, nprocs, free_port(), tmp, tuple(args), device),
            nprocs=nprocs,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=0.5):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"run_local: workers still running after {timeout_s:.0f} s")
        except mp.ProcessRaisedException:
            pass
        except mp.ProcessExitedException:
            pass
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
                    p.join(5)
        import torch

        results: list[Any] = []
        errors: list[str] = []
        for r in range(nprocs):
            f = Path(tmp) / f"rank{r}.pt"
            if not f.exists():
                errors.append(f"rank {r}: exited without a result (exit code {ctx.processes[r].exitcode})")
                results.append(None)
                continue
            rec = torch.load(f, weights_only=False)
            if rec["ok"]:
                results.append(rec["result"])
            else:
                errors.append(f"rank {r}:\n{rec['error']}")
                results.append(None)
        if errors:
            raise RuntimeError("run_local: worker failure\n" + "\n".join(errors))
        return results
