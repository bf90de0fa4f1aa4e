"""The closed-form graph summary (topology.summary) against the built graph and its max flow."""
import random

import pytest

from topology.errors import InfeasibleError, SpecError
from topology.generators import build_graph
from topology.graph import summary
from topology.placement import candidate_orders, place, placement_stats
from topology.summary import graph_summary

from .helpers import cluster, explicit_flat_graph


def _random_cluster(rng: random.Random):
    kind = rng.choice(["flat", "nvlink_domain", "fat_tree", "rail_optimized", None])
    gpn = rng.choice([1, 2, 3, 4, 5, 8])
    topo: dict[str, object] | None
    if kind in ("fat_tree", "rail_optimized"):
        npl = rng.choice([1, 2, 3, 4])
        nodes = npl * rng.choice([1, 2, 3, 5])
        topo = {"kind": kind, "nodes_per_leaf": npl, "nics_per_node": rng.choice([1, 2, 3, 4, 8, 10]),
                "nic_gb_s": rng.choice([12.5, 25.0, 45.0, 50.0]), "spines": rng.choice([1, 2, 3, 4]),
                "oversubscription": rng.choice([1.0, 1.5, 2.0, 3.0])}
    elif kind == "nvlink_domain":
        per = rng.choice([1, 2, 3, 4])
        nodes, topo = per * rng.choice([1, 2, 3, 5]), {"kind": kind, "nodes_per_domain": per}
    else:
        nodes, topo = rng.choice([1, 2, 3, 5, 7]), ({"kind": "flat"} if kind else None)
    return cluster(nodes, gpn, topo)


def _same(closed: dict, built: dict) -> None:
    assert {k: v for k, v in closed.items() if k != "bisection_gb_s"} == \
        {k: v for k, v in built.items() if k != "bisection_gb_s"}
    assert closed["bisection_gb_s"] == pytest.approx(built["bisection_gb_s"], rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("seed", range(120))
def test_closed_form_equals_graph_max_flow(seed):
    c = _random_cluster(random.Random(seed))
    _same(graph_summary(c), summary(build_graph(c)))


def test_rail_preset_equals_graph():
    from topology.catalog import load_cluster

    c = load_cluster("dgx-h100-superpod-rail-optimized")
    _same(graph_summary(c), summary(build_graph(c)))


def test_seed_by_hand():
    # 512 GPUs, every node wholly in one half: no NVSwitch carries cut traffic; 256 per-GPU NICs
    # of the first half each push 45 GB/s through the core: 11,520 GB/s.
    assert graph_summary(cluster(64, 8))["bisection_gb_s"] == 256 * 45.0


def test_two_leaf_oversubscribed_by_hand():
    # 4 nodes x 2 GPUs, 2 nodes per leaf, 2 NICs of 10 GB/s per node, 2:1: leaf 0 holds the
    # first half (4 GPUs, 4 NICs = 40 GB/s down) and has 40 / 2 = 20 GB/s of uplinks.
    c = cluster(4, 2, {"kind": "fat_tree", "nodes_per_leaf": 2, "nics_per_node": 2, "nic_gb_s": 10,
                       "oversubscription": 2.0, "spines": 2})
    assert graph_summary(c)["bisection_gb_s"] == 20.0


def test_explicit_graph_uses_the_graph():
    c = cluster(2, 2, explicit_flat_graph(2, 2))
    assert graph_summary(c) == summary(build_graph(c))


def test_untiled_topology_is_refused():
    with pytest.raises(SpecError):
        graph_summary(cluster(5, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "nics_per_node": 4, "nic_gb_s": 50}))
    with pytest.raises(SpecError):
        graph_summary(cluster(5, 4, {"kind": "nvlink_domain", "nodes_per_domain": 2}))


def _random_placed(rng: random.Random):
    per = rng.choice([1, 2, 3])
    nodes, gpn = per * rng.choice([2, 3, 4]), rng.choice([2, 4, 6, 8])
    topo = rng.choice([None, {"kind": "nvlink_domain", "nodes_per_domain": per},
                       {"kind": "fat_tree", "nodes_per_leaf": per, "nics_per_node": 2, "nic_gb_s": 25}])
    down = tuple(sorted(rng.sample(range(nodes), min(nodes - 1, rng.choice([0, 0, 1, 2])))))
    c = cluster(nodes, gpn, topo, unavailable_nodes=down)
    free = c.available_gpus
    dims = {"tp": rng.choice([1, 2, 3, 4]), "cp": rng.choice([1, 1, 2]), "dp": 1, "pp": rng.choice([1, 2])}
    inner = dims["tp"] * dims["cp"] * dims["pp"]
    dims["dp"] = max(1, rng.randint(1, free) // inner)
    return c, dims


@pytest.mark.parametrize("seed", range(60))
def test_placement_stats_equal_place(seed):
    c, dims = _random_placed(random.Random(seed))
    if dims["tp"] * dims["cp"] * dims["dp"] * dims["pp"] > c.available_gpus:
        for fn in (place, placement_stats):
            with pytest.raises(InfeasibleError):
                fn(c, dims)
        return
    for order in candidate_orders(dims):
        p = place(c, dims, order)
        assert placement_stats(c, dims, order) == (len(p.slots), len({s.node for s in p.slots}), p.aligned)


def test_topology_command_builds_no_graph_at_100k(monkeypatch):
    # The command answered from the full graph (72 s, 1.37 GB at 100,000 GPUs): it must not
    # build it, run the max flow or list every rank's slot for a generated topology.
    import service.commands.topology as cmd
    from topology import generators, graph, groups, placement
    from topology import summary as closed

    def refuse(*_a, **_k):
        raise AssertionError("full graph or slot list built")
    small_graph = generators.build_graph

    def small_only(c):  # fat-tree fast paths route on a two-unit copy (groups._unit_pair)
        if c.gpus > 1_000:
            raise AssertionError(f"graph of {c.gpus} GPUs built")
        return small_graph(c)
    for module in (cmd, generators, graph, groups, placement, closed):
        for name in ("summary", "place", "bisection_bandwidth_gb_s"):
            monkeypatch.setattr(module, name, refuse, raising=False)
        monkeypatch.setattr(module, "build_graph", small_only, raising=False)
    monkeypatch.setattr(cmd, "load_capped_cluster", lambda arg: arg)
    big = cluster(12_500, 8, {"kind": "rail_optimized", "nodes_per_leaf": 25, "nics_per_node": 8,
                              "nic_gb_s": 45, "spines": 16})
    r = cmd.topology_report(big, {"tp": 8, "pp": 4, "dp": 3125})
    assert r["graph"]["vertices"]["gpu"] == 100_000 and r["placement"]["nodes_used"] == 12_500
    # 50,000 first-half GPUs, each NIC 45 GB/s, 2,000 leaves of uplink 25 x 45 GB/s: 2,250,000 GB/s.
    assert r["graph"]["bisection_gb_s"] == pytest.approx(50_000 * 45.0)
