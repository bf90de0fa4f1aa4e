"""The cluster graph's summary (topology.graph.summary) in closed form for generated topologies.

`graph_summary(cluster)` returns exactly the dict `summary(build_graph(cluster))` returns (vertex
and link counts, NVLink domains, bisection bandwidth) without building the graph or running a
max flow for `flat`, `nvlink_domain`, `fat_tree` and `rail_optimized` clusters: O(1) counts and
O(nodes per leaf x NICs) work for the bisection, so 100,000 GPUs take milliseconds instead of a
minute and a gigabyte. Explicit graphs are summarised from the graph itself.
tests/topology/test_summary.py compares both on many small clusters.

Bisection (rank-order halves, graph.bisection_bandwidth_gb_s): every GPU is a terminal (the
first half a source, the rest a sink), so the max flow splits into independent parts:
- each NVSwitch carries min(a, b) x intra_node, a and b its GPUs in each half (only the domain
  the cut falls in has both);
- the scale-out network is a tree (NICs -> leaf or core -> spines; k identical spines with
  ECMP act as one spine of k times the capacity). In a tree, matching supply against demand
  as low as possible is optimal (a flow matched above a vertex could be re-paired below it
  with no more link use), so the flow is the sum, over vertices, of min(supply, demand)
  arriving there, each child passing up min(link capacity, its unmatched excess).
Units: GB/s (1e9 bytes/s) per direction.
"""
from __future__ import annotations

from dataclasses import dataclass

from topology.generators import build_graph, check_leaves, check_nvlink_domain
from topology.graph import summary
from topology.graph_spec import FatTreeTopology, GraphTopology, NvlinkDomainTopology
from topology.spec import ClusterSpec


def graph_summary(cluster: ClusterSpec) -> dict:
    """The summary of the cluster's graph (same keys and values as graph.summary).

    Raises: SpecError (a topology that does not tile the nodes).
    """
    t = cluster.topology
    if isinstance(t, GraphTopology):
        return summary(build_graph(cluster))
    if isinstance(t, FatTreeTopology):  # and RailOptimizedTopology, its subclass
        check_leaves(cluster, t)
        return _tree_summary(cluster, t)
    if isinstance(t, NvlinkDomainTopology):
        check_nvlink_domain(cluster, t)
        return _flat_summary(cluster, t.nodes_per_domain)
    return _flat_summary(cluster, 1)


def _flat_summary(c: ClusterSpec, per_domain: int) -> dict:
    """flat / nvlink_domain: per-GPU NICs into one core (generators.build_nvlink_domain)."""
    gpus, domains = c.gpus, c.nodes // per_domain
    domain_gpus = c.gpus_per_node * per_domain
    half = gpus // 2
    a = half % domain_gpus  # first-half GPUs of the domain the cut falls in
    bisection = min(a, domain_gpus - a) * c.intra_node.bandwidth_gb_s + half * c.inter_node.bandwidth_gb_s
    return _summary({"core": 1, "gpu": gpus, "nic": gpus, "nvswitch": domains},
                    {"network": gpus, "nvlink": gpus, "pcie": gpus}, domains, domain_gpus,
                    bisection if half else 0.0)


def _summary(vertices: dict[str, int], links: dict[str, int], domains: int, domain_gpus: int,
             bisection_gb_s: float) -> dict:
    return {"vertices": {k: n for k, n in sorted(vertices.items()) if n},
            "links": {k: n for k, n in sorted(links.items()) if n},
            "nvlink_domains": domains, "gpus_per_domain": [domain_gpus],
            "bisection_gb_s": float(bisection_gb_s)}


@dataclass(frozen=True)
class _Cut:
    """Where the rank-order bisection cuts the nodes: nodes < `node` are in the first half,
    node `node` has its first `a` GPUs there, the rest are in the second half."""

    node: int
    a: int

    def first_half_gpus(self, n: int, gpn: int) -> int:
        return gpn if n < self.node else (self.a if n == self.node else 0)


