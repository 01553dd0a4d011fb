"""``build_device_mesh``: torch DeviceMeshes with named dimensions, for runs on one node.

Two meshes over the same ranks, laid out as :mod:`mlite.mesh.ranks` (and Megatron-Core) order them:
``dense`` with dims ("pp", "dp", "cp", "tp") and ``expert`` with dims ("pp", "edp", "ep", "etp") (outermost first,
as DeviceMesh wants row-major order). FSDP2 shards dense parameters over ``dense["dp", "cp"]`` (flattened as
"dp_cp") and experts over ``expert["edp"]``.

The meshes are built once per layout and process group: every DeviceMesh dimension is a process group with its own
threads and sockets (gloo) or communicator (NCCL), which are never freed while the default group lives. A notebook
or a test session that builds runtime after runtime in one process would otherwise pile up hundreds of groups (1,161
threads per rank after the shared CPU test groups; the last runs went 10x slower). Runtimes on the same layout share
the groups; a new default group (after ``destroy_process_group``) starts a new cache.
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


_BUILT: dict[tuple, DeviceMeshes] = {}
"""(device type, dense sizes, expert sizes) -> the meshes built on the default group :data:`_BUILT_ON` holds."""
_BUILT_ON: list = []
"""The default process group the meshes in :data:`_BUILT` belong to (one element, or none)."""


def build_device_mesh(parallel: ParallelConfig, world_size: int, device_type: str = "cpu") -> DeviceMeshes:
    """Both meshes of ``parallel`` on ``world_size`` ranks (the default process group must already be initialised):
    built on the first call for a layout, the same objects for the next calls on the same default group."""
    import torch.distributed as dist
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
    dense_shape, expert_shape = tuple(sizes[d] for d in dense_dims), tuple(sizes[d] for d in expert_dims)
    world = dist.group.WORLD
    if not _BUILT_ON or _BUILT_ON[0] is not world:  # a new default group: the old meshes' groups are gone with it
        _BUILT.clear()
        _BUILT_ON[:] = [world]
    key = (device_type, dense_shape, expert_shape)
    if key not in _BUILT:
        dense = init_device_mesh(device_type, dense_shape, mesh_dim_names=dense_dims)
        dense["dp", "cp"]._flatten("dp_cp")
        expert = init_device_mesh(device_type, expert_shape, mesh_dim_names=expert_dims)
        _BUILT[key] = DeviceMeshes(dense=dense, expert=expert, dp=dp, edp=edp)
    return _BUILT[key]
