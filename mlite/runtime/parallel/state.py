"""``ParallelState``: where this rank sits in the run's mesh, and the process groups each parallel axis uses.

The meshes come from :func:`mlite.mesh.build_device_mesh` (dense ``("pp", "dp", "cp", "tp")``, expert
``("pp", "edp", "ep", "etp")``, Megatron-Core's RankGenerator order: TP fastest, then CP, DP; ETP, EP, EDP), so
rank ``r`` has the coordinates :class:`mlite.mesh.RankLayout` gives it.

Groups: FSDP2 shards dense parameters over ``dp_cp`` (DP x CP) and expert parameters over ``edp``; the loss and its
token count are reduced over ``dp_cp`` (every rank of it holds different tokens); the expert all-to-all runs over
``ep``; K/V and Gated DeltaNet inputs are all-gathered over ``cp``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import MliteError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

    from ...mesh import DeviceMeshes, ParallelConfig
    from .cp import ContextParallel
    from .tp import TensorParallel


def check_mesh(parallel) -> None:
    """Raise MliteError for the axes the lite runtime does not run (pp, vpp, etp > 1: :attr:`Axis.lite_refusal
    <mlite.mesh.axes.Axis.lite_refusal>`) and for a pp_layout."""
    from ...mesh.axes import AXES

    for a in AXES:
        v = getattr(parallel, a.name, None)
        if a.lite_refusal and v not in (None, 1):
            raise MliteError(f"parallel.{a.name}={v}: {a.lite_refusal}; the real mlite implements {a.name} > 1 on GPUs")
    if getattr(parallel, "pp_layout", None):
        raise MliteError(
            "parallel.pp_layout: pipeline layouts need pp > 1, which the lite runtime does not "
            "implement; the real mlite does on GPUs"
        )


@dataclass(eq=False)
class ParallelState:
    """This rank's mesh coordinates, sizes and groups."""

    parallel: ParallelConfig
    """The ParallelConfig."""
    world: int
    """World size (TP x CP x DP = EP x EDP)."""
    rank: int
    """Global rank."""
    dp: int
    """Dense data-parallel size."""
    edp: int
    """Expert data-parallel size."""
    dp_rank: int
    """This rank's DP index (selects its data)."""
    cp_rank: int
    """This rank's CP index (selects its chunks of every sequence)."""
    tp_rank: int
    """This rank's TP index."""
    ep_rank: int
    """This rank's EP index (selects its experts)."""
    meshes: DeviceMeshes
    """The :class:`mlite.mesh.DeviceMeshes`."""
    fsdp_dense_mesh: DeviceMesh | None = None
    """``dense["dp_cp"]``: FSDP2 mesh of dense parameters."""
    fsdp_expert_mesh: DeviceMesh | None = None
    """``expert["edp"]``: FSDP2 mesh of expert parameters."""
    tp_mesh: DeviceMesh | None = None
    """``dense["tp"]``."""
    dp_cp_group: ProcessGroup | None = None
    """Process group of DP x CP."""
    edp_group: ProcessGroup | None = None
    """Process group of EDP."""
    cp_group: ProcessGroup | None = None
    """Process group of CP."""
    tp_group: ProcessGroup | None = None
    """Process group of TP."""
    ep_group: ProcessGroup | None = None
    """Process group of EP."""

    @property
    def tp(self) -> int:
        return self.parallel.tp

    @property
    def cp(self) -> int:
        return self.parallel.cp

    @property
    def ep(self) -> int:
        return self.parallel.ep

    @property
    def dp_cp(self) -> int:
        """DP x CP: ranks whose tokens differ (the loss and dense-gradient reduction group)."""
        return self.dp * self.cp

    def to_dict(self) -> dict:
        p = self.parallel
        return {
            "tp": p.tp,
            "cp": p.cp,
            "ep": p.ep,
            "etp": p.etp_size,
            "pp": p.pp,
            "dp": self.dp,
            "edp": self.edp,
            "dp_rank": self.dp_rank,
            "cp_rank": self.cp_rank,
            "tp_rank": self.tp_rank,
            "ep_rank": self.ep_rank,
        }

    @classmethod
    def build(cls, parallel, world: int, rank: int, device_type: str) -> ParallelState:
        """Meshes and coordinates for ``parallel`` on ``world`` ranks (the process group must be up)."""
        from ...mesh import RankLayout, build_device_mesh

        check_mesh(parallel)
        with warnings.catch_warnings():  # torch warns that slicing a flattened dim will change; right today
            warnings.simplefilter("ignore", UserWarning)
            meshes = build_device_mesh(parallel, world, device_type)
            fd, fe, tpm = meshes.dense["dp_cp"], meshes.expert["edp"], meshes.dense["tp"]
            groups = {
                "dp_cp_group": fd.get_group(),
                "edp_group": fe.get_group(),
                "cp_group": meshes.dense["cp"].get_group(),
                "tp_group": tpm.get_group(),
                "ep_group": meshes.expert["ep"].get_group(),
            }
        p = parallel
        lay = RankLayout.of(p, dp=meshes.dp, edp=meshes.edp)
        d, e = lay.coords(rank, "dense"), lay.coords(rank, "expert")
        return cls(
            parallel=p,
            world=world,
            rank=rank,
            dp=meshes.dp,
            edp=meshes.edp,
            dp_rank=d["dp"],
            cp_rank=d["cp"],
            tp_rank=d["tp"],
            ep_rank=e["ep"],
            meshes=meshes,
            fsdp_dense_mesh=fd,
            fsdp_expert_mesh=fe,
            tp_mesh=tpm,
            **groups,
        )


@dataclass(eq=False)
class Applied:
    """What :func:`apply_parallelism` installed in a model."""

    cp: ContextParallel | None = None
    """The :class:`~.cp.ContextParallel` (None when CP = 1)."""
    tp: TensorParallel | None = None
    """The :class:`~.tp.TensorParallel` (None when TP = 1)."""


def apply_parallelism(model, state: ParallelState) -> Applied:
    """Install EP, TP and CP in a freshly built, unsharded lite model (in place); FSDP2 comes after."""
    out = Applied()
    if state.ep > 1:
        from ..models.moe import MoE
        from .ep import ExpertDispatcher, shard_experts

        moes = [m for m in model.modules() if isinstance(m, MoE)]
        if not moes:
            raise MliteError(f"ep: EP {state.ep} needs a model with routed experts; use --ep 1 for a dense model")
        for m in moes:
            E = m.num_experts
            shard_experts(m.experts, state.ep, state.ep_rank)
            m.expert_dispatcher = ExpertDispatcher(state.ep_group, state.ep, E)
    if state.tp > 1:
        from .tp import TensorParallel

        out.tp = TensorParallel(state)
        out.tp.install(model)
    if state.cp > 1:
        from .cp import ContextParallel

        out.cp = ContextParallel(state.cp_group, state.cp, state.cp_rank, multiple=2 * state.cp * state.tp)
        out.cp.install(model)
    return out
