"""Cross-check: the closed-form flat fabric equals Dijkstra routing on the built graph,
exhaustively over small layouts (flat and 2-node NVLink domains, with and without a node down)."""
import itertools

import pytest

import topology.groups as G
from topology.generators import build_graph
from topology.placement import place
from topology.routing import GraphFabric

from .helpers import cluster


@pytest.mark.parametrize("per_domain", [1, 2])
@pytest.mark.parametrize("down", [[], [3]])
def test_flat_closed_form_equals_routing(per_domain, down):
    c = cluster(8, 4, {"kind": "nvlink_domain", "nodes_per_domain": per_domain}, unavailable_nodes=down)
    routed = GraphFabric(build_graph(c))
    checked = 0
    for tp, cp, dp, pp in itertools.product([1, 2, 4], repeat=4):
        dims = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
        if tp * cp * dp * pp > c.available_gpus:
            continue
        p = place(c, dims)
        for kind in dims:
            assert G._kind_link(c, G.fabric_for(c), p, kind) == G._kind_link(c, routed, p, kind), (dims, kind)
            checked += 1
    assert checked >= 200
