"""A plan is admitted on its table builds (service.admission.admit_plan): every rank order's
search, every scaling-grid row's search and the seed ladder's ranking, each over its pipeline
rows, against a share of the request's deadline; a refusal states the estimate and the bound."""
from __future__ import annotations

import pytest

from service.admission import OverCapacity, admit_plan, plan_work
from service.settings import Settings
from solver.presets import load_model
from solver.search.options import SearchOptions
from solver.specs import TrainingSpec
from topology.catalog import load_cluster

ONE_H100 = {"name": "one-h100", "nodes": 1, "gpus_per_node": 1, "gpu": "h100-sxm-80gb",
            "intra_node": {"bandwidth_gb_s": 360, "latency_us": 3},
            "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}}


def _settings(**kw) -> Settings:
    return Settings(database_url="sqlite://", **kw)


def test_boundary_worked_by_hand():
    """Llama 3 8B on one H100, 8 sequences of 4,096 tokens per step. Pipeline rows: tp = pp =
    cp = dp = vpp = 1, sequence parallelism off (TP 1), micro-batch 1, 2, 4 or 8 (dp 1: micro-batch
    x accumulation = 8 sequences), recompute none / selective / full: 4 x 3 = 12 rows in 4 row
    groups (one per micro-batch: recompute varies inside a group), one rank order (no explicit
    fabric). No grid row is searched (sizes: one node = 1 GPU = the cluster; 8 nodes and 1 // 4 =
    0 GPUs are out), no ladder ranking (the ladder's only rung, 8.0B parameters unsharded, does not
    fit 80 GB). At 1.5 s per group: 4 x 1.5 = 6.0 s. Deadline 8 s x 0.75 = 6.0 s: admitted (the
    bound is inclusive); deadline 7.9 s x 0.75 = 5.925 s: refused."""
    model, cluster = load_model("llama3-8b"), load_cluster(ONE_H100)
    training = TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 8, tokens=1e9)
    work = admit_plan(model, cluster, training, SearchOptions(),
                      _settings(plan_row_group_s=1.5, max_time_limit_s=8.0, plan_admit_fraction=0.75))
    assert work["plan_builds"] == [{"what": "search", "builds": 1, "rows_per_build": 12, "groups_per_build": 4}]
    assert work["plan_table_rows"] == 12 and work["plan_row_groups"] == 4
    assert work["plan_estimate_s"] == pytest.approx(6.0)
    with pytest.raises(OverCapacity) as exc:
        admit_plan(model, cluster, training, SearchOptions(),
                   _settings(plan_row_group_s=1.5, max_time_limit_s=7.9, plan_admit_fraction=0.75))
    (problem,) = exc.value.problems
    assert problem.field == "options"
    for text in ("4 table row groups", "search: 1 x 4", "12 rows", "6.00 s", "1.5e+06 us per group", "5.925 s",
                 "7.9 s deadline"):
        assert text in problem.reason, problem.reason


def test_every_build_counted_against_the_oracle():
    """Mixtral 8x7B on 16 rail-optimized H100 in one leaf, the plan's options (both rank
    orders, solver.layouts.default_plan_options): the main search (MoE splits on) and the grid
    rows on 4 and 8 GPUs (16 // 4 and one node; 8 nodes is past the cluster) once per rank
    order, no ladder ranking (its TP8 rung does not fit by the cost model); each build's rows
    and groups equal the distinct pipeline rows and groups of the oracle's plain enumeration
    (solver.search.space.enumerate_layouts) of its options."""
    from benchmarks.audit_rank1 import HF
    from solver.layouts import default_plan_options
    from solver.search.space import enumerate_layouts

    model = load_model(str(HF / "mixtral-8x7b" / "config.json"))
    base = load_cluster("dgx-h100-superpod-rail-optimized")
    cluster = base.model_copy(update={"nodes": 2, "topology": base.topology.model_copy(update={"nodes_per_leaf": 2})})
    training = TrainingSpec(seq_len=2048, global_batch_tokens=2048 * 32, tokens=1e10)
    work = plan_work(model, cluster, training, SearchOptions(**default_plan_options(cluster)), _settings())
    assert [(p["what"], p["builds"]) for p in work["plan_builds"]] == [
        ("search", 2), ("scaling grid 4 GPUs", 2), ("scaling grid 8 GPUs", 2)]
    for part, options in zip(work["plan_builds"], (SearchOptions(moe_splits=True), SearchOptions(gpus=4),
                                                   SearchOptions(gpus=8)), strict=True):
        keys = {(x.tp, x.pp, x.cp, x.dp, x.vpp, x.micro_batch, x.sequence_parallel, x.recompute, x.ep, x.etp)
                for x in enumerate_layouts(model, cluster, training, options)}
        assert part["rows_per_build"] == len(keys)
        assert part["groups_per_build"] == len({(k[0], k[1], k[2], k[3], k[6], k[5], k[8], k[9]) for k in keys})
    assert work["plan_table_rows"] == 2 * sum(p["rows_per_build"] for p in work["plan_builds"])


def test_refused_over_http_with_estimate_and_bound(make_client):
    """POST /v1/plans on a server that counts 1 s per table row group: 422 over_capacity before
    any search, the estimate and the bound in the problem."""
    client = make_client(plan_row_group_s=1.0)
    r = client.post("/v1/plans", json={"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["type"] == "over_capacity"
    (problem,) = err["problems"]
    assert problem["field"] == "options" and "table row groups" in problem["reason"]
    assert "this server admits plans estimated at most 3.75 s, 75% of its 5 s deadline" in problem["reason"]
