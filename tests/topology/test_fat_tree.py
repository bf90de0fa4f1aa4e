"""Fat tree with 2:1 oversubscription, rail-optimized trees and the GB200 NVL72 preset."""
import pytest

from topology.catalog import load_cluster
from topology.collectives import allreduce_time_s
from topology.groups import group_links

from .helpers import cluster

# 4 leaves x 2 nodes x 4 GPUs, 4 NICs of 50 GB/s per node, 2:1 oversubscribed, 2 spines.
FAT_TREE = {"kind": "fat_tree", "nodes_per_leaf": 2, "nics_per_node": 4, "nic_gb_s": 50,
            "oversubscription": 2.0, "spines": 2}


def test_dp_rings_spanning_leaves_get_half_the_bandwidth():
    """TP4 x DP2 x PP4 on 32 GPUs.

    Order tp-dp-pp: a DP ring joins nodes 2i and 2i+1 of one leaf; each hop uses one NIC
    (50 GB/s) alone -> 50 GB/s. Order tp-pp-dp: DP stride is 16 GPUs = 2 leaves, so every
    ring hop crosses leaves; a leaf sends 8 flows (2 nodes x 4 GPUs) up its uplinks of
    2 x 4 x 50 / 2 = 200 GB/s -> 25 GB/s per flow, half.
    """
    c = cluster(8, 4, FAT_TREE)
    inside = group_links(c, 4, 1, 2, 4, order="tp-dp-pp-cp")["dp"]
    across = group_links(c, 4, 1, 2, 4, order="tp-pp-dp-cp")["dp"]
    assert inside.bandwidth_gb_s == pytest.approx(50.0, rel=1e-12)
    assert across.bandwidth_gb_s == pytest.approx(25.0, rel=1e-12)
    # nic 5 us each side; +0.5 us per leaf-spine hop across leaves.
    assert inside.latency_s == pytest.approx(10e-6) and across.latency_s == pytest.approx(11e-6)
    # The cost model compares orders: the in-leaf placement all-reduces faster.
    assert allreduce_time_s(1e9, inside) < allreduce_time_s(1e9, across)


def test_without_oversubscription_leaf_crossing_costs_nothing():
    c = cluster(8, 4, {**FAT_TREE, "oversubscription": 1.0})
    across = group_links(c, 4, 1, 2, 4, order="tp-pp-dp-cp")["dp"]
    assert across.bandwidth_gb_s == pytest.approx(50.0, rel=1e-12)


def test_shared_nics_halve_per_gpu_bandwidth():
    # 2 NICs per 4-GPU node: two DP flows share each NIC-leaf link -> 25 GB/s.
    c = cluster(8, 4, {**FAT_TREE, "nics_per_node": 2, "oversubscription": 1.0})
    assert group_links(c, 4, 1, 8, 1)["dp"].bandwidth_gb_s == pytest.approx(25.0, rel=1e-12)


def test_rail_optimized_same_rail_stays_on_leaf():
    """Rail-optimized: GPU k of every node in a unit shares the rail-k leaf; a DP ring of
    the same local GPU across the unit's nodes never reaches a spine (10 us, full NIC)."""
    c = cluster(8, 4, {**FAT_TREE, "kind": "rail_optimized", "nodes_per_leaf": 4, "oversubscription": 4.0})
    dp = group_links(c, 4, 1, 4, 2)["dp"]
    assert dp.bandwidth_gb_s == pytest.approx(50.0) and dp.latency_s == pytest.approx(10e-6)


@pytest.mark.parametrize("tp", [16, 32])
def test_nvl72_keeps_tp_16_and_32_on_nvlink(tp):
    c = load_cluster("gb200-nvl72-superpod")
    links = group_links(c, tp, 1, 512 // tp, 1)  # 512 ranks: 64 of each rack's 72 GPUs
    assert not links["tp"].crosses_nodes
    assert links["tp"].bandwidth_gb_s == c.intra_node.bandwidth_gb_s
    assert links["dp"].bandwidth_gb_s == c.inter_node.bandwidth_gb_s


def test_nvl72_tp8_fills_every_gpu():
    c = load_cluster("gb200-nvl72-superpod")
    links = group_links(c, 8, 1, 72, 1)  # 576 ranks, 72 = 9 x 8 tiles each domain
    assert not links["tp"].crosses_nodes and links["tp"].ranks_per_node == 8


def test_fat_tree_presets_load_and_route():
    c = load_cluster("dgx-h100-superpod-rail-optimized")
    assert c.topology.kind == "rail_optimized" and c.gpus == 1024
    # Hand check of TP8 x DP128 from the preset's figures: TP fills a node (360 GB/s NVLink,
    # 3 us); a DP step goes GPU g -> GPU g of the next node on rail g, one flow per 45 GB/s
    # NIC, no oversubscription -> 45 GB/s; the slowest step leaves its 32-node scalable
    # unit: NIC 5 us + leaf-spine 0.5 us + spine-leaf 0.5 us + NIC 5 us = 11 us.
    links = group_links(c, 8, 1, 128, 1)
    assert links["tp"].bandwidth_gb_s == 360 and links["tp"].latency_s == pytest.approx(3e-6)
    assert links["dp"].bandwidth_gb_s == pytest.approx(45, rel=1e-12)
    assert links["dp"].latency_s == pytest.approx(11e-6, rel=1e-9) and links["dp"].domains == 128


def test_best_order_keeps_the_heavy_group_inside_a_leaf():
    from topology.collectives import p2p_time_s
    from topology.groups import best_order

    c = cluster(8, 4, FAT_TREE)
    # TP traffic heavy, DP lighter: TP stays in the node, DP in the leaf (50, not 25 GB/s).
    cost = lambda lk: allreduce_time_s(1e10, lk["tp"]) + allreduce_time_s(1e9, lk["dp"])  # noqa: E731
    order, links, _ = best_order(c, 4, 1, 2, 4, cost)
    assert links["tp"].bandwidth_gb_s == 450.0 and links["dp"].bandwidth_gb_s == pytest.approx(50.0)
    cost = lambda lk: allreduce_time_s(1e10, lk["tp"]) + p2p_time_s(1e9, lk["pp"])  # noqa: E731
    order, links, _ = best_order(c, 4, 1, 2, 4, cost)
    assert links["pp"].bandwidth_gb_s == pytest.approx(50.0) and order.index("pp") < order.index("dp")
    # Every order costs the same: the tie keeps Megatron's order (listed first).
    assert best_order(c, 4, 1, 2, 4, lambda lk: 1.0)[0] == ("tp", "cp", "dp", "pp")
