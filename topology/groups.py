"""What each parallel group of a layout gets from the cluster: size, bandwidth, latency.

This is the query the cost model calls. For a cluster without an explicit `topology`
it uses the flat description (in-node link, effective per-rank inter-node busbw).
Rank order is Megatron-LM's default: TP fastest, then CP, then DP, then PP.

Units: bandwidth_gb_s is per-GPU busbw (1e9 bytes/s); latency_s seconds.
"""
from __future__ import annotations

from dataclasses import dataclass

from topology.spec import ClusterSpec

GROUP_KINDS = ("tp", "cp", "dp", "pp")


@dataclass(frozen=True)
class GroupLink:
    """The link one group of a kind runs its collectives over, all groups active at once."""

    kind: str
    size: int
    stride: int
    bandwidth_gb_s: float
    latency_s: float
    crosses_nodes: bool
    ranks_per_node: int  # members of one group sharing a node


def _strides(dims: dict[str, int]) -> dict[str, int]:
    stride, out = 1, {}
    for kind in GROUP_KINDS:
        out[kind] = stride
        stride *= dims[kind]
    return out


def flat_group_link(cluster: ClusterSpec, kind: str, size: int, stride: int) -> GroupLink:
    """A group of `size` ranks spaced `stride` apart on the flat cluster description.

    The group stays in one node when its span (stride x size) fits the node and the
    node size is a multiple of that span; otherwise every ring crosses nodes and is
    limited by the inter-node per-rank figure.
    """
    g = cluster.gpus_per_node
    span = stride * size
    inside = size == 1 or (span <= g and g % span == 0)
    link = cluster.intra_node if inside else cluster.inter_node
    per_node = size if inside else max(1, min(size, g // stride)) if stride < g else 1
    return GroupLink(kind, size, stride, link.bandwidth_gb_s, link.latency_us * 1e-6,
                     not inside, per_node)


def group_links(cluster: ClusterSpec, tp: int, cp: int, dp: int, pp: int) -> dict[str, GroupLink]:
    """GroupLink for each of tp, cp, dp, pp (Megatron order: TP fastest, then CP, DP, PP)."""
    dims = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    strides = _strides(dims)
    return {k: flat_group_link(cluster, k, dims[k], strides[k]) for k in GROUP_KINDS}
