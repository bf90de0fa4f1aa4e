"""The term memos a plan's searches share (solver.search.term_share) change no number: a rank
order's tables built on the memos another order filled equal the tables built alone, and the
whole plan (layouts, ranking, ladder rank, scaling grid, every figure) is the plan built
without sharing. On a rail-optimized fabric of two leaves, where the two rank orders place DP
and PP groups on other links (so an order-dependent memo shared by mistake changes a table:
adding 'p2p' to ORDER_FREE_MEMOS fails test_order_tables_equal_built_alone)."""
from __future__ import annotations

import json

import pytest

from benchmarks.audit_rank1 import HF
from solver.presets import load_model
from solver.specs import TrainingSpec
from topology.catalog import load_cluster


def _cluster(nodes: int = 4):
    base = load_cluster("dgx-h100-superpod-rail-optimized")
    assert base.topology is not None  # the preset states its fabric
    return base.model_copy(update={"nodes": nodes, "topology": base.topology.model_copy(update={"nodes_per_leaf": 2})})


def _training(seq_len: int = 2048, batch_seqs: int = 32) -> TrainingSpec:
    return TrainingSpec(seq_len=seq_len, global_batch_tokens=seq_len * batch_seqs, tokens=1e10)


def _tables(rows) -> dict:
    """Everything a TermRows holds, fits and memory of every pair included."""
    pairs = [(i, j) for i in range(len(rows.pipe_keys)) for j in range(len(rows.shard_keys))]
    return {"pipe": list(zip(rows.pipe_keys, rows.pipe_units, rows.pipe_memory, rows.pipe_splits or [], strict=False)),
            "shard": list(zip(rows.shard_keys, rows.shard_units, rows.shard_memory, strict=True)),
            "fits": [rows.fits(i, j) for i, j in pairs], "memory": [rows.memory(i, j) for i, j in pairs]}


def test_order_tables_equal_built_alone():
    """Mixtral 8x7B on 16 rail-optimized H100 (two nodes of a leaf), MoE splits on: the second order's
    tables on the first order's memos == the same tables built alone; and the orders' tables
    differ (the fabric makes the order matter, so the comparison can fail)."""
    from solver.search.cpsat import LayoutModel
    from solver.search.options import SearchOptions
    from solver.search.term_share import shared_terms
    from solver.search.terms import term_rows

    model, cluster, training = load_model(str(HF / "mixtral-8x7b" / "config.json")), _cluster(2), _training()
    lms = [LayoutModel(model, cluster, training, SearchOptions(rank_orders=(o,), moe_splits=True, top_k=10,
                                                               max_vpp=4, recompute=("none", "selective")))
           for o in ("tp-cp-dp-pp", "tp-cp-pp-dp")]
    with shared_terms():
        first = term_rows(lms[0], prune=True)
        shared = _tables(term_rows(lms[1], prune=True))
    alone = _tables(term_rows(lms[1], prune=True))
    assert shared == alone
    own = _tables(first)
    assert own["pipe"] != alone["pipe"]


def _plan(model, cluster, training) -> dict:
    from service.routers.errors import jsonable
    from solver.layouts import default_plan_options
    from solver.plan import build_plan

    plan = jsonable(build_plan(model, cluster, training, search_options=default_plan_options(cluster)))

    def strip(x):  # the search's wall seconds differ from run to run
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("seconds", "phases")}
        return [strip(v) for v in x] if isinstance(x, list) else x
    return json.loads(json.dumps(strip(plan), sort_keys=True, default=str))


@pytest.mark.parametrize("name", ["hf:qwen1.5-moe-a2.7b", "llama3-8b"])
def test_plan_identical_without_sharing(name, monkeypatch):
    """A small MoE plan (Qwen1.5-MoE-A2.7B on 16 rail-optimized H100: both rank orders, MoE
    splits, the ladder's ranking, the scaling grid) and a dense one (Llama 3 8B) are the same
    with the memos shared as with every build on its own memos."""
    import solver.search.terms as terms

    model = load_model(str(HF / name[3:] / "config.json") if name.startswith("hf:") else name)
    cluster, training = _cluster(2), _training()
    shared = _plan(model, cluster, training)
    monkeypatch.setattr(terms, "share_terms", lambda t, lm, cost_options: t)
    alone = _plan(model, cluster, training)
    assert shared == alone
    # both orders were searched (a pp-1 layout is listed once, under the first: merge_ranked)
    assert "placements searched: tp-cp-dp-pp, tp-cp-pp-dp" in json.dumps(shared["search"])
    assert "rank_min" in shared["ladder_choice"]  # the ladder's ranking ran (its two tables shared)
