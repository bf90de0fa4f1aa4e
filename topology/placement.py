"""Rank placement: a layout's ranks onto the cluster's available GPUs.

Rank order follows Megatron-LM's RankGenerator (megatron/core/parallel_state.py): the
first dimension of `order` varies fastest; the default "tp-cp-dp-pp" puts TP on
neighbouring GPUs, then CP, DP and PP. Nodes in `cluster.unavailable_nodes` get no rank.

Domain alignment: when the innermost groups (the longest prefix of `order` whose product
fits one NVLink domain) do not tile a domain exactly (e.g. TP16 on a 72-GPU NVL72 domain),
each domain hosts only whole units and the rest of its GPUs stay idle, so no such group
straddles two domains. Plain contiguous filling is used when alignment leaves too few GPUs.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from itertools import permutations
from math import gcd
from typing import Literal

import numpy as np

from topology.errors import InfeasibleError, Problem, SpecError
from topology.generators import build_graph, gpu_id
from topology.graph import GpuSlot, gpu_slots_of
from topology.spec import ClusterSpec

GroupKind = Literal["tp", "cp", "dp", "pp"]
GROUP_KINDS: tuple[GroupKind, ...] = ("tp", "cp", "dp", "pp")
MEGATRON_ORDER: tuple[GroupKind, ...] = ("tp", "cp", "dp", "pp")


def parse_order(order: str | tuple[str, ...] | None) -> tuple[GroupKind, ...]:
    """'tp-cp-dp-pp' or a tuple of the four kinds, fastest first. Raises: SpecError."""
    return _parse_order(order if order is None or isinstance(order, str) else tuple(order))


@lru_cache(maxsize=256)  # every group_links call parses its order: a handful of distinct ones
def _parse_order(order: str | tuple[str, ...] | None) -> tuple[GroupKind, ...]:
    if order is None:
        return MEGATRON_ORDER
    parts = tuple(order.split("-")) if isinstance(order, str) else tuple(order)
    if sorted(parts) != sorted(GROUP_KINDS):
        raise SpecError("bad order", [Problem("order", f"{'-'.join(parts)} is not a permutation of tp-cp-dp-pp")])
    return parts  # type: ignore[return-value]


def world_size(dims: dict[str, int]) -> int:
    """Ranks of a layout: tp x cp x dp x pp."""
    return dims["tp"] * dims["cp"] * dims["dp"] * dims["pp"]


def order_stride(order: tuple[str, ...], dims: dict[str, int], kind: str) -> int:
    """Rank distance between neighbouring members of a `kind` group: the product of the
    degrees of the kinds before it in `order` (fastest first)."""
    stride = 1
    for k in order:
        if k == kind:
            return stride
        stride *= dims[k]
    return stride


def _nodes_per_domain(cluster: ClusterSpec) -> int:
    """Nodes per NVLink domain of a generated topology (nvlink_domain; else 1)."""
    t = cluster.topology
    return t.nodes_per_domain if t is not None and t.kind == "nvlink_domain" else 1


def candidate_orders(dims: dict[str, int]) -> list[tuple[GroupKind, ...]]:
    """Orders that give distinct placements for these degrees (size-1 kinds dropped),
    Megatron's order first. Each is a valid `order=` for group_links."""
    active = [k for k in MEGATRON_ORDER if dims[k] > 1]
    seen, out = set(), [MEGATRON_ORDER]
    seen.add(tuple(k for k in MEGATRON_ORDER if k in active))
    for perm in permutations(active):
        if perm not in seen:
            seen.add(perm)
            rest = tuple(k for k in MEGATRON_ORDER if k not in perm)
            out.append(perm + rest)
    return out


