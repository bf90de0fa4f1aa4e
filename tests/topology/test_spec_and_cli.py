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


LAYOUT = ('{"tp":8,"pp":1,"dp":64,"cp":1,"vpp":1,"sequence_parallel":true,"zero_stage":1,"micro_batch":1,'
          '"recompute":"selective"}')


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


@pytest.fixture
def cap(monkeypatch):
    """Set TRAINPLAN_MAX_CLUSTER_GPUS for the CLI (settings are cached per process)."""
    from service.settings import get_settings

    def set_cap(value: str) -> None:
        monkeypatch.setenv("TRAINPLAN_MAX_CLUSTER_GPUS", value)
        get_settings.cache_clear()
    yield set_cap
    monkeypatch.delenv("TRAINPLAN_MAX_CLUSTER_GPUS", raising=False)
    get_settings.cache_clear()


def test_cli_caps_cluster_size_like_the_service(tmp_path, capsys, cap):
    # 1,000,000 nodes x 8 = 8M GPUs ran past 120 s; the service's cap (200,000 by default,
    # service.settings.Settings.max_cluster_gpus) now applies to the CLI too.
    big = {"name": "8m", "nodes": 1_000_000, "gpus_per_node": 8, "gpu": "h100-sxm-80gb",
           "intra_node": {"bandwidth_gb_s": 360, "latency_us": 3},
           "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}}
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big))
    assert main(["topology", "--cluster", str(path)]) == 2
    assert "cluster.nodes: 8,000,000 GPUs; trainplan plans at most 200,000" in capsys.readouterr().err
    cap("256")
    for argv in (["topology", "--cluster", "seed-512"],
                 ["estimate", "--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b",
                  "--layout", LAYOUT],
                 ["search", "--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b"],
                 ["plan", "--model", "seed-70b", "--cluster", "seed-512"]):
        assert main(argv) == 2, argv
        assert "at most 256" in capsys.readouterr().err
    cap("many")
    assert main(["topology", "--cluster", "seed-512"]) == 2
    assert "TRAINPLAN_MAX_CLUSTER_GPUS" in capsys.readouterr().err
