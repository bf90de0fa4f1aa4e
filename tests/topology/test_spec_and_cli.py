"""The typed topology field and the `trainplan topology` command."""
import json

import pytest

from service.cli import main
from topology.errors import SpecError
from topology.generators import build_graph

from .helpers import cluster


def test_unknown_generator_is_a_spec_error():
    with pytest.raises(SpecError) as err:
        cluster(2, 4, {"kind": "torus"})
    assert err.value.problems[0].field.startswith("cluster.topology")


def test_topology_spec_is_hashable_and_frozen():
    c = cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "nics_per_node": 4, "nic_gb_s": 50})
    assert hash(c) == hash(cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "nics_per_node": 4,
                                           "nic_gb_s": 50}))


def test_leaf_size_must_divide_nodes():
    c = cluster(5, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "nics_per_node": 4, "nic_gb_s": 50})
    with pytest.raises(SpecError):
        build_graph(c)


def test_explicit_graph_rejects_unknown_vertices():
    bad = {"kind": "graph", "vertices": [{"id": "g", "type": "gpu", "node": 0}],
           "links": [{"a": "g", "b": "nowhere", "bandwidth_gb_s": 1, "latency_us": 1}]}
    with pytest.raises(SpecError):
        cluster(1, 1, bad)


LAYOUT = '{"tp":8,"pp":1,"dp":64,"cp":1,"vpp":1,"sequence_parallel":true,"zero_stage":1,"micro_batch":1,"recompute":"selective"}'


def test_cli_json(capsys):
    assert main(["topology", "--cluster", "seed-512", "--layout", LAYOUT, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["graph"]["vertices"]["gpu"] == 512 and out["graph"]["nvlink_domains"] == 64
    assert out["graph"]["bisection_gb_s"] == pytest.approx(256 * 45.0)  # 256 NICs x 45 GB/s
    assert out["groups"]["dp"]["bandwidth_gb_s"] == 45.0 and out["groups"]["tp"]["bandwidth_gb_s"] == 450.0


def test_cli_md_and_bad_order(capsys):
    assert main(["topology", "--cluster", "gb200-nvl72-superpod", "--format", "md"]) == 0
    assert "NVLink domains: 8 of 72 GPUs" in capsys.readouterr().out
    assert main(["topology", "--cluster", "seed-512", "--layout", LAYOUT, "--order", "tp-dp"]) == 2
