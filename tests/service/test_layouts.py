"""POST /v1/layouts: ranked layouts, each with launcher exports consistent with the layout."""
from __future__ import annotations

import pytest

from tests.service.framework_options import (
    megatron_violations, parse_megatron, torchtitan_module_problems,
)

SEED = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"}


@pytest.fixture(scope="module")
def seed_layouts(tmp_path_factory):
    """One seed search shared by the module's checks (CP-SAT work is the slow part)."""
    import warnings

    from service.app import create_app
    from service.settings import Settings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    db = tmp_path_factory.mktemp("layouts") / "plans.db"
    with TestClient(create_app(Settings(database_url=f"sqlite:///{db}", max_time_limit_s=10))) as client:
        r = client.post("/v1/layouts", json={**SEED, "options": {"top_k": 3, "time_limit_s": 10}})
    assert r.status_code == 200, r.text
    return r.json()


def test_ranked_best_first(seed_layouts):
    layouts = seed_layouts["layouts"]
    assert 1 <= len(layouts) <= 3
    assert [e["rank"] for e in layouts] == list(range(1, len(layouts) + 1))
    # the layouts tied with the fastest (within the search's resolution) lead, simplest first;
    # the rest follow by step time
    times = [e["step_time_s"] for e in layouts]
    resolution = seed_layouts["search"]["tie_resolution"]
    tied = [e["step_time_s"] for e in layouts if e["tied_with_best"]]
    assert all(t <= min(times) * (1 + resolution) for t in tied)
    rest = times[len(tied):]
    assert rest == sorted(rest) and all(t > min(times) * (1 + resolution) for t in rest)
    assert seed_layouts["search"]["status"] in ("OPTIMAL", "FEASIBLE")
    assert seed_layouts["limits"]["time_limit_s"] == 10


def test_every_layout_fits_and_uses_the_cluster(seed_layouts):
    for e in seed_layouts["layouts"]:
        assert e["fits"] and e["memory_per_gpu_bytes"]["total"] <= 80e9
        assert e["tp"] * e["pp"] * e["dp"] * e["cp"] == e["gpus"] == 512


def test_launchers_match_each_layout(seed_layouts):
    for e in seed_layouts["layouts"]:
        block = e["launchers"]["megatron"]
        if "refused" in block:  # a layout Megatron-LM cannot run names the rule instead
            assert block["problems"] and all(p["field"] and p["reason"] for p in block["problems"])
        else:
            assert megatron_violations(block["args"]) == []
            meg = parse_megatron(block["args"])
            assert meg["tensor_model_parallel_size"] == e["tp"]
            assert meg["pipeline_model_parallel_size"] == e["pp"]
            assert meg["context_parallel_size"] == e["cp"]
            assert meg["micro_batch_size"] == e["micro_batch"]
            assert meg["global_batch_size"] == e["dp"] * e["micro_batch"] * e["grad_accum"]
            assert meg.get("sequence_parallel", False) == e["sequence_parallel"]
        titan = e["launchers"]["torchtitan"]
        if "refused" not in titan:
            assert torchtitan_module_problems(titan["module"]) == []
            par = titan["settings"]["parallelism"]
            assert par["tensor_parallel_degree"] == e["tp"] and par["pipeline_parallel_degree"] == e["pp"]
            assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == e["dp"]
        if "refused" in e["launchers"]["deepspeed"]:
            continue
        ds = e["launchers"]["deepspeed"]["config"]
        assert ds["zero_optimization"]["stage"] == e["zero_stage"]
        assert ds["gradient_accumulation_steps"] == e["grad_accum"]


def test_placement_covers_every_rank(seed_layouts):
    for e in seed_layouts["layouts"]:
        p = e["placement"]
        assert p["world_size"] == e["gpus"] and len(p["ranks"]) == e["gpus"]
        assert len({tuple(r) for r in p["ranks"]}) == e["gpus"]  # one rank per GPU
        assert len(p["groups_of_rank0"]["tp"]) == e["tp"]


def test_unavailable_nodes_get_no_rank(client):
    """Two nodes down: every returned layout is placed on the other 62 nodes only."""
    from service.routers.schemas import SEED_CLUSTER

    cluster = {**SEED_CLUSTER, "unavailable_nodes": [3, 17]}
    r = client.post("/v1/layouts", json={**SEED, "cluster": cluster,
                                         "options": {"top_k": 2, "time_limit_s": 5}})
    assert r.status_code == 200, r.text
    for e in r.json()["layouts"]:
        nodes = set(e["placement"]["nodes"])
        assert nodes.isdisjoint({3, 17}) and len(nodes) * 8 >= e["gpus"]
        assert {n for n, _ in e["placement"]["ranks"]} == nodes


def test_nothing_fits_is_422_with_explanation(make_client):
    """405B parameters x 12 bytes of model state (about 4.9 TB) cannot fit 8 x 80 GB."""
    from service.routers.schemas import SEED_CLUSTER
    from tests.service.conftest import problems

    client = make_client(max_time_limit_s=60)  # the explanation takes ~10-20 s (fix_more_gpus)
    cluster = {**SEED_CLUSTER, "nodes": 1}
    r = client.post("/v1/layouts", json={"model": "llama3-405b", "cluster": cluster,
                                         "training": "seed-300b", "options": {"time_limit_s": 5}})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["type"] == "infeasible" and err["explanation"]
    problems(r)


def test_exports_follow_the_searched_rank_order(client):
    """Searched under Megatron's TP-CP-PP-DP order, each layout's placement and Megatron
    arguments use that order (not the default TP-CP-DP-PP)."""
    r = client.post("/v1/layouts", json={**SEED, "options": {
        "top_k": 2, "time_limit_s": 5, "rank_orders": ["tp-cp-pp-dp"]}})
    assert r.status_code == 200, r.text
    for e in r.json()["layouts"]:
        assert e["rank_order"] == "tp-cp-pp-dp"
        assert e["placement"]["order"] == "tp-cp-pp-dp"
        meg = e["launchers"]["megatron"]  # a refused layout names its rule instead of arguments
        assert "--use-tp-pp-dp-mapping" in meg["args"] if "args" in meg else meg["problems"]
