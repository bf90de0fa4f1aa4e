"""Cross-check: group_links' closed forms (no per-rank placement or routing) equal the exact
path (place every rank, route every group) on every small layout of several small clusters,
with and without down nodes, in more than one rank order; and large clusters skip the
exact path entirely."""
import itertools

import pytest

import topology.groups as G
from topology.placement import (
    Progressions, domain_capacities, domain_stats, domain_stats_of, order_stride, place,
    uniform_domain_ranks,
)

from .helpers import cluster

ORDERS = [("tp", "cp", "dp", "pp"), ("pp", "dp", "cp", "tp"), ("dp", "tp", "pp", "cp")]
DEGREES = [1, 2, 3, 4, 8]


def _exact(c, dims, order, fabric):
    p = place(c, dims, order)
    return {kind: G._kind_link(c, fabric, p, kind) for kind in dims}


def _layouts(c):
    for tp, cp, dp, pp in itertools.product(DEGREES, repeat=4):
        if tp * cp * dp * pp <= c.available_gpus:
            yield {"tp": tp, "cp": cp, "dp": dp, "pp": pp}


# (nodes, gpus per node, nodes per NVLink domain, down nodes, closed form expected)
FLAT_CASES = [
    (8, 4, 1, [], True),
    (8, 4, 1, [3], True),  # a flat node down: the remaining domains stay uniform
    (6, 3, 1, [0, 4], True),  # odd node size: aligned placement leaves GPUs idle
    (8, 4, 2, [], True),
    (8, 4, 2, [2, 3], True),  # a whole NVLink domain down
    (8, 4, 2, [3], False),  # a partly-down domain: numpy run lengths over every rank
    (12, 2, 3, [4, 9, 10], False),  # domains of 6, 4 and 2 free GPUs
    (12, 2, 3, [], True),
    (4, 6, 1, [], True),
]


@pytest.mark.parametrize("nodes,gpus,per_domain,down,closed", FLAT_CASES)
def test_flat_closed_form_equals_exact_path(nodes, gpus, per_domain, down, closed):
    c = cluster(nodes, gpus, {"kind": "nvlink_domain", "nodes_per_domain": per_domain},
                unavailable_nodes=down)
    fabric = G.fabric_for(c)
    checked = 0
    for dims in _layouts(c):
        for order in ORDERS:
            assert (uniform_domain_ranks(c, dims, order) is not None) == closed
            fast = G.group_links(c, *dims.values(), order=order)
            assert fast == _exact(c, dims, order, fabric), (dims, order)
            checked += 1
    assert checked >= 100


@pytest.mark.parametrize("nodes,gpus,per_domain,down,closed", [c for c in FLAT_CASES if c[4]])
def test_numpy_run_lengths_equal_the_closed_form(nodes, gpus, per_domain, down, closed):
    c = cluster(nodes, gpus, {"kind": "nvlink_domain", "nodes_per_domain": per_domain},
                unavailable_nodes=down)
    for dims in _layouts(c):
        for order in ORDERS:
            e = uniform_domain_ranks(c, dims, order)
            caps = domain_capacities(c, dims, order)
            world = dims["tp"] * dims["cp"] * dims["dp"] * dims["pp"]
            for kind in dims:
                stride = order_stride(order, dims, kind)
                assert domain_stats_of(caps, dims, order, kind) == domain_stats(world, stride, dims[kind], e)


def test_no_topology_field_uses_the_closed_form(seed_cluster):
    assert uniform_domain_ranks(seed_cluster, {"tp": 8, "cp": 1, "dp": 64, "pp": 1}) == 8
    fast = G.group_links(seed_cluster, 8, 1, 64, 1)
    assert fast == _exact(seed_cluster, {"tp": 8, "cp": 1, "dp": 64, "pp": 1},
                          ("tp", "cp", "dp", "pp"), G.fabric_for(seed_cluster))


