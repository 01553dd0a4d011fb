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
from .axes import DENSE_DIMS, EXPERT_DIMS, model_parallel, product_label
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

    dmp, emp = parallel.dense_model_parallel, parallel.expert_model_parallel
    if world_size % dmp or world_size % emp:
        raise MliteError(
            f"world size {world_size} is not divisible by {product_label(model_parallel(DENSE_DIMS))} = {dmp} and "
            f"{product_label(model_parallel(EXPERT_DIMS))} = {emp}"
        )
    dp, edp = world_size // dmp, world_size // emp
    sizes = parallel.sizes() | {"dp": dp, "edp": edp}
    dense_dims, expert_dims = DENSE_DIMS[::-1], EXPERT_DIMS[::-1]  # outermost first
    dense = init_device_mesh(device_type, tuple(sizes[d] for d in dense_dims), mesh_dim_names=dense_dims)
    dense["dp", "cp"]._flatten("dp_cp")
    expert = init_device_mesh(device_type, tuple(sizes[d] for d in expert_dims), mesh_dim_names=expert_dims)
    return DeviceMeshes(dense=dense, expert=expert, dp=dp, edp=edp)
