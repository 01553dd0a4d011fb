"""Collectives and point-to-point transfers on the links of a hardware profile.

Ring algorithms (NCCL's default for large messages): an all-gather or reduce-scatter of a ``B``-byte buffer over
``n`` ranks sends ``(n - 1) / n x B`` per rank, an all-reduce twice that; an all-to-all sends ``(n - 1) / n`` of its
buffer. The link is NVLink when the group fits in one node, else the network. A ring that spans nodes is not held to
one GPU's NIC: NCCL runs one ring per channel and spreads the channels over the node's NICs (one per GPU on a DGX), so
every inter-node hop of the collective moves in parallel on the NICs of all the group's ranks in that node, and the
collective runs at ``min(NVLink, ranks per node x per-GPU network)`` (:func:`ranks_per_node`). NCCL's own figure:
"On an Nvidia DGX-A100 system we have 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW" (NVIDIA/nccl
issue #812, i.e. 8 x 25 GB/s, not one NIC's 25); "performance should add up as you add more [NICs]" (NVIDIA/nccl
issue #652); a ring all-reduce of the same 8 GPUs as 1 x 8 nodes, 2 x 4 and 4 x 2 took 363, 173 and 132 ms (NVIDIA/nccl
issue #569: more GPUs per node use more IB cards). A group with one rank per node (a DP group strided over a full
TP x CP node) keeps one NIC. Every transfer also pays ``comm_latency_s``.

Which groups span nodes follows Megatron-Core's rank order ``tp-cp-ep-dp-pp`` (``RankGenerator``): TP ranks are
adjacent, a CP group strides over TP, the DP group over TP x CP, a pipeline neighbour is TP x CP x DP ranks away;
expert groups: ETP adjacent, EP strides over ETP.
An all-to-all that leaves the node (:func:`all_to_all_s`) sends only the share bound for other nodes over the
network and the rest over NVLink at the same time.
"""

from __future__ import annotations


def spans_nodes(group: int, stride: int, gpus_per_node: int) -> bool:
    """A group of ``group`` ranks ``stride`` apart leaves one node."""
    return group > 1 and group * stride > gpus_per_node


def ranks_per_node(group: int, stride: int, gpus_per_node: int) -> int:
    """Ranks of a group of ``group`` ranks ``stride`` apart that share one node (at least 1)."""
    return max(1, min(group, gpus_per_node // max(stride, 1)))


def link_bytes_per_s(hw, crosses: bool, local: int = 1) -> float:
    """Achieved bandwidth of the link a group uses (``local``: the group's ranks in one node, whose NICs a ring that
    crosses nodes uses side by side, up to NVLink's rate)."""
    if not crosses:
        return hw.nvlink_bytes_per_s * hw.comm_efficiency
    return min(hw.nvlink_bytes_per_s, max(1, local) * hw.network_bytes_per_s) * hw.comm_efficiency


def ring_s(hw, nbytes: float, n: int, crosses: bool, kind: str, local: int = 1) -> float:
    """Seconds of one collective (``all_gather``, ``reduce_scatter``, ``all_reduce``, ``all_to_all``) of a buffer of
    ``nbytes`` (the gathered / unreduced size) over ``n`` ranks (``local`` of them per node when it crosses nodes:
    :func:`ranks_per_node`)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    factor = {"all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0, "all_reduce": 2.0}[kind]
    bw = link_bytes_per_s(hw, crosses, local)
    if bw <= 0:
        return float("inf")
    return factor * (n - 1) / n * nbytes / bw + hw.comm_latency_s


def p2p_s(hw, nbytes: float, crosses: bool) -> float:
    """One point-to-point send of ``nbytes``."""
    if nbytes <= 0:
        return 0.0
    bw = link_bytes_per_s(hw, crosses)
    return (nbytes / bw if bw > 0 else float("inf")) + hw.comm_latency_s


def all_to_all_s(hw, nbytes: float, n: int, stride: int, gpus_per_node: int) -> float:
    """An all-to-all of ``nbytes`` per rank over ``n`` ranks ``stride`` apart: the share bound for ranks of other
    nodes goes over the network, the rest over NVLink, both at once (the slower one sets the time)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    local = ranks_per_node(n, stride, gpus_per_node)
    off = (n - local) / n * nbytes
    on = (local - 1) / n * nbytes
    t_net = off / link_bytes_per_s(hw, True) if off else 0.0
    t_nv = on / link_bytes_per_s(hw, False) if on else 0.0
    return max(t_net, t_nv) + hw.comm_latency_s