def test_100k_gpu_flat_query_places_no_rank(seed_cluster, monkeypatch):
    """The closed form never lists slots: place() and fabric_for() must not be called."""
    big = seed_cluster.model_copy(update={"name": "h6-flat-98304", "nodes": 12289, "unavailable_nodes": (5,)})

    def boom(*_a, **_k):
        raise AssertionError("exact path used")

    monkeypatch.setattr(G, "place", boom)
    monkeypatch.setattr(G, "fabric_for", boom)
    links = G.group_links(big, 8, 2, 768, 8)
    # GB200-like racks of 18 trays x 4 GPUs, a tray down in two racks (68 free GPUs there):
    # partly-down domains take the numpy path. TP8 units: 72 -> 9 per rack, 68 -> 8, so
    # 99,840 ranks fit the aligned slots and no TP group straddles a rack.
    nvl = cluster(25002, 4, {"kind": "nvlink_domain", "nodes_per_domain": 18},
                  unavailable_nodes=[7, 100], name="h6-nvl-100k")
    tp_domain = G.group_links(nvl, 8, 1, 12480, 1)
    assert tp_domain["tp"].bandwidth_gb_s == 450 and tp_domain["dp"].bandwidth_gb_s == 45
    # Hand check: TP8 fills a node (450 GB/s NVLink); CP2 (stride 8) and DP (stride 16) cross
    # nodes with one member per node: the 45 GB/s NIC, 10 us.
    assert links["tp"].bandwidth_gb_s == 450 and not links["tp"].crosses_nodes
    assert links["dp"].bandwidth_gb_s == 45 and links["dp"].domains == 768
    assert links["cp"].ranks_per_node == 1 and links["cp"].latency_s == pytest.approx(10e-6)


def _close(a, b):
    """GroupLinks equal, floats to 1e-12: the symmetric path sums ECMP fractions in
    another order (e.g. twenty 1/20 shares), which can move the last bit."""
    for field in a.__dataclass_fields__:
        x, y = getattr(a, field), getattr(b, field)
        if isinstance(x, float) and isinstance(y, float):
            assert x == pytest.approx(y, rel=1e-12), field
        else:
            assert x == y, field


TREES = [
    (8, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "nics_per_node": 2, "nic_gb_s": 40,
            "oversubscription": 2.0, "spines": 3}, []),
    (8, 4, {"kind": "rail_optimized", "nodes_per_leaf": 2, "nics_per_node": 4, "nic_gb_s": 40,
            "oversubscription": 2.0, "spines": 2}, []),
    (12, 2, {"kind": "fat_tree", "nodes_per_leaf": 3, "nics_per_node": 1, "nic_gb_s": 40,
             "oversubscription": 4.0, "spines": 2}, []),
    (6, 3, {"kind": "rail_optimized", "nodes_per_leaf": 2, "nics_per_node": 3, "nic_gb_s": 40,
            "oversubscription": 1.5, "spines": 5}, []),
    (8, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "nics_per_node": 2, "nic_gb_s": 40,
            "oversubscription": 2.0, "spines": 3}, [5]),  # a node down: per-unit routing
    (8, 4, {"kind": "rail_optimized", "nodes_per_leaf": 2, "nics_per_node": 4, "nic_gb_s": 40,
            "oversubscription": 2.0, "spines": 2}, [0, 6]),
]


@pytest.mark.parametrize("nodes,gpus,topo,down", TREES)
def test_fat_tree_symmetric_path_equals_full_routing(nodes, gpus, topo, down, monkeypatch):
    c = cluster(nodes, gpus, topo, unavailable_nodes=down)
    fabric = G.fabric_for(c)
    used = {"_tree_kind_link": 0, "_tree_placed_link": 0}
    for name in used:
        real = getattr(G, name)

        def counting(*args, _real=real, _name=name):
            used[_name] += 1
            return _real(*args)
        monkeypatch.setattr(G, name, counting)
    checked = 0
    for dims in _layouts(c):
        for order in ORDERS[:2]:
            fast = G.group_links(c, *dims.values(), order=order)
            exact = _exact(c, dims, order, fabric)
            for kind in dims:
                _close(fast[kind], exact[kind])
                checked += 1
    assert checked >= 400
    assert (used["_tree_kind_link"] > 0) == (not down)  # unit views
    assert (used["_tree_placed_link"] > 0) == bool(down)  # every unit routed on the pair


