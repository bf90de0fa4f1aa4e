"""Routing concurrent flows over the cluster and sharing link capacity among them.

A flow is one GPU sending to another (a ring step, an all-to-all pair, a p2p send).
Flows take the minimum-latency paths (ties broken towards fewer hops); traffic is split
evenly over all equal-cost paths, i.e. ideal ECMP (Hopps, RFC 2992). GPUs never forward
(NVLink and PCIe peers do not route through a GPU). With unit demand per flow the time to
move V bytes over a link e is V x load(e) / capacity(e), so a set of concurrent flows
finishes at V / min_e(capacity(e) / load(e)): a group's bandwidth is its most loaded
link's capacity share (max-min analysis as in Bertsekas & Gallager, Data Networks, 6.5).

Two fabrics answer `route`: FlatFabric (closed form for one NVSwitch per NVLink domain plus
a dedicated per-GPU NIC into a non-blocking core: the flat and nvlink_domain generators)
and GraphFabric (Dijkstra over any networkx graph). Tests check they agree.
"""
from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import dataclass
from heapq import heappop, heappush
from collections.abc import Hashable
from typing import Any

import networkx as nx

from topology.errors import Problem, SpecError
from topology.graph import CAPACITY, LATENCY

# An edge key: a vertex pair on graph fabrics, (node, port, direction) on the closed-form one.
EdgeKey = Any
HOP_BITS = 12  # routing weight = latency_ps << HOP_BITS | hops: min latency, then min hops


@dataclass(frozen=True)
class Route:
    """The edges one flow uses with the fraction of its traffic on each, and its latency."""

    edges: tuple[tuple[EdgeKey, float], ...]
    latency_ps: int


class FlatFabric:
    """Closed form: per GPU an NVLink port (intra) and a NIC port (inter), no other limits."""

    def __init__(self, domain_of: dict[str, int], intra_gb_s: float, intra_ps: int,
                 inter_gb_s: float, inter_ps: int) -> None:
        self.domain_of = domain_of
        self._cap = {"nvl": intra_gb_s, "nic": inter_gb_s}
        self._lat = {"nvl": intra_ps, "nic": inter_ps}

    def route(self, flows: list[tuple[str, str]]) -> list[Route]:
        out = []
        for s, t in flows:
            port = "nvl" if self.domain_of[s] == self.domain_of[t] else "nic"
            out.append(Route((((s, port, "out"), 1.0), ((t, port, "in"), 1.0)), self._lat[port]))
        return out

    def capacity_gb_s(self, key: EdgeKey) -> float:
        return self._cap[key[1]]

    def alltoall_share(self, groups: list[list[str]]) -> Share | None:
        """Closed form of concurrent_share over all ordered pairs of each group: a GPU's
        NVLink port carries its a in-domain peers, its NIC port its b other peers, in each
        direction, and no port is shared between groups of one kind."""
        shares = []
        for group in groups:
            per_domain: dict[int, int] = defaultdict(int)
            for v in group:
                per_domain[self.domain_of[v]] += 1
            shares.append(self.alltoall_counts_share(len(group), per_domain.values()))
        return slowest(shares)

    def alltoall_counts_share(self, size: int, counts) -> Share | None:
        """alltoall_share of groups of `size` GPUs whose members per NVLink domain take
        the values `counts`: the port carrying the most peers (a = count - 1 on NVLink,
        b = size - count on the NIC) sets the bandwidth."""
        bw, lat = float("inf"), -1
        for count in counts:
            a, b = count - 1, size - count
            if a:
                bw, lat = min(bw, self._cap["nvl"] / a), max(lat, self._lat["nvl"])
            if b:
                bw, lat = min(bw, self._cap["nic"] / b), max(lat, self._lat["nic"])
        return None if lat < 0 else Share(bw, lat)

    def ports_share(self, nvlink: bool, nic: bool) -> Share | None:
        """concurrent_share in closed form for flows in which every GPU sends at most one
        flow and receives at most one (rings, sub-rings): each used port has load 1, so
        the slowest group gets the smaller used port capacity and the larger latency."""
        used = [p for p, on in (("nvl", nvlink), ("nic", nic)) if on]
        if not used:
            return None
        return Share(min(self._cap[p] for p in used), max(self._lat[p] for p in used))


