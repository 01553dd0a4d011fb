"""Collectives and point-to-point transfers on the links of a hardware profile.

Ring algorithms (NCCL's default for large messages): an all-gather or reduce-scatter of a ``B``-byte buffer over
``n`` ranks sends ``(n - 1) / n x B`` per rank, an all-reduce twice that; an all-to-all sends ``(n - 1) / n`` of its
buffer. The link is NVLink when the group fits in one node, else the per-GPU network (a group that spans nodes runs
at its slowest hop). Every transfer also pays ``comm_latency_s``.

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


def link_bytes_per_s(hw, crosses: bool) -> float:
    """Achieved bandwidth of the link a group uses."""
    return (hw.network_bytes_per_s if crosses else hw.nvlink_bytes_per_s) * hw.comm_efficiency


def ring_s(hw, nbytes: float, n: int, crosses: bool, kind: str) -> float:
    """Seconds of one collective (``all_gather``, ``reduce_scatter``, ``all_reduce``, ``all_to_all``) of a buffer of
    ``nbytes`` (the gathered / unreduced size) over ``n`` ranks."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    factor = {"all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0, "all_reduce": 2.0}[kind]
    bw = link_bytes_per_s(hw, crosses)
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
    local = max(1, min(n, gpus_per_node // max(stride, 1)))
    off = (n - local) / n * nbytes
    on = (local - 1) / n * nbytes
    t_net = off / link_bytes_per_s(hw, True) if off else 0.0
    t_nv = on / link_bytes_per_s(hw, False) if on else 0.0
    return max(t_net, t_nv) + hw.comm_latency_s
