"""``build_device_mesh``: torch DeviceMeshes with named dimensions, for runs on one node.

Two meshes over the same ranks, laid out as :mod:`mlite.mesh.ranks` (and Megatron-Core) order them:
``dense`` with dims ("pp", "dp", "cp", "tp") and ``expert`` with dims ("pp", "edp", "ep", "etp") (outermost first,
as DeviceMesh wants row-major order). FSDP2 shards dense parameters over ``dense["dp", "cp"]`` (flattened as
"dp_cp") and experts over ``expert["edp"]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import MliteError
from .config import ParallelConfig

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclass
class DeviceMeshes:
    """The dense and expert device meshes of one run."""

    dense: DeviceMesh
    """DeviceMesh with dims ("pp", "dp", "cp", "tp")."""
    expert: DeviceMesh
    """DeviceMesh with dims ("pp", "edp", "ep", "etp")."""
    dp: int
    """Dense data-parallel size."""
    edp: int
    """Expert data-parallel size."""


def build_device_mesh(parallel: ParallelConfig, world_size: int, device_type: str = "cpu") -> DeviceMeshes:
    """Create both meshes (the default process group must already be initialised)."""
    from torch.distributed.device_mesh import init_device_mesh

    p = parallel
    if world_size % (p.tp * p.cp * p.pp) or world_size % (p.etp_size * p.ep * p.pp):
        raise MliteError(
            f"world size {world_size} is not divisible by TP*CP*PP = {p.tp * p.cp * p.pp} and "
            f"ETP*EP*PP = {p.etp_size * p.ep * p.pp}"
        )
    dp = world_size // (p.tp * p.cp * p.pp)
    edp = world_size // (p.etp_size * p.ep * p.pp)
    dense = init_device_mesh(device_type, (p.pp, dp, p.cp, p.tp), mesh_dim_names=("pp", "dp", "cp", "tp"))
    dense["dp", "cp"]._flatten("dp_cp")
    expert = init_device_mesh(device_type, (p.pp, edp, p.ep, p.etp_size), mesh_dim_names=("pp", "edp", "ep", "etp"))
    return DeviceMeshes(dense=dense, expert=expert, dp=dp, edp=edp)
