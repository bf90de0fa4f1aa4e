"""Collective and point-to-point times used by the cost model.

Unit legend: `_bytes` bytes (the full, unsharded buffer of a collective, nccl-tests "size");
`_s` seconds. Group bandwidths and latencies come from topology.groups.group_links.

The alpha-beta ring formulas live in topology.collectives (Thakur, Rabenseifner & Gropp
2005; Patarasuk & Yuan 2009; busbw in the nccl-tests sense): on n ranks,
all-reduce = 2(n-1) alpha + 2(n-1)/n bytes / busbw; reduce-scatter and all-gather =
(n-1) alpha + (n-1)/n bytes / busbw; point-to-point = alpha + bytes / bandwidth.
The cost model uses the ring algorithm (NCCL's choice for the large messages that matter
here); the calibrated constants assume it.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from topology.collectives import allgather_time_s, allreduce_time_s, p2p_time_s, reduce_scatter_time_s
from solver.cost.options import CostOptions
from topology.groups import GroupLink


def effective_link(link: GroupLink, intra_efficiency: float, inter_efficiency: float) -> GroupLink:
    """The link at its achieved bandwidth: each tier's stated busbw x its network efficiency
    (CostOptions.intra_node_network_efficiency / inter_node_network_efficiency).

    A group inside one NVLink domain takes the intra ratio; a group that leaves it takes the
    inter ratio on its ring bandwidth (its ring is bounded by the cross-domain hops, the
    slower tier: topology.groups) and on its all-to-all; hierarchical forms scale their
    intra-domain sub-rings and cross-domain rings by their own tier's ratio. Latencies are
    unchanged. Both ratios 1 (the default) return the link itself.
    """
    if intra_efficiency == 1.0 and inter_efficiency == 1.0:
        return link
    ring = inter_efficiency if link.crosses_nodes else intra_efficiency

    def scaled(bw: float | None, ratio: float) -> float | None:
        return None if bw is None else bw * ratio

    return dataclasses.replace(
        link, bandwidth_gb_s=link.bandwidth_gb_s * ring,
        intra_bandwidth_gb_s=scaled(link.intra_bandwidth_gb_s, intra_efficiency),
        inter_bandwidth_gb_s=scaled(link.inter_bandwidth_gb_s, inter_efficiency),
        alltoall_bandwidth_gb_s=scaled(link.alltoall_bandwidth_gb_s, ring))


def achieved_link(link: GroupLink, options: CostOptions) -> GroupLink:
    """effective_link at the options' intra- and inter-node network efficiencies."""
    return effective_link(link, options.intra_node_network_efficiency, options.inter_node_network_efficiency)


def allreduce_s(message_bytes: float, link: GroupLink) -> float:
    """Ring all-reduce of a buffer over the group (0 for one rank or an empty buffer)."""
    return allreduce_time_s(message_bytes, link) if link.size > 1 and message_bytes > 0 else 0.0


def reduce_scatter_s(message_bytes: float, link: GroupLink) -> float:
    """Ring reduce-scatter of a full buffer (each rank keeps 1/n)."""
    return reduce_scatter_time_s(message_bytes, link) if link.size > 1 and message_bytes > 0 else 0.0


def allgather_s(message_bytes: float, link: GroupLink) -> float:
    """Ring all-gather into a full buffer: the mirror of reduce-scatter."""
    return allgather_time_s(message_bytes, link) if link.size > 1 and message_bytes > 0 else 0.0


def p2p_s(message_bytes: float, link: GroupLink) -> float:
    """One point-to-point transfer to a neighbour in the group: latency + bytes / bandwidth."""
    return p2p_time_s(message_bytes, link) if message_bytes > 0 else 0.0


def bucketed_s(total_bytes: float, bucket_bytes: float, link: GroupLink,
               collective: Callable[[float, GroupLink], float]) -> tuple[float, float]:
    """(total, last bucket) seconds of a collective run bucket by bucket; each bucket pays
    the latency term (Megatron-LM / PyTorch DDP gradient buckets, Li et al. 2020 Sec. 3.2.3)."""
    if total_bytes <= 0 or link.size <= 1:
        return 0.0, 0.0
    buckets = max(1, math.ceil(total_bytes / bucket_bytes))
    per = collective(total_bytes / buckets, link)
    return buckets * per, per
