"""The torchrun launcher (default): ``torchrun --standalone --nproc-per-node P -m mlite.launch.worker RUN_DIR``.

``python -m mlite.launch.torchrun RUN_DIR`` is the launcher process :func:`mlite.launch.start` spawns: it runs
torchrun (as ``python -m torch.distributed.run`` of this interpreter, no restarts) and finalizes the run when it
exits (see :mod:`mlite.launch.supervisor`). When a worker fails, torchrun terminates the others and prints the
failed rank and exit code, which the final status line repeats.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from .rundir import RunDir
from .supervisor import main_usage, supervise_subprocess, worker_env


def torchrun_argv(run_dir, nproc: int) -> list[str]:
    """The argv the launcher process runs."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        "0",
        "--monitor-interval",
        "0.5",
        "-m",
        "mlite.launch.worker",
        str(run_dir),
    ]


def command(run_dir, nproc: int) -> str:
    """The worker command as a user would type it (``command.txt``, ``RunHandle.command``)."""
    return shlex.join(
        [
            "torchrun",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(nproc),
            "--max-restarts",
            "0",
            "-m",
            "mlite.launch.worker",
            str(run_dir),
        ]
    )


def launcher_argv(run_dir) -> list[str]:
    """What :func:`mlite.launch.start` spawns."""
    return [sys.executable, "-m", "mlite.launch.torchrun", str(run_dir)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        return main_usage("torchrun")
    rd = RunDir(Path(argv[0]).resolve())
    cfg = rd.read_config()
    return supervise_subprocess(
        rd, torchrun_argv(rd.path, cfg.nproc), worker_env(cfg.worker_threads()), launcher="torchrun"
    )


if __name__ == "__main__":
    sys.exit(main())
