"""Graph generators: one per `topology.kind` of the cluster spec (topology.graph_spec).

Conventions shared by all generators:
- GPU `g` of node `n` is vertex "n{n}.g{g}"; a node's NVSwitch is "n{n}.nvs" (or a
  domain's "d{d}.nvs"); NIC `k` of node `n` is "n{n}.nic{k}".
- The in-node figure `intra_node` is the GPU <-> NVSwitch link; its latency is split
  evenly over the two hops so a GPU-to-GPU path carries exactly `intra_node.latency_us`.
- `flat`/`nvlink_domain` give each GPU a NIC with the `inter_node` figure into one
  non-blocking core, the latency split over the two NIC-core hops.
- Fat trees: GPUs share the node's NICs evenly (GPU g uses NIC g * nics // gpus_per_node);
  a leaf's uplink capacity is its downlink capacity over the oversubscription ratio,
  spread over the spines (ECMP), as in Leiserson 1985 / Al-Fares et al. 2008.
Raises SpecError where a topology does not match the cluster's node count.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import networkx as nx

from topology.errors import Problem, SpecError
from topology.graph import add_gpu, add_link, add_switch, latency_ps, new_graph
from topology.graph_spec import (
    FatTreeTopology, GraphTopology, NvlinkDomainTopology, RailOptimizedTopology,
)
from topology.spec import ClusterSpec


def gpu_id(node: int, local: int) -> str:
    return f"n{node}.g{local}"


def _nvlink_domains(g: nx.DiGraph, c: ClusterSpec, nodes_per_domain: int) -> None:
    """GPUs and one NVSwitch fabric vertex per NVLink domain of `nodes_per_domain` nodes."""
    half_ps = latency_ps(c.intra_node.latency_us / 2)
    for n in range(c.nodes):
        d = n // nodes_per_domain
        nvs = f"d{d}.nvs" if nodes_per_domain > 1 else f"n{n}.nvs"
        if nvs not in g:
            add_switch(g, nvs, "nvswitch")
        for k in range(c.gpus_per_node):
            add_gpu(g, gpu_id(n, k), n, d)
            add_link(g, gpu_id(n, k), nvs, c.intra_node.bandwidth_gb_s, half_ps, "nvlink")


def _per_gpu_nics(g: nx.DiGraph, c: ClusterSpec) -> None:
    """Each GPU's own NIC at the `inter_node` figure into one non-blocking core switch."""
    add_switch(g, "core", "core")
    half_ps = latency_ps(c.inter_node.latency_us / 2)
    bw = c.inter_node.bandwidth_gb_s
    for n in range(c.nodes):
        for k in range(c.gpus_per_node):
            nic = f"n{n}.nic{k}"
            add_switch(g, nic, "nic")
            add_link(g, gpu_id(n, k), nic, bw, 0, "pcie")
            add_link(g, nic, "core", bw, half_ps, "network")


def build_flat(c: ClusterSpec) -> nx.DiGraph:
    """The seed's flat description as a graph (one NVSwitch per node, per-GPU NICs)."""
    return build_nvlink_domain(c, NvlinkDomainTopology(kind="nvlink_domain", nodes_per_domain=1))


def _check_tiles(c: ClusterSpec, field: str, per: int) -> None:
    """Raises SpecError unless groups of `per` nodes (cluster.topology.<field>) tile the nodes."""
    if c.nodes % per:
        raise SpecError(f"cluster.topology.{field} must divide nodes", [Problem(
            f"cluster.topology.{field}", f"{per} does not divide {c.nodes} nodes")])


def check_nvlink_domain(c: ClusterSpec, t: NvlinkDomainTopology) -> None:
    """Raises SpecError unless the domains tile the nodes."""
    _check_tiles(c, "nodes_per_domain", t.nodes_per_domain)


def build_nvlink_domain(c: ClusterSpec, t: NvlinkDomainTopology) -> nx.DiGraph:
    """NVLink domains of `t.nodes_per_domain` nodes plus per-GPU NICs (e.g. GB200 NVL72)."""
    check_nvlink_domain(c, t)
    g = new_graph(c.name)
    _nvlink_domains(g, c, t.nodes_per_domain)
    _per_gpu_nics(g, c)
    return g