@pytest.mark.parametrize("dims", [(1, 1, 18, 4), (2, 1, 9, 4), (1, 3, 6, 4), (2, 2, 5, 4), (1, 1, 36, 2)])
def test_blocks_that_straddle_units_match_full_routing(dims):
    """Group blocks (stride x size ranks) not a multiple of the 4-rank unit: block edges
    fall at many offsets inside units, and interior units share one view."""
    c = cluster(40, 2, {"kind": "fat_tree", "nodes_per_leaf": 2, "nics_per_node": 1, "nic_gb_s": 40,
                        "oversubscription": 3.0, "spines": 2}, name="h6-straddle")
    named = dict(zip(("tp", "cp", "dp", "pp"), dims, strict=True))
    for order in ORDERS:
        fast = G.group_links(c, *dims, order=order)
        exact = _exact(c, named, order, G.fabric_for(c))
        for kind in named:
            _close(fast[kind], exact[kind])
    prog = Progressions(72, 1, 18, 2)  # the DP groups of (1, 1, 18, 4): 18 units, 4 blocks
    assert len(G._views(prog, 4)) < 18


def test_16k_rail_optimized_query_routes_one_unit_pair(monkeypatch):
    """DGX H100 SuperPOD fat tree scaled to 2,048 nodes (64 scalable units): no rank is
    placed and the full graph is never built. Hand check of TP8 x DP2048: TP inside the
    node at 360 GB/s; DP steps go GPU g -> GPU g of the next node on rail g, so every NIC
    carries one flow (45 GB/s); the slowest step leaves its unit: NIC 5 us + leaf-spine
    0.5 us + spine-leaf 0.5 us + NIC 5 us = 11 us."""
    from topology.catalog import load_cluster

    big = load_cluster("dgx-h100-superpod-rail-optimized").model_copy(update={"name": "h6-16k", "nodes": 2048})

    def boom(*_a, **_k):
        raise AssertionError("exact path used")
    monkeypatch.setattr(G, "place", boom)
    monkeypatch.setattr(G, "fabric_for", boom)
    links = G.group_links(big, 8, 1, 2048, 1)
    assert links["tp"].bandwidth_gb_s == 360 and not links["tp"].crosses_nodes
    assert links["dp"].bandwidth_gb_s == pytest.approx(45, rel=1e-12)
    assert links["dp"].latency_s == pytest.approx(11e-6, rel=1e-9)
    assert links["dp"].domains == 2048 and links["dp"].ranks_per_node == 1


def test_bigger_trees_sampled_layouts_match_full_routing():
    """30 nodes x 6 GPUs, 6 leaves of 5 nodes, 3 NICs per node: units of 30 ranks that few
    group blocks divide, so edge views at many offsets and inner views per block class
    (block start mod 6) all occur. 40 seeded layouts filling more than half the GPUs."""
    import math
    import random

    c = cluster(30, 6, {"kind": "fat_tree", "nodes_per_leaf": 5, "nics_per_node": 3, "nic_gb_s": 40,
                        "oversubscription": 2.0, "spines": 2}, name="h6-30x6")
    divisors = [1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 18, 20, 30]
    layouts = [d for d in itertools.product(divisors, repeat=4) if 90 < math.prod(d) <= 180]
    fabric = G.fabric_for(c)
    for dims in random.Random(0).sample(layouts, 40):
        named = dict(zip(("tp", "cp", "dp", "pp"), dims, strict=True))
        for order in ORDERS[:2]:
            fast = G.group_links(c, *dims, order=order)
            exact = _exact(c, named, order, fabric)
            for kind in named:
                _close(fast[kind], exact[kind])
