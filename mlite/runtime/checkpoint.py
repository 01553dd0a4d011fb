"""Checkpoints of the lite runtime: ``torch.distributed.checkpoint`` (DCP) for the sharded tensors, a JSON file for
the counters.

Layout of a checkpoint directory::

    dcp/            DCP files: "model" (FSDP2 sharded state dict) and "optim" ({param name: {state name: DTensor}})
    runtime.json    optimizer step count, scheduler state, whether optimizer state exists, the storage layout
                    (modes fp32-param / master / remainder, moment dtypes, param dtype), world size, run config

The optimizer state is saved as DTensors with the same mesh and placements as their parameters, so DCP has what it
needs to reshard on load (the tests cover resuming at the same world size only). Loading needs the same storage layout (a PAO-remainder checkpoint does not load into
an fp32-master run: :class:`~mlite.errors.MliteError`), unless ``load_optimizer=False``. The state is loaded in place
(allocated first if the run has not stepped yet). RNG state is not saved: the lite models have no dropout.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch.distributed as dist

from ..errors import MliteError


def layout(handle) -> dict:
    """What must match between a checkpoint's optimizer state and the loading run."""
    o = handle.optimizer
    return {
        "modes": sorted({s.mode for s in o.slots}),
        "exp_avg_dtype": o.cfg.exp_avg_dtype,
        "exp_avg_sq_dtype": o.cfg.exp_avg_sq_dtype,
        "param_dtype": handle.runtime.param_dtype_name,
    }


def save(handle, path) -> Path:
    """Save model + optimizer shards (every rank) and the counters (rank 0) under ``path``."""
    import torch.distributed.checkpoint as dcp

    path = Path(path)
    sd = {"model": handle.model.state_dict(), "optim": handle.optimizer.state_dtensors()}
    dcp.save(sd, checkpoint_id=str(path / "dcp"))
    rt = handle.runtime
    if rt.rank == 0:
        meta = {
            "step_count": handle.optimizer.step_count,
            "scheduler": handle.scheduler.state_dict(),
            "has_optimizer_state": handle.optimizer.initialized,
            "layout": layout(handle),
            "world_size": rt.world_size,
            "config": rt.cfg.to_dict(),
        }
        (path / "runtime.json").write_text(json.dumps(meta, indent=1, default=str))
    if dist.is_initialized():
        dist.barrier()
    return path


def load(handle, path, load_optimizer: bool = True) -> None:
    """Load a checkpoint written by :func:`save` into ``handle`` in place."""
    import torch.distributed.checkpoint as dcp

    path = Path(path)
    meta_f = path / "runtime.json"
    if not meta_f.is_file():
        raise MliteError(f"checkpoint: {meta_f} not found; pass the directory save_checkpoint wrote")
    meta = json.loads(meta_f.read_text())
    if load_optimizer and meta["layout"] != layout(handle):
        raise MliteError(
            f"checkpoint: optimizer layout {meta['layout']} differs from this run's {layout(handle)}; "
            "load with the same optimizer settings or load_optimizer=False"
        )
    with_opt = load_optimizer and meta["has_optimizer_state"]
    if with_opt:
        handle.optimizer.init_state()
    sd = {"model": handle.model.state_dict()}
    if with_opt:
        sd["optim"] = handle.optimizer.state_dtensors()
    dcp.load(sd, checkpoint_id=str(path / "dcp"))
    handle.model.load_state_dict(sd["model"])
    if load_optimizer:
        handle.optimizer.step_count = int(meta["step_count"])
        handle.scheduler.load_state_dict(meta["scheduler"])
