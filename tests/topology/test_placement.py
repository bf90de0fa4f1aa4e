"""Placement: Megatron order, selectable orders, unavailable nodes, domain alignment."""
import pytest

from topology.errors import InfeasibleError, SpecError
from topology.groups import group_links
from topology.placement import candidate_orders, parse_order, place

from .helpers import cluster


def test_megatron_order_tp_fastest():
    p = place(cluster(4, 8), {"tp": 2, "cp": 2, "dp": 2, "pp": 2})
    assert p.coords(0) == {"tp": 0, "cp": 0, "dp": 0, "pp": 0}
    assert p.coords(1)["tp"] == 1 and p.coords(2)["cp"] == 1 and p.coords(4)["dp"] == 1
    assert p.coords(8)["pp"] == 1
    assert p.groups("dp")[0] == [0, 4]


def test_three_nodes_down_uses_only_the_others():
    c = cluster(8, 8, unavailable_nodes=[1, 4, 6])
    p = place(c, {"tp": 8, "cp": 1, "dp": 5, "pp": 1})
    assert sorted({s.node for s in p.slots}) == [0, 2, 3, 5, 7]
    with pytest.raises(InfeasibleError):
        place(c, {"tp": 8, "cp": 1, "dp": 6, "pp": 1})
    assert group_links(c, 8, 1, 5, 1)["dp"].bandwidth_gb_s == 45.0


def test_domain_alignment_skips_the_remainder():
    # 3 nodes of 6 GPUs: TP4 groups would straddle nodes in plain order; aligned they do not.
    c = cluster(3, 6)
    p = place(c, {"tp": 4, "cp": 1, "dp": 3, "pp": 1})
    assert p.aligned and all(len({p.slots[r].node for r in g}) == 1 for g in p.groups("tp"))
    # 4 TP4 groups do not fit aligned (3 x 4 slots): plain filling, groups straddle.
    assert not place(c, {"tp": 4, "cp": 1, "dp": 4, "pp": 1}).aligned


def test_orders():
    assert parse_order("tp-pp-dp-cp") == ("tp", "pp", "dp", "cp")
    with pytest.raises(SpecError):
        parse_order("tp-tp-dp-pp")
    orders = candidate_orders({"tp": 8, "cp": 1, "dp": 4, "pp": 2})
    assert orders[0] == ("tp", "cp", "dp", "pp") and len(orders) == 6
    assert len(set(orders)) == len(orders)


def test_memo_survives_many_clusters(monkeypatch):
    import topology.groups as G

    monkeypatch.setattr(G, "MAX_CLUSTERS", 2)
    for nodes in (2, 3, 4, 2, 5):
        c = cluster(nodes, 4)
        assert group_links(c, 4, 1, nodes, 1)["dp"].size == nodes
        assert group_links(c, 4, 1, nodes, 1)["dp"].bandwidth_gb_s == 45.0
