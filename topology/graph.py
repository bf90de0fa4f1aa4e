"""The cluster as a networkx graph: GPUs, NVSwitch domains, NICs, leaf/spine/core switches.

Vertices carry `type` (gpu | nvswitch | nic | leaf | spine | core | switch) and, for GPUs,
`node` and `domain` (NVLink domain). Every link is two directed edges, one per direction,
each with `bandwidth_gb_s` (per-direction capacity, GB/s), `latency_ps` (one-way hop
latency, integer picoseconds so that equal-cost paths tie exactly) and `kind`
(nvlink | pcie | network). The builder functions below are the only code that writes these
attributes; algorithms take the attribute name they read (networkx style).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import networkx as nx

CAPACITY = "bandwidth_gb_s"
LATENCY = "latency_ps"
PS_PER_US = 1_000_000


def latency_ps(latency_us: float) -> int:
    """Microseconds to integer picoseconds (1 us = 1e6 ps)."""
    return round(latency_us * PS_PER_US)


def new_graph(name: str) -> nx.DiGraph:
    """An empty cluster graph."""
    return nx.DiGraph(name=name)


def add_gpu(g: nx.DiGraph, vid: str, node: int, domain: int) -> None:
    """A GPU vertex on `node` in NVLink domain `domain`."""
    g.add_node(vid, type="gpu", node=node, domain=domain)


def add_switch(g: nx.DiGraph, vid: str, vtype: str) -> None:
    """A non-GPU vertex (nvswitch, nic, leaf, spine, core or switch)."""
    g.add_node(vid, type=vtype)


def add_link(g: nx.DiGraph, a: str, b: str, bandwidth_gb_s: float, lat_ps: int, kind: str) -> None:
    """A bidirectional link: two directed edges with the same per-direction figures.

    A second link between the same pair adds its capacity (parallel cables) and keeps
    the lower latency.
    """
    for u, v in ((a, b), (b, a)):
        if g.has_edge(u, v):
            edge = g.edges[u, v]
            edge[CAPACITY] += bandwidth_gb_s
            edge[LATENCY] = min(edge[LATENCY], lat_ps)
        else:
            g.add_edge(u, v, **{CAPACITY: float(bandwidth_gb_s), LATENCY: int(lat_ps), "kind": kind})


@dataclass(frozen=True)
class GpuSlot:
    """One GPU a rank can be placed on: its vertex, node, local index and NVLink domain."""

    vertex: str
    node: int
    local: int
    domain: int


def gpu_slots_of(g: nx.DiGraph) -> list[GpuSlot]:
    """GPU vertices in slot order: by node, then in insertion order within the node."""
    per_node: Counter[int] = Counter()
    slots = []
    for vid, data in g.nodes(data=True):
        if data["type"] == "gpu":
            slots.append(GpuSlot(vid, data["node"], per_node[data["node"]], data["domain"]))
            per_node[data["node"]] += 1
    return sorted(slots, key=lambda s: (s.node, s.local))


def bisection_bandwidth_gb_s(g: nx.DiGraph, capacity: str = CAPACITY) -> float:
    """Max flow from the first half of the GPUs (slot order) to the second half, GB/s.

    The classic bisection figure for the rank-order cut (Leighton 1992, sec. 1.9): the
    traffic one half can push into the other at once, one direction.
    """
    slots = gpu_slots_of(g)
    half = len(slots) // 2
    if half == 0:
        return 0.0
    h = g.copy()
    add_switch(h, "_src", "switch")
    add_switch(h, "_dst", "switch")
    for s in slots[:half]:
        add_link(h, "_src", s.vertex, float("inf"), 0, "network")
    for s in slots[half:]:
        add_link(h, s.vertex, "_dst", float("inf"), 0, "network")
    return float(nx.maximum_flow_value(h, "_src", "_dst", capacity=capacity))


def summary(g: nx.DiGraph) -> dict:
    """Counts of vertices by type, links by kind, NVLink domains and the bisection bandwidth."""
    types = Counter(d["type"] for _, d in g.nodes(data=True))
    kinds = Counter(d["kind"] for _, _, d in g.edges(data=True))
    domains = Counter(s.domain for s in gpu_slots_of(g))
    return {
        "vertices": dict(sorted(types.items())),
        "links": {k: n // 2 for k, n in sorted(kinds.items())},
        "nvlink_domains": len(domains),
        "gpus_per_domain": sorted(set(domains.values())),
        "bisection_gb_s": bisection_bandwidth_gb_s(g),
    }