def _tree_summary(c: ClusterSpec, t: FatTreeTopology) -> dict:
    """fat_tree / rail_optimized (generators.build_fat_tree, build_rail_optimized)."""
    rail = t.kind == "rail_optimized"
    gpn, nics, npl = c.gpus_per_node, t.nics_per_node, t.nodes_per_leaf
    units = c.nodes // npl
    leaves = units * nics if rail else units
    spines = t.spines if leaves >= 2 else 0
    half = c.gpus // 2
    cut = _Cut(*divmod(half, gpn))
    nvswitch = min(cut.a, gpn - cut.a) * c.intra_node.bandwidth_gb_s
    bisection = nvswitch + _network_flow(c, t, cut) if half else 0.0
    return _summary({"gpu": c.gpus, "leaf": leaves, "nic": c.nodes * nics, "nvswitch": c.nodes,
                     "spine": spines},
                    {"network": c.nodes * nics + leaves * spines, "nvlink": c.gpus, "pcie": c.gpus},
                    c.nodes, gpn, bisection)


def _nic_flows(cut: _Cut, n: int, gpn: int, nics: int, nic_gb_s: float) -> tuple[float, list[float]]:
    """Node n's flow matched at its NICs and each NIC's excess toward its leaf (+ supply,
    - demand), capped by the NIC-leaf link. GPU g uses NIC g * nics // gpn (generators)."""
    first = cut.first_half_gpus(n, gpn)
    s, d = [0] * nics, [0] * nics
    for g in range(gpn):
        (s if g < first else d)[g * nics // gpn] += 1
    matched = sum(min(x, y) for x, y in zip(s, d, strict=True)) * nic_gb_s
    excess = [max(-nic_gb_s, min(nic_gb_s, (x - y) * nic_gb_s)) for x, y in zip(s, d, strict=True)]
    return matched, excess


def _leaf_loads(c: ClusterSpec, t: FatTreeTopology, cut: _Cut, nodes: range) -> tuple[float, list[list[float]]]:
    """Flow matched at the NICs of `nodes` (one unit's, or one node standing for a unit in one
    half) and, per leaf of the unit (rail r, or the unit's one leaf), [supply, demand] arriving."""
    rail = t.kind == "rail_optimized"
    loads = [[0.0, 0.0] for _ in range(t.nics_per_node if rail else 1)]
    matched = 0.0
    for n in nodes:
        m, excess = _nic_flows(cut, n, c.gpus_per_node, t.nics_per_node, t.nic_gb_s)
        matched += m
        for r, e in enumerate(excess):
            loads[r if rail else 0][0 if e > 0 else 1] += abs(e)
    return matched, loads


def _unit_classes(c: ClusterSpec, t: FatTreeTopology, cut: _Cut) -> list[tuple[int, float, list[list[float]]]]:
    """(how many units, flow matched at their NICs, leaf loads) for the units wholly in the
    first half, wholly in the second, and the one the cut falls in (if any)."""
    npl = t.nodes_per_leaf
    units = c.nodes // npl
    first = cut.node // npl  # units whose nodes are all before the cut node
    mixed = int(cut.node % npl != 0 or cut.a != 0)
    out = []
    for count, rep in ((first, 0), (units - first - mixed, c.nodes - 1)):
        if count:
            _, loads = _leaf_loads(c, t, cut, range(rep, rep + 1))
            out.append((count, 0.0, [[npl * s, npl * d] for s, d in loads]))
    if mixed:
        out.append((1, *_leaf_loads(c, t, cut, range(first * npl, (first + 1) * npl))))
    return out


def _network_flow(c: ClusterSpec, t: FatTreeTopology, cut: _Cut) -> float:
    """Max flow of the scale-out tree: NICs, leaves and the spines (see module doc)."""
    rail = t.kind == "rail_optimized"
    npl = t.nodes_per_leaf
    uplink = (npl if rail else npl * t.nics_per_node) * t.nic_gb_s / t.oversubscription  # all spines
    total, up_supply, up_demand = 0.0, 0.0, 0.0
    for count, matched, loads in _unit_classes(c, t, cut):
        total += count * matched
        for supply, demand in loads:
            total += count * min(supply, demand)
            up_supply += count * min(uplink, max(supply - demand, 0.0))
            up_demand += count * min(uplink, max(demand - supply, 0.0))
    leaves = c.nodes // npl * (t.nics_per_node if rail else 1)
    return total + (min(up_supply, up_demand) if leaves >= 2 else 0.0)
