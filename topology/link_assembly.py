"""GroupLink, what one group kind of a layout gets from the cluster, and its assembly
from the concurrent shares of the kind's routed phases: the ring, the sub-rings inside
each NVLink domain and the cross-domain rings (hierarchical forms), and the all-to-all.

topology.groups picks the router for a cluster and calls these; collectives reads the
record. Units: bandwidths GB/s per GPU per direction (busbw); latencies seconds.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from collections.abc import Callable

from topology.placement import GroupKind, Placement
from topology.routing import Share
from topology.spec import ClusterSpec

A2A_FLOW_LIMIT = 8_192  # all-to-all pairs routed per kind on graph fabrics (CP8 on 1,024 GPUs fits)
PS = 1e12  # picoseconds per second


@dataclass(frozen=True)
class GroupLink:
    """The link one group of a kind runs its collectives over, all groups active at once."""

    kind: str
    size: int
    stride: int
    bandwidth_gb_s: float  # ring busbw of the slowest group
    latency_s: float  # per ring step, slowest path
    crosses_nodes: bool  # some group leaves its NVLink domain
    ranks_per_node: int  # members of one group per NVLink domain (1 when uneven)
    intra_bandwidth_gb_s: float | None = None  # sub-rings inside a domain (hierarchical)
    intra_latency_s: float | None = None
    inter_bandwidth_gb_s: float | None = None  # cross-domain rings, one per local position
    inter_latency_s: float | None = None
    alltoall_bandwidth_gb_s: float | None = None  # per-rank; None when over A2A_FLOW_LIMIT
    alltoall_latency_s: float | None = None
    domains: int = 1  # NVLink domains one group spans


def _ring(vertices: list[str]) -> list[tuple[str, str]]:
    n = len(vertices)
    return [] if n < 2 else [(vertices[i], vertices[(i + 1) % n]) for i in range(n)]


def _by_domain(p: Placement, group: list[int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    for r in group:
        out[p.slots[r].domain].append(p.slots[r].vertex)
    return out


def _phases(p: Placement, groups: list[list[int]]) -> tuple[list, list, list, set[int], int]:
    """Flows of the ring, intra-domain and cross-domain phases, the distinct members-per-
    domain counts and the most domains one group spans."""
    ring, intra, inter = [], [], []
    counts: set[int] = set()
    spans = 1
    for group in groups:
        ring.append(_ring([p.slots[r].vertex for r in group]))
        doms = list(_by_domain(p, group).values())
        spans = max(spans, len(doms))
        counts.update(len(v) for v in doms)
        intra.append([f for v in doms for f in _ring(v)])
        if len({len(v) for v in doms}) == 1:
            inter.append([f for col in zip(*doms, strict=True) for f in _ring(list(col))])
    return ring, intra, inter, counts, spans


def _fig(share: Share | None, fallback: tuple[float, float]) -> tuple[float, float]:
    return fallback if share is None else (share.bandwidth_gb_s, share.latency_ps / PS)


def _in_node(cluster: ClusterSpec) -> tuple[float, float]:
    """The in-node link's (GB/s, s): the figures of a size-1 group."""
    return cluster.intra_node.bandwidth_gb_s, cluster.intra_node.latency_us / 1e6


def one_rank_link(cluster: ClusterSpec, kind: GroupKind, stride: int) -> GroupLink:
    """A size-1 group (no traffic): every figure is the in-node link's."""
    base = _in_node(cluster)
    return GroupLink(kind, 1, stride, *base, False, 1, *base, *base, *base, 1)


def assemble_link(cluster: ClusterSpec, kind: GroupKind, size: int, stride: int,
                  shares: dict[str, Share | None], counts: set[int] | frozenset[int], spans: int) -> GroupLink:
    """A kind's GroupLink from the concurrent shares of its phases ("ring", "intra",
    "inter", "a2a"; None for a phase without flows, or an all-to-all not routed), its
    distinct members-per-domain counts and the most domains one group spans. Sub-ring
    phases without flows take the ring's figures; all-to-all bandwidth is per rank."""
    ring_f = _fig(shares["ring"], _in_node(cluster))
    intra_f = _fig(shares["intra"], ring_f)
    inter_f = _fig(shares["inter"], ring_f)
    a2a = shares["a2a"]
    a2a_f: tuple[float | None, float | None] = (
        (None, None) if a2a is None else (a2a.bandwidth_gb_s * (size - 1), a2a.latency_ps / PS))
    k = next(iter(counts)) if len(counts) == 1 else 1  # 1 unless every domain holds the same count
    return GroupLink(kind, size, stride, *ring_f, spans > 1, k, *intra_f, *inter_f, *a2a_f, spans)


def a2a_routed(world: int, size: int) -> bool:
    """Whether the all-to-all pairs of every group (world x (size - 1) flows) are routed."""
    return world * (size - 1) <= A2A_FLOW_LIMIT


def placed_link(cluster: ClusterSpec, p: Placement, kind: GroupKind,
                share: Callable[[list], Share | None],
                alltoall: Callable[[list], Share | None]) -> GroupLink:
    """A kind's GroupLink over placed ranks from a router: `share(phase)` gives the concurrent share of one
    phase's flows (ring, in-domain, cross-domain), `alltoall(groups)` the all-to-all share
    (None where too many flows to route)."""
    size, stride = p.dims[kind], p.stride(kind)
    if size == 1:
        return one_rank_link(cluster, kind, stride)
    groups = p.groups(kind)
    ring, intra, inter, counts, spans = _phases(p, groups)
    shares = {"ring": share(ring), "intra": share(intra), "inter": share(inter), "a2a": alltoall(groups)}
    return assemble_link(cluster, kind, size, stride, shares, counts, spans)