class GraphFabric:
    """Shortest-path routing over any cluster graph.

    Full Dijkstra runs only from hub vertices (non-GPUs with two or more non-GPU
    neighbours: leaf, spine, core switches); a GPU source or a chain vertex (NIC,
    NVSwitch: at most one non-GPU neighbour) gets its distance and path count to a
    destination from Bellman's equation over its out-neighbours, d(x,t) = min_y w(x,y) +
    d(y,t), and its route as the path-count-weighted mix of its best neighbours' routes.
    Routes are memoized per (vertex, destination) up to ROUTE_CACHE entries.
    """

    ROUTE_CACHE = 500_000

    def __init__(self, g: nx.DiGraph, capacity: str = CAPACITY, weight: str = LATENCY) -> None:
        self.names = list(g.nodes)
        index = {v: i for i, v in enumerate(self.names)}
        self.index = index
        self.is_gpu = [g.nodes[v]["type"] == "gpu" for v in self.names]
        self.out: list[list[tuple[int, int]]] = [[] for _ in self.names]
        self.cap: dict[tuple[int, int], float] = {}
        for u, v, d in g.edges(data=True):
            self.out[index[u]].append((index[v], (d[weight] << HOP_BITS) + 1))
            self.cap[(index[u], index[v])] = d[capacity]
        self.hub = self._hubs()
        self._dag: dict[int, tuple[array, array, array, array]] = {}
        self._info_memo: dict[tuple[int, int], tuple[int, float]] = {}
        self._mix: dict[tuple[int, int], dict] = {}
        self._routes: dict[tuple[int, int], Route] = {}

    def _relays(self, x: int) -> list[int]:
        return [y for y, _ in self.out[x] if not self.is_gpu[y]]

    def _hubs(self) -> list[bool]:
        """Hubs: non-GPUs with >= 2 non-GPU neighbours, plus one vertex of any chain cycle."""
        hub = [not self.is_gpu[x] and len(self._relays(x)) >= 2 for x in range(len(self.names))]
        for x in range(len(self.names)):
            seen, y = set(), x
            while not self.is_gpu[y] and not hub[y] and y not in seen:
                seen.add(y)
                nxt = self._relays(y)
                if not nxt:
                    break
                y = nxt[0]
            if y in seen:
                hub[y] = True
        return hub

    def _dijkstra(self, s: int) -> tuple[array, array, array, array]:
        """From hub s: distances, path counts and all shortest-path predecessors (CSR).
        GPUs are reached but never relayed through."""
        n = len(self.names)
        dist, sigma = [-1] * n, [0.0] * n
        preds: list[list[int]] = [[] for _ in range(n)]
        dist[s], sigma[s] = 0, 1.0
        heap, done, is_gpu = [(0, s)], bytearray(n), self.is_gpu
        while heap:
            d, u = heappop(heap)
            if done[u]:
                continue
            done[u] = 1
            for v, w in self.out[u]:
                nd = d + w
                if dist[v] < 0 or nd < dist[v]:
                    dist[v], sigma[v], preds[v] = nd, sigma[u], [u]
                    if not is_gpu[v]:
                        heappush(heap, (nd, v))
                elif nd == dist[v]:
                    sigma[v] += sigma[u]
                    preds[v].append(u)
        offsets, flat = [0], []
        for p in preds:
            flat.extend(p)
            offsets.append(len(flat))
        return array("q", dist), array("d", sigma), array("i", offsets), array("i", flat)

    def _hub_dag(self, h: int) -> tuple[array, array, array, array]:
        if h not in self._dag:
            self._dag[h] = self._dijkstra(h)
        return self._dag[h]

    def _info(self, x: int, t: int) -> tuple[int, float]:
        """(routing distance, shortest-path count) from x to t; distance -1 if unreachable."""
        if x == t:
            return 0, 1.0
        if self.hub[x]:
            dist, sigma, _, _ = self._hub_dag(x)
            return dist[t], sigma[t]
        memo = self._info_memo.get((x, t))
        if memo is not None:
            return memo
        best, count = -1, 0.0
        for y, w in self.out[x]:
            if self.is_gpu[y] and y != t:
                continue
            dy, sy = self._info(y, t)
            if dy >= 0 and (best < 0 or dy + w < best):
                best, count = dy + w, sy
            elif dy >= 0 and dy + w == best:
                count += sy
        if len(self._info_memo) >= self.ROUTE_CACHE:
            self._info_memo.clear()
        self._info_memo[(x, t)] = (best, count)
        return best, count

    def _hub_route(self, h: int, t: int) -> dict:
        """Even split over all shortest h->t paths: fraction on u->v is
        sigma_h(u) * tau_t(v) / sigma_h(t), tau_t(v) = paths from v to t (Brandes 2001)."""
        dist, sigma, off, flat = self._hub_dag(h)
        dag, stack, seen = [], [t], {t}
        while stack:
            v = stack.pop()
            for u in flat[off[v]:off[v + 1]]:
                dag.append((u, v))
                if u not in seen:
                    seen.add(u)
                    stack.append(u)
        tau = {t: 1.0}
        for u, v in sorted(dag, key=lambda e: -dist[e[1]]):
            tau[u] = tau.get(u, 0.0) + tau[v]
        return {(u, v): sigma[u] * tau[v] / sigma[t] for u, v in dag}

    def _route_from(self, x: int, t: int) -> dict:
        """Edge -> fraction of one unit of x->t traffic."""
        key = (x, t)
        if key in self._mix:
            return self._mix[key]
        mix: dict
        if self.hub[x]:
            mix = self._hub_route(x, t)
        else:
            mix = defaultdict(float)
            d, count = self._info(x, t)
            for y, w in self.out[x]:
                if self.is_gpu[y] and y != t:
                    continue
                dy, sy = self._info(y, t)
                if dy >= 0 and dy + w == d:
                    share = sy / count
                    mix[(x, y)] += share
                    for e, f in (self._route_from(y, t).items() if y != t else ()):
                        mix[e] += share * f
        if len(self._mix) >= self.ROUTE_CACHE:
            self._mix.clear()
        self._mix[key] = mix
        return mix

    def _route_one(self, s: int, t: int) -> Route:
        d, _ = self._info(s, t)
        if d < 0:
            raise SpecError("disconnected topology", [Problem(
                "cluster.topology", f"no path from {self.names[s]} to {self.names[t]}")])
        return Route(tuple(self._route_from(s, t).items()), d >> HOP_BITS)

    def route(self, flows: list[tuple[str, str]]) -> list[Route]:
        out, cache = [], self._routes
        for s_name, t_name in flows:
            key = (self.index[s_name], self.index[t_name])
            r = cache.get(key)
            if r is None:
                if len(cache) >= self.ROUTE_CACHE:
                    cache.clear()
                r = cache[key] = self._route_one(*key)
            out.append(r)
        return out

    def capacity_gb_s(self, key: EdgeKey) -> float:
        return self.cap[key]


