"""What each parallel group of a layout gets from the cluster: size, bandwidth, latency.

This is the query the cost model calls. Ranks are placed by topology.placement (Megatron
order by default, `order=` selects another), then every group of one kind runs at once:
its ring traffic, its in-domain and cross-domain sub-rings (hierarchical forms) and its
all-to-all pairs are routed together over the cluster (topology.routing), and the slowest
group's bandwidth and latency are reported. For a cluster without `topology` (or with the
`flat` / `nvlink_domain` generators) routing has a closed form giving exactly the flat
figures: a group inside one NVLink domain gets `intra_node`, one that leaves it
`inter_node` (the seed: TP8 gets 450 GB/s, the DP group of TP8 x DP64 gets 45 GB/s).

Fast paths give the same figures without placing or routing every rank (tests compare
them with the full routing): flat / nvlink_domain clusters use the closed form in O(1)
when every NVLink domain left has the same free GPUs (else numpy run lengths over the
rank grid); fat_tree / rail_optimized route one unit (a leaf's or scalable unit's nodes)
per distinct view on a two-unit copy of the fabric (with down nodes: every unit's own
flows); explicit graphs take the exact path.

The GroupLink record and its assembly from routed phases live in topology.link_assembly.
"Node" in `crosses_nodes` / `ranks_per_node` means NVLink domain (a node on flat clusters).
Units: bandwidths GB/s per GPU per direction (busbw); latencies seconds.
"""
from __future__ import annotations

from collections import defaultdict
from functools import lru_cache
from itertools import count
from math import gcd
from collections.abc import Callable

from topology.generators import build_graph, check_nvlink_domain, gpu_id
from topology.graph import latency_ps
from topology.link_assembly import (  # noqa: F401 (A2A_FLOW_LIMIT is public here too)
    A2A_FLOW_LIMIT, GroupLink, a2a_routed, assemble_link, one_rank_link, placed_link,
)
from topology.placement import (
    GROUP_KINDS, GroupKind, Placement, Progressions, candidate_orders, cluster_slots, domain_capacities,
    domain_stats, domain_stats_of, order_stride, parse_order, place, progression_counts,
    uniform_domain_ranks, world_size,
)
from topology.routing import (
    FlatFabric, GraphFabric, Share, alltoall_share, concurrent_share, owned_share, slowest,
)
from topology.graph_spec import FatTreeTopology
from topology.spec import ClusterSpec


@lru_cache(maxsize=16)
def fabric_for(cluster: ClusterSpec):
    """The routing fabric of a cluster (memoized per frozen spec). Raises: SpecError."""
    if _flat_like(cluster):
        return _flat_fabric(cluster, {s.vertex: s.domain for s in cluster_slots(cluster)})
    return GraphFabric(build_graph(cluster))


def _flat_like(cluster: ClusterSpec) -> bool:
    """Flat or nvlink_domain (FlatFabric) cluster. Raises: SpecError (bad nvlink_domain)."""
    t = cluster.topology
    if t is not None and t.kind == "nvlink_domain":
        check_nvlink_domain(cluster, t)
    return t is None or t.kind in ("flat", "nvlink_domain")


def _flat_fabric(cluster: ClusterSpec, domain_of: dict[str, int]) -> FlatFabric:
    """A FlatFabric with the cluster's port figures; an empty `domain_of` serves the
    closed forms only. Latencies are the generator's two half hops (generators module doc)."""
    intra, inter = cluster.intra_node, cluster.inter_node
    return FlatFabric(domain_of, intra.bandwidth_gb_s, 2 * latency_ps(intra.latency_us / 2),
                      inter.bandwidth_gb_s, 2 * latency_ps(inter.latency_us / 2))


def _kind_link(cluster: ClusterSpec, fabric, p: Placement, kind: GroupKind) -> GroupLink:
    def alltoall(groups: list) -> Share | None:
        if not (isinstance(fabric, FlatFabric) or a2a_routed(len(p.slots), p.dims[kind])):
            return None
        return alltoall_share(fabric, [[p.slots[r].vertex for r in g] for g in groups])

    return placed_link(cluster, p, kind, lambda phase: concurrent_share(fabric, phase), alltoall)


