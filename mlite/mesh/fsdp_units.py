"""Which FSDP2 unit holds the routed experts (issue 31): the one rule the lite runtime's sharding
(:func:`mlite.runtime.fsdp.shard_model`) and the memory estimator's unit gather (``fsdp2_unit`` in
:func:`mlite.memory.estimate`) both call.

The experts share their decoder block's unit (one all-gather / reduce-scatter per block) when every expert-data-
parallel group is a dense DP x CP group: the same ranks, so the same process group and the same gradient divide
factor (EP = TP with ETP = 1 in Megatron-Core's rank order; EP = TP = 1 on one node is the common case). Otherwise
(EP > 1 with TP = 1, or TP > 1 with EP = 1) they are sharded over a different group and keep a unit of their own
on the expert mesh, inside the block's unit. Each unit costs FSDP2 a pre/post-forward and pre/post-backward hook,
one all-gather with its copy-in/copy-out and one reduce-scatter per micro-batch, even on one GPU (torch's
``_fsdp_param_group.py``), so the shared layout halves the units of an MoE model (25 -> 13 for 12 MoE blocks).
"""

from __future__ import annotations

from .ranks import RankLayout


def experts_share_block_unit(layout: RankLayout) -> bool:
    """True when the EDP groups are exactly the DP x CP groups (the experts go into their block's FSDP2 unit)."""
    return layout.groups("edp") == layout.groups("dp_cp")


def largest_block_unit(max_layer: float, max_dense: float, max_expert: float, shared: bool) -> float:
    """Parameters of the largest decoder-block FSDP2 unit: a whole layer (``max_layer``, dense + experts) when the
    experts share the block's unit, else the larger of a block without its experts and an experts unit."""
    return max_layer if shared else max(max_dense, max_expert)
