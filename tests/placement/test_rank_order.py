"""Placement (LayoutSpec.rank_order) in the cost model and the search, on a 2:1 fat tree.

The cluster is tests/topology/test_fat_tree.py's: 4 leaves x 2 nodes x 4 GPUs, 4 NICs of
50 GB/s per node, 2:1 oversubscribed. There, with TP4 x DP2 x PP4, Megatron's default
order (tp-cp-dp-pp) keeps each DP ring inside a leaf (50 GB/s) and the alternative
(tp-cp-pp-dp) sends it across leaves (25 GB/s, half; hand derivation in that file).
"""
import pytest

from solver.cost.estimate import estimate_layout
from solver.presets import load_model
from solver.search import SearchOptions, exhaustive_search, search_layouts
from solver.specs import LayoutSpec, TrainingSpec
from topology.groups import group_links
from tests.topology.helpers import cluster

FAT_TREE = {"kind": "fat_tree", "nodes_per_leaf": 2, "nics_per_node": 4, "nic_gb_s": 50,
            "oversubscription": 2.0, "spines": 2}
ORDERS = ("tp-cp-dp-pp", "tp-cp-pp-dp")


@pytest.fixture(scope="module")
def problem():
    model = load_model({"name": "m", "layers": 8, "hidden": 2048, "ffn_hidden": 8192,
                        "ffn_gated": False, "heads": 16, "kv_heads": 16, "head_dim": 128,
                        "vocab": 32000, "tied_embeddings": True})
    training = TrainingSpec(seq_len=2048, global_batch_tokens=2048 * 16)
    return model, cluster(8, 4, FAT_TREE), training


def test_dp_link_follows_the_rank_order(problem):
    _, c, _ = problem
    inside = group_links(c, 4, 1, 2, 4, order="tp-cp-dp-pp")["dp"]
    across = group_links(c, 4, 1, 2, 4, order="tp-cp-pp-dp")["dp"]
    assert inside.bandwidth_gb_s == pytest.approx(50.0) and across.bandwidth_gb_s == pytest.approx(25.0)


def test_cost_model_prefers_the_placement_keeping_dp_in_the_leaf(problem):
    model, c, training = problem
    base = {"tp": 4, "pp": 4, "dp": 2, "micro_batch": 1}
    keep = estimate_layout(model, c, training, LayoutSpec(**base, rank_order="tp-cp-dp-pp"))
    span = estimate_layout(model, c, training, LayoutSpec(**base, rank_order="tp-cp-pp-dp"))
    # Same compute and memory; only the DP traffic (and PP p2p) changes with the placement.
    assert keep.time_breakdown_s["compute"] == span.time_breakdown_s["compute"]
    assert keep.memory_per_gpu_bytes == span.memory_per_gpu_bytes
    # DP ring at half the bandwidth: the exposed DP time grows, and so does the step.
    assert span.time_breakdown_s["dp_exposed"] > keep.time_breakdown_s["dp_exposed"]
    assert span.step_time_s > keep.step_time_s


def test_flat_cluster_default_order_is_unchanged(seed_model, seed_cluster, seed_training, seed_layout):
    """The default placement is Megatron's: estimates equal those without the field."""
    a = estimate_layout(seed_model, seed_cluster, seed_training, seed_layout)
    b = estimate_layout(seed_model, seed_cluster, seed_training,
                        seed_layout.model_copy(update={"rank_order": "tp-cp-dp-pp"}))
    assert a.step_time_s == b.step_time_s


def test_search_over_both_orders_equals_exhaustive(problem):
    model, c, training = problem
    opts = {"top_k": 5, "rank_orders": list(ORDERS)}
    res = search_layouts(model, c, training, opts)
    ex = exhaustive_search(model, c, training, SearchOptions(**opts))
    assert [round(r.objective_units) for r in res.layouts] == [round(e.objective_units) for e in ex[:5]]
    assert res.layouts[0].estimate.step_time_s == pytest.approx(ex[0].estimate.step_time_s)
    assert res.status == "OPTIMAL"
    # Both placements were searched: the best is no worse than each single-order best.
    for order in ORDERS:
        single = search_layouts(model, c, training, {"top_k": 1, "rank_orders": [order]})
        assert res.layouts[0].estimate.step_time_s <= single.layouts[0].estimate.step_time_s + 1e-12
        assert single.layouts[0].layout.rank_order == order


def test_a_pp1_layout_is_ranked_once_over_both_orders(problem):
    """At pp 1 the two orders place every rank alike (only the pipeline stages move), so a
    search over both lists each pp-1 layout once, under the first order; the oracle too.
    Before, each pp-1 layout came back twice (Llama 3 70B on 256 rail-optimized H100: ranks
    1-2 and 3-4 were the same two layouts)."""
    from solver.search.ties import placement_identity

    model, c, training = problem
    opts = {"top_k": 40, "rank_orders": list(ORDERS)}
    res = search_layouts(model, c, training, opts)
    ex = exhaustive_search(model, c, training, SearchOptions(**opts))
    for ranked in (res.layouts, ex):
        keys = [placement_identity(r.layout, getattr(r, "pipeline_split", None)) for r in ranked]
        assert len(keys) == len(set(keys))
        pp1 = [r.layout.rank_order for r in ranked if r.layout.pp == 1]
        assert pp1 and set(pp1) == {ORDERS[0]}
    assert [round(r.objective_units) for r in res.layouts] == [round(e.objective_units) for e in ex[:40]]