def _node_nics(g: nx.DiGraph, c: ClusterSpec, t: FatTreeTopology, n: int) -> list[str]:
    """Node n's NICs, each GPU linked to its share of them (PCIe at the NIC speed)."""
    nics = [f"n{n}.nic{k}" for k in range(t.nics_per_node)]
    for nic in nics:
        add_switch(g, nic, "nic")
    for k in range(c.gpus_per_node):
        add_link(g, gpu_id(n, k), nics[k * t.nics_per_node // c.gpus_per_node], t.nic_gb_s, 0, "pcie")
    return nics


def _spines(g: nx.DiGraph, t: FatTreeTopology, leaves: list[str], downlink_gb_s: float) -> None:
    """Spines joined to every leaf; each leaf's uplinks = downlinks / oversubscription."""
    if len(leaves) < 2:
        return
    per_spine_gb_s = downlink_gb_s / t.oversubscription / t.spines
    hop_ps = latency_ps(t.switch_latency_us)
    for s in range(t.spines):
        add_switch(g, f"spine{s}", "spine")
        for leaf in leaves:
            add_link(g, leaf, f"spine{s}", per_spine_gb_s, hop_ps, "network")


def check_leaves(c: ClusterSpec, t: FatTreeTopology) -> None:
    """Raises SpecError unless the leaves (or scalable units) tile the nodes."""
    _check_tiles(c, "nodes_per_leaf", t.nodes_per_leaf)


def build_fat_tree(c: ClusterSpec, t: FatTreeTopology) -> nx.DiGraph:
    """Every NIC of a node goes to the node's leaf; leaves join through the spines."""
    check_leaves(c, t)
    g = new_graph(c.name)
    _nvlink_domains(g, c, 1)
    nic_ps = latency_ps(t.nic_latency_us)
    leaves = [f"leaf{i}" for i in range(c.nodes // t.nodes_per_leaf)]
    for leaf in leaves:
        add_switch(g, leaf, "leaf")
    for n in range(c.nodes):
        for nic in _node_nics(g, c, t, n):
            add_link(g, nic, leaves[n // t.nodes_per_leaf], t.nic_gb_s, nic_ps, "network")
    _spines(g, t, leaves, t.nodes_per_leaf * t.nics_per_node * t.nic_gb_s)
    return g


def build_rail_optimized(c: ClusterSpec, t: RailOptimizedTopology) -> nx.DiGraph:
    """NIC r of every node of a scalable unit goes to the unit's rail-r leaf
    (NVIDIA DGX SuperPOD reference architecture); spines join all leaves."""
    check_leaves(c, t)
    g = new_graph(c.name)
    _nvlink_domains(g, c, 1)
    nic_ps = latency_ps(t.nic_latency_us)
    units = c.nodes // t.nodes_per_leaf
    leaves = [f"su{u}.rail{r}" for u in range(units) for r in range(t.nics_per_node)]
    for leaf in leaves:
        add_switch(g, leaf, "leaf")
    for n in range(c.nodes):
        for r, nic in enumerate(_node_nics(g, c, t, n)):
            add_link(g, nic, f"su{n // t.nodes_per_leaf}.rail{r}", t.nic_gb_s, nic_ps, "network")
    _spines(g, t, leaves, t.nodes_per_leaf * t.nic_gb_s)
    return g


def build_explicit(c: ClusterSpec, t: GraphTopology) -> nx.DiGraph:
    """The graph exactly as listed; GPUs keep their listed order within a node."""
    counts = [0] * c.nodes
    g = new_graph(c.name)
    for v in t.vertices:
        if v.type != "gpu":
            add_switch(g, v.id, v.type)
            continue
        node = v.node
        if node is None or node >= c.nodes:  # None: GraphTopology's validator already refuses it
            raise SpecError("bad gpu node",
                            [Problem("cluster.topology.vertices", f"{v.id}: node {node} >= {c.nodes}")])
        counts[node] += 1
        add_gpu(g, v.id, node, node if v.domain is None else v.domain)
    if any(k != c.gpus_per_node for k in counts):
        raise SpecError("gpu count per node", [Problem(
            "cluster.topology.vertices", f"every node needs {c.gpus_per_node} gpu vertices")])
    for e in t.links:
        add_link(g, e.a, e.b, e.bandwidth_gb_s, latency_ps(e.latency_us), e.kind)
    return g


@lru_cache(maxsize=16)
def build_graph(c: ClusterSpec) -> nx.DiGraph:
    """The cluster's graph (memoized per frozen spec; callers must not mutate it).

    No `topology` (or kind 'flat') gives the flat graph. Raises: SpecError.
    """
    t = c.topology
    if t is None or t.kind == "flat":
        return build_flat(c)
    builders: dict[str, Callable[..., nx.DiGraph]] = {"nvlink_domain": build_nvlink_domain, "fat_tree": build_fat_tree,
                "rail_optimized": build_rail_optimized, "graph": build_explicit}
    return builders[t.kind](c, t)