def _flat_kind_link(cluster: ClusterSpec, fabric: FlatFabric, dims: dict[str, int],
                    order: tuple[GroupKind, ...], kind: GroupKind, e: int | list[int]) -> GroupLink:
    """_kind_link in closed form on a FlatFabric when rank r sits in domain r // e
    (placement.uniform_domain_ranks), or, given per-domain capacities instead (partly-down
    domains), from numpy run lengths: every ring, sub-ring and column ring puts load 1 on
    each port it uses (FlatFabric.ports_share), so only which ports are used matters."""
    size, stride = dims[kind], order_stride(order, dims, kind)
    if size == 1:
        return one_rank_link(cluster, kind, stride)
    counts, spans, uniform_multi = domain_stats(world_size(dims), stride, size, e) if isinstance(e, int) \
        else domain_stats_of(e, dims, order, kind)
    shared = max(counts) >= 2  # some domain holds two members: NVLink ring steps
    shares = {"ring": fabric.ports_share(shared, spans > 1), "intra": fabric.ports_share(shared, False),
              "inter": fabric.ports_share(False, uniform_multi),
              "a2a": fabric.alltoall_counts_share(size, counts)}
    return assemble_link(cluster, kind, size, stride, shares, counts, spans)


_TOKENS: dict[ClusterSpec, int] = {}
_BY_ID: dict[int, tuple[ClusterSpec, int]] = {}
_CLUSTERS: dict[int, ClusterSpec] = {}
_NEXT = count()
MAX_CLUSTERS = 256  # distinct clusters remembered before every memo is dropped


def _token(cluster: ClusterSpec) -> int:
    """A small int standing for the cluster's value. Looked up by identity first: hashing
    a spec with an explicit graph walks every vertex (about 0.5 ms for 512 GPUs)."""
    hit = _BY_ID.get(id(cluster))
    if hit is not None and hit[0] is cluster:
        return hit[1]
    if len(_BY_ID) >= MAX_CLUSTERS or len(_TOKENS) >= MAX_CLUSTERS:
        for memo in (_BY_ID, _TOKENS, _CLUSTERS):
            memo.clear()
        _links.cache_clear()
    token = _TOKENS.get(cluster)
    if token is None:
        token = _TOKENS[cluster] = next(_NEXT)
        _CLUSTERS[token] = cluster
    _BY_ID[id(cluster)] = (cluster, token)  # holds a reference so the id is not reused
    return token


@lru_cache(maxsize=4096)
def _links(token: int, dims: tuple[int, int, int, int],
           order: tuple[GroupKind, ...]) -> tuple[tuple[str, GroupLink], ...]:
    cluster = _CLUSTERS[token]
    named: dict[str, int] = dict(zip(GROUP_KINDS, dims, strict=True))
    if _flat_like(cluster):
        e = uniform_domain_ranks(cluster, named, order)
        caps = domain_capacities(cluster, named, order) if e is None else e
        fabric = _flat_fabric(cluster, {})
        return tuple((kind, _flat_kind_link(cluster, fabric, named, order, kind, caps))
                     for kind in GROUP_KINDS)
    npl = _tree_unit_nodes(cluster)
    e = uniform_domain_ranks(cluster, named, order) if npl and not cluster.unavailable_nodes else None
    if e is not None:
        return tuple((kind, _tree_kind_link(cluster, named, order, kind, e)) for kind in GROUP_KINDS)
    p = place(cluster, named, order)
    if npl:
        return tuple((kind, _tree_placed_link(cluster, p, kind)) for kind in GROUP_KINDS)
    fabric = fabric_for(cluster)
    return tuple((kind, _kind_link(cluster, fabric, p, kind)) for kind in GROUP_KINDS)


def group_links(cluster: ClusterSpec, tp: int, cp: int, dp: int, pp: int, *,
                order: str | tuple[str, ...] | None = None) -> dict[str, GroupLink]:
    """GroupLink for each of tp, cp, dp, pp with every group of a kind active at once.

    Pass all four degrees of the layout: the groups of the other kinds place this kind's
    groups and share its links. `order` is the rank order, fastest first ("tp-cp-dp-pp",
    Megatron's default; see placement.candidate_orders). Memoized per (cluster, degrees,
    order); a repeated call costs about 2 us. Raises: SpecError (bad order or topology),
    InfeasibleError (more ranks than available GPUs).
    """
    return dict(_links(_token(cluster), (tp, cp, dp, pp), parse_order(order)))


