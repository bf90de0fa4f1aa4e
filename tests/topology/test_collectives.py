"""Alpha-beta collective times against hand computations."""
import pytest

from topology.collectives import (
    allgather_time_s, allreduce_time_s, alltoall_time_s, p2p_time_s, reduce_scatter_time_s,
)
from topology.groups import GroupLink, group_links

from .helpers import cluster

# A 16-rank group over 2 domains of 8: ring 45 GB/s / 10 us, in-domain 450 GB/s / 3 us.
LINK = GroupLink("tp", 16, 1, 45.0, 10e-6, True, 8, 450.0, 3e-6, 45.0, 10e-6, 45.0, 10e-6, 2)


def test_ring_forms():
    n = 1.6e9
    # Thakur et al. 2005: AR = 2(p-1) a + 2 (p-1)/p n / B.
    assert allreduce_time_s(n, LINK) == pytest.approx(30 * 10e-6 + 2 * 15 / 16 * n / 45e9)
    assert reduce_scatter_time_s(n, LINK) == pytest.approx(15 * 10e-6 + 15 / 16 * n / 45e9)
    assert allgather_time_s(n, LINK) == reduce_scatter_time_s(n, LINK)
    assert alltoall_time_s(n, LINK) == pytest.approx(15 * 10e-6 + 15 / 16 * n / 45e9)
    assert p2p_time_s(n, LINK) == pytest.approx(10e-6 + n / 45e9)


def test_hierarchical_all_reduce_by_hand():
    n = 1.6e9
    # RS in-domain over 8 ranks: 7 x 3 us + 7/8 n / 450 GB/s; AR across 2 domains on n/8:
    # 2 x 10 us + 2 (1/2) (n/8) / 45 GB/s; AG mirrors RS.
    rs = 7 * 3e-6 + 7 / 8 * n / 450e9
    ar = 2 * 10e-6 + 2 * 0.5 * (n / 8) / 45e9
    assert allreduce_time_s(n, LINK, "hierarchical") == pytest.approx(2 * rs + ar)
    assert allreduce_time_s(n, LINK, "auto") == pytest.approx(2 * rs + ar)  # faster than ring here
    assert reduce_scatter_time_s(n, LINK, "hierarchical") == pytest.approx(rs + 10e-6 + 0.5 * (n / 8) / 45e9)


def test_hierarchical_falls_back_to_ring_for_one_rank_per_domain(seed_cluster):
    dp = group_links(seed_cluster, 8, 1, 64, 1)["dp"]
    assert allreduce_time_s(1e9, dp, "hierarchical") == allreduce_time_s(1e9, dp, "ring")


def test_tp16_over_two_flat_nodes_matches_the_hand_link():
    # Flat 2 x 8 cluster, TP16: ring crosses nodes (45 GB/s, 10 us); 8 per node in 450 GB/s.
    tp = group_links(cluster(2, 8), 16, 1, 1, 1)["tp"]
    assert (tp.bandwidth_gb_s, tp.ranks_per_node, tp.intra_bandwidth_gb_s, tp.inter_bandwidth_gb_s) == (
        45.0, 8, 450.0, 45.0)
    assert allreduce_time_s(1.6e9, tp, "hierarchical") == pytest.approx(allreduce_time_s(1.6e9, LINK, "hierarchical"))


def test_single_rank_costs_nothing():
    one = GroupLink("cp", 1, 1, 450.0, 3e-6, False, 1)
    assert allreduce_time_s(1e9, one) == 0.0 == alltoall_time_s(1e9, one) == p2p_time_s(1e9, one)