@dataclass(frozen=True)
class Share:
    """What the slowest of a set of concurrent groups gets: bandwidth (GB/s) and latency (ps)."""

    bandwidth_gb_s: float
    latency_ps: int


def slowest(shares: list[Share | None]) -> Share | None:
    """The slowest of several shares (min bandwidth, max latency); None if all are None."""
    live = [x for x in shares if x is not None]
    if not live:
        return None
    return Share(min(x.bandwidth_gb_s for x in live), max(x.latency_ps for x in live))


def alltoall_share(fabric, groups: list[list[str]]) -> Share | None:
    """concurrent_share of every ordered pair inside each group (all-to-all traffic)."""
    if isinstance(fabric, FlatFabric):
        return fabric.alltoall_share(groups)
    return concurrent_share(fabric, [[(a, b) for a in g for b in g if a != b] for g in groups])


def concurrent_share(fabric, groups: list[list[tuple[str, str]]]) -> Share | None:
    """Route every group's flows at once; each group gets min over its links of
    capacity / load (unit demand per flow). Returns the slowest group's figures, i.e. the
    minimum over every loaded link and the longest path latency, or None without flows."""
    load: dict[Hashable, float] = defaultdict(float)
    lat = -1
    for flows in groups:
        for r in fabric.route(flows):
            lat = max(lat, r.latency_ps)
            for key, frac in r.edges:
                load[key] += frac
    return _bottleneck(fabric, load, lat)


def _bottleneck(fabric, load: dict[Hashable, float], lat_ps: int) -> Share | None:
    """min over loaded links of capacity / load, with the latency; None if no flow (lat < 0)."""
    if lat_ps < 0:
        return None
    cap = fabric.capacity_gb_s
    return Share(min(cap(key) / n for key, n in load.items()), lat_ps)


def owned_share(fabric: GraphFabric, flows: list[tuple[str, str]], owned: frozenset[int],
                memo: dict | None = None) -> Share | None:
    """concurrent_share counting only the links with an end in `owned` (vertex indices),
    latency over every flow; None without flows. `memo` (flow -> its owned edges and
    latency) is reused across calls with the same fabric and `owned`."""
    memo = {} if memo is None else memo
    load: dict[Hashable, float] = defaultdict(float)
    lat = -1
    for flow in flows:
        hit = memo.get(flow)
        if hit is None:
            (r,) = fabric.route([flow])
            hit = memo[flow] = (r.latency_ps, tuple((key, frac) for key, frac in r.edges
                                                    if key[0] in owned or key[1] in owned))
        lat = max(lat, hit[0])
        for key, frac in hit[1]:
            load[key] += frac
    return _bottleneck(fabric, load, lat)
