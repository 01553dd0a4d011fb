"""The Ray launcher (``launcher="ray"``): one Ray actor per worker, the same worker code as under torchrun.

``python -m mlite.launch.ray_launcher RUN_DIR`` is the launcher process :func:`mlite.launch.start` spawns (the Ray
driver). It starts a private local Ray instance (``address="local"``: never joins a cluster that happens to run;
``num_cpus = nproc``, no dashboard, a small object store), creates ``nproc`` actors (1 CPU each, 1 GPU each on
CUDA), gives each ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR`` / ``MASTER_PORT`` and calls
:func:`mlite.launch.worker.run_worker` in it. When a worker raises (or its actor dies), the other actors are
killed at once (they would otherwise wait in a collective until its timeout). Ray is shut down in every case, then
the run is finalized like a torchrun run (see :mod:`mlite.launch.supervisor`).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

from ..rundir import OUTCOMES
from .rundir import RunDir
from .supervisor import Terminator, finalize, main_usage, worker_env

OBJECT_STORE_BYTES = 100 * 1024**2
"""Plasma store size of the local Ray instance (the workers pass nothing big through it)."""


def command(run_dir, nproc: int) -> str:
    """The command as a user would type it (``command.txt``, ``RunHandle.command``)."""
    return shlex.join(["python", "-m", "mlite.launch.ray_launcher", str(run_dir)]) + f"  # {nproc} Ray actors"


def launcher_argv(run_dir) -> list[str]:
    return [sys.executable, "-m", "mlite.launch.ray_launcher", str(run_dir)]


class RayWorker:
    """The actor class: one training process of the run."""

    def run(self, run_dir: str, rank: int, world: int, port: int, threads: int) -> dict:
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS=str(threads),
        )
        from .worker import run_worker

        return run_worker(run_dir)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}".strip(": ")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        return main_usage("ray_launcher")
    rd = RunDir(Path(argv[0]).resolve())
    cfg = rd.read_config()
    rd.write_status(pid=os.getpid())
    term = Terminator()
    env = worker_env(cfg.worker_threads())
    os.environ.update({k: env[k] for k in ("PYTHONPATH", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "PYTHONWARNINGS")})
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    exit_code, fallback = 0, ""
    import ray

    from ..runtime.dist import free_port

    cuda = cfg.device == "cuda"
    try:
        ray.init(
            address="local",
            num_cpus=cfg.nproc,
            num_gpus=cfg.nproc if cuda else 0,
            include_dashboard=False,
            object_store_memory=OBJECT_STORE_BYTES,
            log_to_driver=True,
            namespace="mlite-lab",
            configure_logging=False,
        )
        # Any: ray's stubs type the decorated class as a union of the class and its handle
        actor_cls: Any = ray.remote(num_cpus=1, num_gpus=1 if cuda else 0, max_restarts=0)(RayWorker)
        actors = [actor_cls.remote() for _ in range(cfg.nproc)]
        port = free_port()
        refs = {a.run.remote(str(rd.path), r, cfg.nproc, port, cfg.worker_threads()): r for r, a in enumerate(actors)}
        pending = list(refs)
        while pending and not term.terminated:
            done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as e:  # RayTaskError (the worker raised) or RayActorError (it died)
                    exit_code = 1
                    fallback = fallback or f"worker {refs[ref]} (Ray actor) failed: {_first_line(e)}"
            if exit_code:
                break
        for a in actors:
            ray.kill(a)
    except Exception as e:  # noqa: BLE001 -- Ray itself did not start or broke: the run fails with its line
        exit_code = 1
        fallback = fallback or f"Ray launcher: {_first_line(e)}"
    finally:
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001 -- shutting a broken Ray down is best effort; the status is decided
            pass
    if term.terminated and not exit_code:
        exit_code = -15
    doc = finalize(rd, exit_code=exit_code, launcher_output=fallback, terminated=term.terminated, launcher="ray")
    return 0 if doc["status"] in OUTCOMES else 1


if __name__ == "__main__":
    sys.exit(main())
