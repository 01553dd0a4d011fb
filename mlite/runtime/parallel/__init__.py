"""Model parallelism of the lite runtime on one node: expert (EP), context (CP) and tensor (TP) parallelism.

Each axis is one module, with its computation kept apart from its communication (picotron-style):

* :mod:`.state` -- :class:`ParallelState`: this rank's coordinates, sizes and process groups, from the meshes of
  :func:`mlite.mesh.build_device_mesh` (Megatron-Core's RankGenerator layout).
* :mod:`.comm` -- the differentiable collectives (all-to-all with splits, all-gather along dim 0).
* :mod:`.ep` -- routed experts sharded over EP; tokens dispatched and combined by all-to-all.
* :mod:`.cp` -- the load-balanced sequence split and the all-gather K/V attention / all-gather-input Gated DeltaNet.
* :mod:`.tp` -- tensor parallelism (DTensor) with sequence parallelism.

:func:`apply_parallelism` wires the axes into a built (unsharded) lite model; FSDP2 is applied after it by
:mod:`mlite.runtime.fsdp`.
"""

from .state import ParallelState, apply_parallelism

__all__ = ["ParallelState", "apply_parallelism"]
