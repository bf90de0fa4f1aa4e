"""Flat description: the seed's figures, and the equivalent explicit graph gives identical times."""
import pytest

from solver.cost.accounting import ring_allreduce_lower_bound_s
from topology.collectives import (
    allgather_time_s, allreduce_time_s, alltoall_time_s, p2p_time_s, reduce_scatter_time_s,
)
from topology.groups import group_links
from topology.routing import GraphFabric
from topology.generators import build_flat

from .helpers import cluster, explicit_flat_graph


def test_seed_dp_gets_45_and_tp_gets_in_node(seed_cluster):
    # reference/seed-70b-plan.md: 45 GB/s effective per rank across nodes; TP8 stays in-node.
    links = group_links(seed_cluster, 8, 1, 64, 1)
    assert links["dp"].bandwidth_gb_s == 45.0 and links["dp"].latency_s == 10e-6
    assert links["dp"].crosses_nodes and links["dp"].size == 64 and links["dp"].stride == 8
    assert links["tp"].bandwidth_gb_s == 450.0 and links["tp"].latency_s == 3e-6
    assert not links["tp"].crosses_nodes and links["tp"].ranks_per_node == 8


def test_seed_dp_allreduce_matches_the_seed_bound(seed_cluster):
    # Seed: 2 (63/64) 17.5 GB / 45 GB/s = 0.77 s; the ring adds 2 x 63 steps x 10 us latency.
    link = group_links(seed_cluster, 8, 1, 64, 1)["dp"]
    bound = ring_allreduce_lower_bound_s(17.5e9, 64, 45.0)
    assert allreduce_time_s(17.5e9, link) == pytest.approx(bound + 126 * 10e-6, rel=1e-12)
    assert bound == pytest.approx(0.7656, abs=1e-4)


DIMS = [(4, 1, 4, 1), (2, 2, 2, 2), (8, 1, 2, 1), (1, 1, 16, 1), (2, 1, 2, 4), (1, 4, 1, 4)]


@pytest.mark.parametrize("dims", DIMS)
def test_explicit_graph_equals_flat(dims):
    flat = cluster(4, 4)
    explicit = cluster(4, 4, explicit_flat_graph(4, 4))
    a, b = group_links(flat, *dims), group_links(explicit, *dims)
    assert a == b
    for kind in a:
        for fn in (allreduce_time_s, reduce_scatter_time_s, allgather_time_s):
            for algo in ("ring", "hierarchical", "auto"):
                assert fn(1e8, a[kind], algo) == fn(1e8, b[kind], algo)
        assert alltoall_time_s(1e8, a[kind]) == alltoall_time_s(1e8, b[kind])
        assert p2p_time_s(1e8, a[kind]) == p2p_time_s(1e8, b[kind])


def test_seed_explicit_graph_gives_identical_dp_and_tp_times(seed_cluster):
    explicit = cluster(64, 8, explicit_flat_graph(64, 8))
    a, b = group_links(seed_cluster, 8, 1, 64, 1), group_links(explicit, 8, 1, 64, 1)
    for kind in ("tp", "dp"):
        for fn in (allreduce_time_s, reduce_scatter_time_s, allgather_time_s):
            assert fn(17.5e9, a[kind]) == fn(17.5e9, b[kind])
        assert p2p_time_s(1e8, a[kind]) == p2p_time_s(1e8, b[kind])


@pytest.mark.parametrize("dims", [(4, 1, 2, 2), (2, 1, 8, 1), (1, 2, 2, 4)])
def test_closed_form_fabric_equals_routing_on_the_built_graph(dims):
    """FlatFabric (closed form) against GraphFabric (Dijkstra) on the generated flat graph."""
    import topology.groups as G
    from topology.placement import place

    c = cluster(4, 4, unavailable_nodes=[])
    p = place(c, dict(zip(("tp", "cp", "dp", "pp"), dims, strict=True)))
    routed = GraphFabric(build_flat(c))
    for kind in ("tp", "cp", "dp", "pp"):
        assert G._kind_link(c, G.fabric_for(c), p, kind) == G._kind_link(c, routed, p, kind)


@pytest.mark.parametrize("topo", [{"kind": "flat"}, {"kind": "nvlink_domain", "nodes_per_domain": 1}])
def test_flat_generators_equal_no_topology(topo):
    for dims in DIMS:
        assert group_links(cluster(4, 4, topo), *dims) == group_links(cluster(4, 4), *dims)