def best_order(cluster: ClusterSpec, tp: int, cp: int, dp: int, pp: int,
               cost_s: Callable[[dict[str, GroupLink]], float]) -> tuple[tuple[str, ...], dict[str, GroupLink], float]:
    """The rank order (placement) whose group links minimise `cost_s(links)`, e.g. the
    cost model's communication time of one step; ties keep Megatron's order.

    Returns (order, links, cost). Raises: as group_links.
    """
    def scored(order: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, GroupLink], float]:
        links = group_links(cluster, tp, cp, dp, pp, order=order)
        return order, links, cost_s(links)
    # min keeps the first of equal costs; candidate_orders lists Megatron's order first.
    return min(map(scored, candidate_orders({"tp": tp, "cp": cp, "dp": dp, "pp": pp})), key=lambda r: r[2])


# --- Fat trees (fat_tree, rail_optimized) by symmetry -------------------------------------
# Every link belongs to one unit (a leaf's nodes, or a rail-optimized scalable unit): the
# GPU, NVSwitch and NIC links of its nodes and its leaves' spine links. A unit's links carry
# only flows with an endpoint in it, and (ideal ECMP over identical spines) a flow leaving
# the unit loads them the same whichever unit it goes to. So each distinct unit "view" is
# routed once on a two-unit copy of the fabric (unit 0 = the unit, one GPU of unit 1 =
# everywhere else), and the bottleneck is the minimum over views. Units whose views are
# translates of each other (group pattern repeating every s*n ranks) share a view.


def _tree_unit_nodes(cluster: ClusterSpec) -> int | None:
    t = cluster.topology
    if not isinstance(t, FatTreeTopology):  # fat_tree and rail_optimized
        return None
    return t.nodes_per_leaf if cluster.nodes // t.nodes_per_leaf >= 2 else None


def _fat_tree(cluster: ClusterSpec) -> FatTreeTopology:
    """The topology of a cluster the callers already know is a fat tree (or rail-optimized)."""
    t = cluster.topology
    if not isinstance(t, FatTreeTopology):
        raise TypeError(f"{cluster.name}: not a fat-tree cluster")  # a caller bug, not user input
    return t


@lru_cache(maxsize=16)
def _unit_pair(cluster: ClusterSpec) -> tuple[GraphFabric, frozenset[int], dict]:
    """The fabric of two units of this cluster, the vertex indices of unit 0 and a route
    memo for owned_share. One spine carries all of a leaf's uplink capacity: with ECMP each
    of k spines gets 1/k of the load and 1/k of the capacity, so capacity over load is
    unchanged."""
    t = _fat_tree(cluster)
    npl = t.nodes_per_leaf
    pair = cluster.model_copy(update={"name": f"{cluster.name}/unit-pair", "nodes": 2 * npl,
                                      "topology": t.model_copy(update={"spines": 1})})
    fabric = GraphFabric(build_graph(pair))

    def in_unit0(v: str) -> bool:
        if v.startswith("n"):
            return int(v[1:v.index(".")]) < npl
        return v == "leaf0" or v.startswith("su0.")
    return fabric, frozenset(i for i, v in enumerate(fabric.names) if in_unit0(v)), {}


