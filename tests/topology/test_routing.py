"""Routing bandwidth on small graphs against hand-computed values and networkx max flow."""
import networkx as nx
import pytest

from topology.errors import SpecError
from topology.graph import add_gpu, add_link, add_switch, bisection_bandwidth_gb_s, new_graph
from topology.routing import GraphFabric, concurrent_share


def two_leaf_graph(spines: int = 2, uplink_gb_s: float = 10.0) -> nx.DiGraph:
    """GPUs a0, a1 on leaf A and b0, b1 on leaf B (100 GB/s, 1 us); each leaf joins each
    spine at `uplink_gb_s` (1 us)."""
    g = new_graph("two-leaf")
    for leaf in ("A", "B"):
        add_switch(g, leaf, "leaf")
        for k in range(2):
            add_gpu(g, f"{leaf.lower()}{k}", node=0 if leaf == "A" else 1, domain=0 if leaf == "A" else 1)
            add_link(g, f"{leaf.lower()}{k}", leaf, 100.0, 1_000_000, "network")
    for s in range(spines):
        add_switch(g, f"S{s}", "spine")
        for leaf in ("A", "B"):
            add_link(g, leaf, f"S{s}", uplink_gb_s, 1_000_000, "network")
    return g


def test_single_flow_splits_over_both_spines():
    # ECMP: half the flow on each 10 GB/s spine path -> 20 GB/s; 4 hops x 1 us.
    share = concurrent_share(GraphFabric(two_leaf_graph()), [[("a0", "b0")]])
    assert share.bandwidth_gb_s == pytest.approx(20.0) and share.latency_ps == 4_000_000


def test_single_flow_equals_max_flow():
    """Cross-check against networkx max flow (a different algorithm): for one flow over a
    symmetric tree the even split reaches the max flow."""
    g = two_leaf_graph(spines=3, uplink_gb_s=7.0)
    routed = concurrent_share(GraphFabric(g), [[("a0", "b1")]]).bandwidth_gb_s
    assert routed == pytest.approx(nx.maximum_flow_value(g, "a0", "b1", capacity="bandwidth_gb_s"))
    assert routed == pytest.approx(21.0)


def test_concurrent_groups_share_the_uplinks():
    # Two groups, one flow each, both A -> B: 2 x 10 GB/s of uplink over 2 flows -> 10 each.
    share = concurrent_share(GraphFabric(two_leaf_graph()), [[("a0", "b0")], [("a1", "b1")]])
    assert share.bandwidth_gb_s == pytest.approx(10.0)


def test_ring_in_both_directions_uses_both_directions():
    # a0 -> b0 and b0 -> a0 use opposite directed edges: no sharing, 20 GB/s each.
    share = concurrent_share(GraphFabric(two_leaf_graph()), [[("a0", "b0"), ("b0", "a0")]])
    assert share.bandwidth_gb_s == pytest.approx(20.0)


def test_min_latency_path_wins_over_fewer_hops():
    """a -> x -> b (2 hops, 2 us) beats a -> b direct (1 hop, 5 us) and gets x's 10 GB/s."""
    g = new_graph("lat")
    add_gpu(g, "a", 0, 0)
    add_gpu(g, "b", 1, 1)
    add_switch(g, "x", "switch")
    add_link(g, "a", "x", 10.0, 1_000_000, "network")
    add_link(g, "x", "b", 10.0, 1_000_000, "network")
    add_link(g, "a", "b", 99.0, 5_000_000, "network")
    share = concurrent_share(GraphFabric(g), [[("a", "b")]])
    assert share.bandwidth_gb_s == 10.0 and share.latency_ps == 2_000_000


def test_gpus_do_not_relay():
    """a - g - b with g a GPU: no path (GPUs do not forward)."""
    g = new_graph("relay")
    for v in ("a", "g", "b"):
        add_gpu(g, v, 0, 0)
    add_link(g, "a", "g", 10.0, 1, "nvlink")
    add_link(g, "g", "b", 10.0, 1, "nvlink")
    with pytest.raises(SpecError):
        GraphFabric(g).route([("a", "b")])


def test_bisection_of_two_leaf_tree():
    # Halves {a0, a1} | {b0, b1}: the 2 spines x 10 GB/s of leaf A's uplinks.
    assert bisection_bandwidth_gb_s(two_leaf_graph()) == pytest.approx(20.0)


def test_chain_cycle_of_relays_still_routes():
    """a - n1 - n2 - b where each NIC's only relay neighbour is the other (a cycle of
    chain vertices): one becomes a hub; the 5 GB/s middle link is the bottleneck."""
    g = new_graph("chain")
    add_gpu(g, "a", 0, 0)
    add_gpu(g, "b", 1, 1)
    add_switch(g, "n1", "nic")
    add_switch(g, "n2", "nic")
    add_link(g, "a", "n1", 50.0, 0, "pcie")
    add_link(g, "n1", "n2", 5.0, 2_000_000, "network")
    add_link(g, "n2", "b", 50.0, 0, "pcie")
    share = concurrent_share(GraphFabric(g), [[("a", "b"), ("b", "a")]])
    assert share.bandwidth_gb_s == 5.0 and share.latency_ps == 2_000_000
