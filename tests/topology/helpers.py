"""Small clusters for the topology tests (hand-checkable sizes)."""
from __future__ import annotations

from typing import Any

from topology.catalog import load_cluster


def cluster(nodes: int, gpus_per_node: int, topology: dict[str, Any] | None = None, **extra: Any):
    """A cluster of seed GPUs with the seed's flat links (450 / 45 GB/s, 3 / 10 us)."""
    data = {"name": f"test-{nodes}x{gpus_per_node}", "nodes": nodes, "gpus_per_node": gpus_per_node,
            "gpu": "seed-gpu", "intra_node": {"bandwidth_gb_s": 450, "latency_us": 3},
            "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}, **extra}
    if topology is not None:
        data["topology"] = topology
    return load_cluster(data)


def explicit_flat_graph(nodes: int, gpus_per_node: int) -> dict[str, Any]:
    """The flat description written out by hand as an explicit graph: per node one NVSwitch
    (450 GB/s per GPU, 1.5 us per hop), per GPU one NIC into a core switch (45 GB/s,
    5 us per NIC-core hop). GPU-to-GPU paths: 3 us inside a node, 10 us across."""
    vertices: list[dict[str, Any]] = [{"id": "core", "type": "core"}]
    links = []
    for n in range(nodes):
        vertices.append({"id": f"sw{n}", "type": "nvswitch"})
        for k in range(gpus_per_node):
            gpu, nic = f"gpu{n}-{k}", f"nic{n}-{k}"
            vertices += [{"id": gpu, "type": "gpu", "node": n}, {"id": nic, "type": "nic"}]
            links += [
                {"a": gpu, "b": f"sw{n}", "bandwidth_gb_s": 450, "latency_us": 1.5, "kind": "nvlink"},
                {"a": gpu, "b": nic, "bandwidth_gb_s": 45, "latency_us": 0, "kind": "pcie"},
                {"a": nic, "b": "core", "bandwidth_gb_s": 45, "latency_us": 5},
            ]
    return {"kind": "graph", "vertices": vertices, "links": links}