def _views(prog: Progressions, unit_ranks: int) -> list[int]:
    """First ranks of units, one per distinct view. Groups lie in blocks of s*n ranks and
    repeat block to block, so units at the same offset from the block pattern (rank mod
    s*n) share a view. When s divides the unit size, units farther than s + e ranks from
    every block edge (ring, sub-ring and column wraps stay that close) share a view with
    any unit so placed in a block whose groups sit alike on the domains (block start mod e).
    """
    s, n, world, u = prog.s, prog.n, prog.world, unit_ranks
    block, full = s * n, world // unit_ranks
    partial = [full * u] if world % u else []
    if s >= u:  # one member per unit: every rank sends out and receives from outside
        return ([0] if full else []) + partial
    if u % s or block <= u:
        return [k * u for k in range(min(full, block // gcd(block, u)))] + partial
    margin = s + prog.e
    views: dict[tuple[str, int], int] = {}
    for q in range(world // block + 1):
        edge = q * block
        for k in range(max(0, (edge - margin - u) // u), min(full - 1, (edge + margin) // u) + 1):
            views.setdefault(("edge", k * u % block), k * u)
        k = -(-(edge + margin) // u)  # first unit of block q clear of both edges
        if k < full and (k + 1) * u + margin <= edge + block:
            views.setdefault(("inner", edge % prog.e), k * u)
    return list(views.values()) + partial


def _view_share(pair: tuple[GraphFabric, frozenset[int], dict], npl: int, prog: Progressions,
                start: int, stop: int, phase: str, uniform) -> Share | None:
    """Share of one unit view. The flows depend only on the key below (not on the world
    size): the window's offset in its block and where that block starts modulo e (which
    groups get column rings), so layouts sharing a kind's stride and size share views."""
    fabric, owned, memo = pair
    x = start % (prog.s * prog.n)
    key = ("view", phase, prog.s, prog.n, prog.e, x, (start - x) % prog.e, stop - start)
    if key in memo:
        return memo[key]
    if len(memo) >= GraphFabric.ROUTE_CACHE:
        memo.clear()
    out_gpu = gpu_id(npl, 0)

    def name(r: int) -> str:
        return gpu_id(*divmod(r - start, prog.e)) if start <= r < stop else out_gpu
    flows = [(name(a), name(b)) for a, b in prog.unit_flows(start, stop, phase, uniform)]
    memo[key] = share = owned_share(fabric, flows, owned, memo)
    return share


def _tree_kind_link(cluster: ClusterSpec, dims: dict[str, int], order: tuple[GroupKind, ...],
                    kind: GroupKind, e: int) -> GroupLink:
    """_kind_link by unit views (see above)."""
    size, stride = dims[kind], order_stride(order, dims, kind)
    if size == 1:
        return one_rank_link(cluster, kind, stride)
    world = world_size(dims)
    npl = _fat_tree(cluster).nodes_per_leaf
    prog = Progressions(world, stride, size, e)
    starts = _views(prog, npl * e)
    counts, spans, _ = domain_stats(world, stride, size, e)
    pair = _unit_pair(cluster)

    def uniform(b: int) -> bool:
        c, sp = progression_counts(b % e, stride, size, e)
        return len(c) == 1 and sp > 1

    def phase_share(phase: str) -> Share | None:
        return slowest([_view_share(pair, npl, prog, a, min(a + npl * e, world), phase, uniform)
                        for a in starts])
    shares = {phase: phase_share(phase) for phase in ("ring", "intra", "inter")}
    shares["a2a"] = phase_share("a2a") if a2a_routed(world, size) else None
    return assemble_link(cluster, kind, size, stride, shares, counts, spans)


@lru_cache(maxsize=16)
def _unit_names(cluster: ClusterSpec) -> dict[str, tuple[int, str]]:
    """GPU vertex -> (its unit, its name in unit 0 of the unit pair)."""
    npl = _fat_tree(cluster).nodes_per_leaf
    return {s.vertex: (s.node // npl, gpu_id(s.node % npl, s.local)) for s in cluster_slots(cluster)}


def _tree_placed_link(cluster: ClusterSpec, p: Placement, kind: GroupKind) -> GroupLink:
    """_kind_link on a fat tree with down nodes (no repeating pattern): every unit's own
    flows are routed on the unit pair, O(ranks) work but no full-size graph."""
    pair, names = _unit_pair(cluster), _unit_names(cluster)
    out_gpu = gpu_id(_fat_tree(cluster).nodes_per_leaf, 0)

    def share(phase: list[list[tuple[str, str]]]) -> Share | None:
        per_unit: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for a, b in (f for flows in phase for f in flows):
            (ua, na), (ub, nb) = names[a], names[b]
            per_unit[ua].append((na, nb if ua == ub else out_gpu))
            if ub != ua:
                per_unit[ub].append((out_gpu, nb))
        return slowest([owned_share(pair[0], flows, pair[1], pair[2]) for flows in per_unit.values()])

    def alltoall(groups: list) -> Share | None:
        if not a2a_routed(len(p.slots), p.dims[kind]):
            return None
        vs = [[p.slots[r].vertex for r in g] for g in groups]
        return share([[(a, b) for a in g for b in g if a != b] for g in vs])

    return placed_link(cluster, p, kind, share, alltoall)