@lru_cache(maxsize=16)
def cluster_slots(cluster: ClusterSpec) -> tuple[GpuSlot, ...]:
    """Every GPU slot of the cluster in node order (memoized; the graph is built only
    for explicit graphs)."""
    if cluster.topology is not None and cluster.topology.kind == "graph":
        return tuple(gpu_slots_of(build_graph(cluster)))
    per_domain = _nodes_per_domain(cluster)
    g = cluster.gpus_per_node
    return tuple(GpuSlot(gpu_id(n, k), n, k, n // per_domain) for n in range(cluster.nodes) for k in range(g))


@dataclass(frozen=True)
class Placement:
    """Rank r runs on `slots[r]`; `coords[r]` are its (tp, cp, dp, pp) indices."""

    order: tuple[GroupKind, ...]
    dims: dict[str, int]
    slots: tuple[GpuSlot, ...]
    aligned: bool

    def coords(self, rank: int) -> dict[str, int]:
        out: dict[str, int] = {}
        for kind in self.order:
            out[kind] = rank % self.dims[kind]
            rank //= self.dims[kind]
        return out

    def stride(self, kind: str) -> int:
        """Rank distance between neighbouring members of a `kind` group."""
        return order_stride(self.order, self.dims, kind)

    def groups(self, kind: str) -> list[list[int]]:
        """Ranks of every group of `kind`, each in increasing index along `kind`."""
        stride, size = self.stride(kind), self.dims[kind]
        world = len(self.slots)
        starts = [r for r in range(world) if (r // stride) % size == 0]
        return [[s + i * stride for i in range(size)] for s in starts]


def _unit(dims: dict[str, int], order: tuple[str, ...], domain_gpus: int) -> int:
    unit, prod = 1, 1
    for kind in order:
        prod *= dims[kind]
        if prod <= domain_gpus:
            unit = prod
    return unit


def _aligned_slots(free: list[GpuSlot], unit: int) -> list[GpuSlot]:
    by_domain: dict[int, list[GpuSlot]] = {}
    for s in free:
        by_domain.setdefault(s.domain, []).append(s)
    out: list[GpuSlot] = []
    for slots in by_domain.values():
        out.extend(slots[: len(slots) // unit * unit])
    return out


def _check_room(cluster: ClusterSpec, world: int, free_gpus: int) -> None:
    if world > free_gpus:
        raise InfeasibleError(
            f"layout needs {world} GPUs; {free_gpus} are available",
            {"needed_gpus": world, "available_gpus": free_gpus,
             "unavailable_nodes": sorted(set(cluster.unavailable_nodes))})


def place(cluster: ClusterSpec, dims: dict[str, int], order: tuple[GroupKind, ...] = MEGATRON_ORDER) -> Placement:
    """Map the layout's ranks onto available GPUs (see module doc).

    Raises: InfeasibleError when the layout needs more GPUs than are available.
    """
    world = world_size(dims)
    down = set(cluster.unavailable_nodes)
    free = [s for s in cluster_slots(cluster) if s.node not in down]
    _check_room(cluster, world, len(free))
    domain_gpus = max(Counter(s.domain for s in free).values())
    aligned = _aligned_slots(free, _unit(dims, order, domain_gpus))
    use_aligned = len(aligned) >= world
    chosen = aligned if use_aligned else free
    return Placement(order, dict(dims), tuple(chosen[:world]), use_aligned and len(aligned) < len(free))


@lru_cache(maxsize=64)
def free_domain_sizes(cluster: ClusterSpec) -> tuple[int, int, frozenset[int]]:
    """(free GPUs, NVLink domains with a free GPU, their distinct free-GPU counts) for
    generated topologies whose domains are runs of whole nodes (flat: one node;
    nvlink_domain: nodes_per_domain, which must divide nodes), in O(unavailable nodes)."""
    per_domain = _nodes_per_domain(cluster)
    down = Counter(n // per_domain for n in set(cluster.unavailable_nodes))
    sizes: Counter[int] = Counter()
    for k in down.values():
        if k < per_domain:
            sizes[cluster.gpus_per_node * (per_domain - k)] += 1
    intact = cluster.nodes // per_domain - len(down)
    if intact:
        sizes[cluster.gpus_per_node * per_domain] += intact
    return sum(k * v for k, v in sizes.items()), sum(sizes.values()), frozenset(sizes)


def uniform_domain_ranks(cluster: ClusterSpec, dims: dict[str, int],
                         order: tuple[GroupKind, ...] = MEGATRON_ORDER) -> int | None:
    """E such that `place` puts rank r in the (r // E)-th NVLink domain that has a free
    GPU, when every such domain has the same free-GPU count F (no down nodes, or only
    whole domains down): E = F, or F rounded down to a multiple of the aligned unit when
    place aligns. None when free counts differ (partly-down domains) or for explicit
    graphs. Raises: InfeasibleError as place.
    """
    if cluster.topology is not None and cluster.topology.kind == "graph":
        return None
    free_gpus, domains, sizes = free_domain_sizes(cluster)
    world = world_size(dims)
    _check_room(cluster, world, free_gpus)
    if len(sizes) != 1:
        return None
    (f,) = sizes
    unit = _unit(dims, order, f)
    aligned = f // unit * unit
    return aligned if aligned * domains >= world else f


@dataclass(frozen=True)
class Progressions:
    """The groups of one kind when rank r sits in domain r // e (uniform_domain_ranks):
    group members b + i*s, i < n, bases b = q*s*n + j (j < s), without listing ranks."""

    world: int
    s: int  # stride
    n: int  # size
    e: int  # ranks per domain

    def locate(self, r: int) -> tuple[int, int]:
        """(base b, index i) of rank r in its group."""
        q, rem = divmod(r, self.s * self.n)
        return q * self.s * self.n + rem % self.s, rem // self.s

    def first_in_domain(self, b: int, d: int) -> int:
        """Smallest index i with b + i*s in domain d or later (ceil division)."""
        return max(0, -(-(d * self.e - b) // self.s))

    def last_in_domain(self, b: int, d: int) -> int:
        return min(self.n - 1, ((d + 1) * self.e - 1 - b) // self.s)

    def ring_next(self, b: int, i: int, step: int) -> int:
        """Rank of the member `step` (+1 or -1) along the group ring."""
        return b + (i + step) % self.n * self.s

    def domain_ring_next(self, b: int, i: int, step: int) -> int | None:
        """Next member (step +1/-1) on the sub-ring inside i's domain; None if alone."""
        d = (b + i * self.s) // self.e
        lo, hi = self.first_in_domain(b, d), self.last_in_domain(b, d)
        if lo == hi:
            return None
        return b + (lo + (i - lo + step) % (hi - lo + 1)) * self.s

    def column_next(self, b: int, i: int, step: int) -> int:
        """Member at i's position in the next (step +1/-1) domain of the group, cyclic
        (the cross-domain rings of uniform groups)."""
        d = (b + i * self.s) // self.e
        lo, hi = self.first_in_domain(b, d), self.last_in_domain(b, d)
        edge = hi + 1 if step > 0 else lo - 1
        other = (b + edge % self.n * self.s) // self.e
        return b + (self.first_in_domain(b, other) + i - lo) * self.s

    def unit_flows(self, start: int, stop: int, phase: str, uniform) -> list[tuple[int, int]]:
        """Flows (rank pairs) of one phase (ring | intra | inter | a2a) with an endpoint in
        ranks [start, stop); `uniform(b)` says whether group b gets cross-domain column rings."""
        out = []
        inside = range(start, stop)
        nxt: int | None
        prv: int | None
        for r in inside:
            b, i = self.locate(r)
            if phase == "a2a":
                others = [b + k * self.s for k in range(self.n) if k != i]
                out += [(r, m) for m in others] + [(m, r) for m in others if m not in inside]
                continue
            if phase == "ring":
                nxt, prv = self.ring_next(b, i, 1), self.ring_next(b, i, -1)
            elif phase == "intra":
                nxt, prv = self.domain_ring_next(b, i, 1), self.domain_ring_next(b, i, -1)
            elif uniform(b):
                nxt, prv = self.column_next(b, i, 1), self.column_next(b, i, -1)
            else:
                continue
            if nxt is not None:
                out.append((r, nxt))
                if prv is not None and prv not in inside:
                    out.append((prv, r))
        return out


def progression_counts(x: int, s: int, n: int, e: int) -> tuple[frozenset[int], int]:
    """Members per domain (distinct values) and domains spanned of the ranks x + i*s,
    i < n, with rank r in domain r // e and 0 <= x < e. Windows k >= 1 hold
    floor((hi - x) / s) - ceil((lo - x) / s) + 1 members; the interior ones repeat with
    period s / gcd(e, s) in k (their offset (k*e - x) mod s does), so O(s) windows."""
    if s >= e:
        return frozenset({1}), n
    last = x + (n - 1) * s
    k1 = last // e
    counts = {min(n, (e - 1 - x) // s + 1)}
    interior = range(1, min(k1 - 1, s // gcd(e, s)) + 1)
    for k in (*interior, k1) if k1 else ():
        lo, hi = k * e, min((k + 1) * e - 1, last)
        counts.add((hi - x) // s - (lo - x + s - 1) // s + 1)
    return frozenset(counts), k1 + 1


@lru_cache(maxsize=65536)
def domain_stats(world: int, s: int, n: int, e: int) -> tuple[frozenset[int], int, bool]:
    """Over every group of one kind (stride s, size n, bases q*s*n + j with j < s) when
    rank r sits in domain r // e: the distinct members-per-domain counts, the most
    domains one group spans, and whether a group with equal counts spans >= 2 domains.
    A group's pattern depends only on its base mod e, so each residue is done once."""
    block = s * n
    if s >= e:
        xs: set[int] = {0}
    elif (world // block) * s <= 4 * e:
        xs = {(b0 + j) % e for b0 in range(0, world, block) for j in range(s)}
    else:
        period = e // gcd(block, e)
        xs = {(q * block + j) % e for q in range(min(world // block, period)) for j in range(s)}
    counts: set[int] = set()
    spans, uniform_multi = 1, False
    for x in xs:
        c, sp = progression_counts(x, s, n, e)
        counts |= c
        spans = max(spans, sp)
        uniform_multi = uniform_multi or (len(c) == 1 and sp > 1)
    return frozenset(counts), spans, uniform_multi


def domain_capacities(cluster: ClusterSpec, dims: dict[str, int],
                      order: tuple[GroupKind, ...] = MEGATRON_ORDER) -> list[int]:
    """Ranks `place` puts in each NVLink domain that has a free GPU, in domain order (rank r
    goes to the first domain whose running total exceeds r), for flat / nvlink_domain
    clusters; O(domains), no slot list. Raises: InfeasibleError as place."""
    per_domain = _nodes_per_domain(cluster)
    down = Counter(n // per_domain for n in set(cluster.unavailable_nodes))
    free = [cluster.gpus_per_node * (per_domain - down[d]) for d in range(cluster.nodes // per_domain)]
    free = [f for f in free if f]
    world = world_size(dims)
    _check_room(cluster, world, sum(free))
    unit = _unit(dims, order, max(free))
    aligned = [f // unit * unit for f in free]
    return aligned if sum(aligned) >= world else free


def placement_stats(cluster: ClusterSpec, dims: dict[str, int],
                    order: tuple[GroupKind, ...] = MEGATRON_ORDER) -> tuple[int, int, bool]:
    """(ranks, nodes used, domain-aligned) of `place(cluster, dims, order)` without listing
    slots: per NVLink domain with a free GPU, the ranks place puts there (domain_capacities'
    rule), each domain filling its free nodes in order, gpus_per_node ranks a node.
    O(domains). Raises: InfeasibleError as place."""
    if cluster.topology is not None and cluster.topology.kind == "graph":
        p = place(cluster, dims, order)
        return len(p.slots), len({s.node for s in p.slots}), p.aligned
    caps = domain_capacities(cluster, dims, order)
    free_gpus, _, _ = free_domain_sizes(cluster)
    left, nodes = world_size(dims), 0
    for cap in caps:
        take = min(cap, left)
        nodes += -(-take // cluster.gpus_per_node)
        left -= take
        if not left:
            break
    return world_size(dims), nodes, sum(caps) < free_gpus


def domain_stats_of(capacities: list[int], dims: dict[str, int], order: tuple[GroupKind, ...],
                    kind: str) -> tuple[frozenset[int], int, bool]:
    """domain_stats for any per-domain rank capacities, by numpy over every rank (O(ranks),
    vectorized): ranks grouped by reshaping the rank grid (fastest kind last), each group's
    domains are nondecreasing, so its members per domain are the run lengths."""
    world = world_size(dims)
    domain_of = np.repeat(np.arange(len(capacities)), capacities)[:world]
    grid = np.arange(world).reshape([dims[k] for k in reversed(order)])
    axis = len(order) - 1 - order.index(kind)
    groups = domain_of[np.moveaxis(grid, axis, -1).reshape(-1, dims[kind])]
    starts = np.ones(groups.shape, dtype=bool)
    starts[:, 1:] = groups[:, 1:] != groups[:, :-1]
    first = np.flatnonzero(starts)
    runs = np.diff(np.append(first, groups.size))
    spans = starts.sum(axis=1)
    row_first = np.concatenate(([0], np.cumsum(spans)[:-1]))
    even = np.minimum.reduceat(runs, row_first) == np.maximum.reduceat(runs, row_first)
    return frozenset(runs.tolist()), int(spans.max()), bool((even & (spans > 1)).any())
