"""``start(config) -> RunHandle``: create the run directory and spawn the launcher process; never trains in the
caller's process or threads (a notebook kernel stays responsive: it only polls files).

::

    from mlite.launch import RunConfig, start
    run = start(RunConfig(model="tiny-moe", steps=30, nproc=2, device="cpu"))
    run.wait(); run.metrics()["train/loss"]
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import replace

from ..errors import MliteError
from ..rundir import RUNNING
from .config import RunConfig
from .handle import RunHandle
from .rundir import RunDir, now_iso
from .validate import validate_run


def launcher_module(config: RunConfig):
    """The module (torchrun or ray_launcher) that launches ``config``'s workers."""
    from . import ray_launcher, torchrun, verl_checks, verl_sft  # none imports torch, ray or verl at module level

    verl_checks.refuse_unused(config)
    if config.trainer == "verl-sft":
        return verl_sft
    return ray_launcher if config.launcher == "ray" else torchrun


def start(config: RunConfig | None = None, *, dry_run: bool = False, overwrite: bool = False, **overrides) -> RunHandle:
    """Start a debug run (``overrides`` replace fields of ``config``, e.g. ``start(steps=10)``).

    ``dry_run``: validate and return a handle with ``command`` set, without writing or starting anything.
    ``overwrite``: reuse ``config.out`` even if it holds an older run (its run files are replaced).
    Bad input raises :class:`~mlite.errors.MliteError` here (:func:`~mlite.launch.validate.validate_run`), before
    any process starts or any file is written; relative paths are taken from the current directory.
    """
    cfg = config if config is not None else RunConfig()
    if not isinstance(cfg, RunConfig):
        raise MliteError(f"start: expected a RunConfig, got {type(cfg).__name__}")
    try:
        cfg = replace(cfg, **overrides)
    except TypeError as e:
        raise MliteError(f"start: {e}") from None
    cfg = validate_run(cfg, overwrite=overwrite)
    out = cfg.resolved_out()  # absolute already: validate_run resolved it
    mod = launcher_module(cfg)
    command = mod.command(out, cfg) if cfg.trainer == "verl-sft" else mod.command(out, cfg.nproc)
    cli = shlex.join(["mlite", "run", *cfg.cli_args(), "--out", str(out)])
    if dry_run:
        return RunHandle(out, config=cfg, command=command, started=False)
    rd = RunDir(out)
    rd.create(cfg.to_dict(), command, cli, overwrite=overwrite)
    rd.write_status(
        status=RUNNING,
        reason=None,
        launcher=cfg.launcher,
        started_at=now_iso(),
        pid=None,
        ended_at=None,
        exit_code=None,
        steps=0,
    )
    from .supervisor import worker_env

    with open(rd.console, "ab") as con:
        proc = subprocess.Popen(
            mod.launcher_argv(out),
            stdout=con,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=worker_env(cfg.worker_threads()),
            cwd=str(out),
        )
    return RunHandle(out, config=cfg, command=command, proc=proc)
