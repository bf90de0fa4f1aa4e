"""The search on MoE models with the real cost model (solver.cost.moe_comm, moe_layer,
moe_memory): CP-SAT equals the exhaustive oracle, and the EP group's placement (inside an
NVLink domain or across nodes, from the rank order) reaches the ranking through the cost terms.
"""
from __future__ import annotations

import pytest

from solver.cost.estimate import estimate_layout
from solver.search import exhaustive_search, search_layouts
from solver.search.cpsat import LayoutModel
from solver.search.model import layout_of
from solver.search.options import SearchOptions
from solver.search.scaling import TIME_UNIT_S
from solver.search.terms import STEP_ERROR_UNITS, term_rows
from solver.specs import LayoutSpec
from tests.search.test_experts import SMALL, broken, moe_model, training
from topology.spec import ClusterSpec


def cluster(nodes: int, gpus_per_node: int, memory_gb: float = 80) -> ClusterSpec:
    return ClusterSpec.model_validate({
        "name": "c", "nodes": nodes, "gpus_per_node": gpus_per_node,
        "gpu": {"name": "g", "memory_gb": memory_gb, "peak_tflops": 300, "hbm_gb_s": 2000},
        "intra_node": {"bandwidth_gb_s": 200, "latency_us": 3},
        "inter_node": {"bandwidth_gb_s": 25, "latency_us": 10}})


def objectives(model, clu, train, options):
    oracle = [e.objective_units for e in exhaustive_search(model, clu, train, options)][: options.top_k]
    res = search_layouts(model, clu, train, options, explain=False)
    return [r.objective_units for r in res.layouts], oracle, res


@pytest.mark.parametrize("framework", ["megatron-core", "torchtitan", "deepspeed"])
def test_cpsat_equals_oracle_with_the_moe_cost(framework):
    model, clu, train = moe_model(), cluster(2, 4), training(framework)
    got, expected, res = objectives(model, clu, train, SearchOptions(top_k=5, **SMALL))
    assert got and got == pytest.approx(expected, rel=1e-12)
    assert not any(broken(train, model, r.layout) for r in res.layouts)


def test_cpsat_equals_oracle_when_memory_binds():
    model, train = moe_model(layers=8, experts=16, ffn=2048), training(batch_seqs=32)
    got, expected, _ = objectives(model, cluster(2, 4, memory_gb=4.2), train, SearchOptions(top_k=3, **SMALL))
    assert got == pytest.approx(expected, rel=1e-12)


def test_ep_across_nodes_costs_more_than_inside_the_node():
    """ep 8, etp 1 on 8-GPU nodes keeps the all-to-all on NVLink; on 4-GPU nodes it crosses the
    8x slower network (same GPUs and layout otherwise): the search's table value for that
    layout is the evaluator's step time, and larger across nodes."""
    model, train = moe_model(), training()
    layout = LayoutSpec(dp=8, ep=8, etp=1, zero_stage=1)
    step = {}
    for gpn in (8, 4):
        clu = cluster(8 // gpn, gpn)
        rows = term_rows(LayoutModel(model, clu, train, SearchOptions(**SMALL)))
        value = {layout_of(rows.pipe_keys[i], rows.shard_keys[j]): rows.pipe_units[i] + rows.shard_units[j]
                 for _p, shards, fit in rows.groups().values() for j in shards for i in fit[j]}[layout]
        est = estimate_layout(model, clu, train, layout)
        assert value == pytest.approx(est.step_time_s / TIME_UNIT_S, abs=STEP_ERROR_UNITS) and est.moe
        step[gpn] = est.step_time_s
    assert step[4] > step[8]


def test_split_stages_keeps_even_moe_splits_where_the_layers_divide():
    """split_stages on a MoE model: first/last splits only where the layers do not divide
    (solver.search.moe_split); 4 layers on pp 2 or 4 stay even (the busiest-rank model)."""
    res = search_layouts(moe_model(), cluster(2, 4), training(), {"split_stages": True, "top_k": 20, **SMALL})
    assert any(r.layout.pp > 1 for r in res.layouts)
    assert all(r.layout.pipeline_layers is None for r in res.layouts)


@pytest.mark.parametrize("shared", [0, 1])
def test_group_bound_is_below_every_moe_layout(shared):
    """solver.search.prune's step-time lower bound holds for MoE groups (MoE extra compute may
    be negative: an expert block cheaper than the dense FFN it replaces; with shared experts
    the TP change is 0, without it is -0.5 x the layer's TP time)."""
    from solver.cost.estimate import make_context
    from solver.search.model import pipe_group
    from solver.search.prune import _lower_s
    from solver.search.rules import accumulation
    from solver.search.terms import _Terms

    base = moe_model(ffn=128)  # narrow experts: the MoE block costs less than the dense FFN
    model = base.model_copy(update={"moe": base.moe.model_copy(update={"shared_experts": shared})})
    clu, train = cluster(2, 4), training()
    lm = LayoutModel(model, clu, train, SearchOptions(**SMALL))
    t = _Terms(make_context(model, clu, train))
    groups: dict = {}
    for key in lm.pipeline_rows():
        groups.setdefault(pipe_group(key), []).append(key)
    acc = lambda dp, mb: accumulation(train, dp, mb)  # noqa: E731
    assert any(t.moe_compute(g[0], g[2], "none", g[5], g[6], g[7])[0] < 0 for g in groups)
    for g, keys in groups.items():
        tp, pp, cp, dp, sp, mb, ep, etp = g
        bound = _lower_s(lm, t, g, keys, acc)
        for key in keys:
            lo = layout_of(key, (tp, pp, cp, dp, sp, 1, mb, ep, etp))
            assert bound <= estimate_layout(model, clu, train, lo).step_time_s * (1 + 1e-12), lo


def test_cpsat_equals_oracle_with_latent_attention_and_mtp():
    """A DeepSeek-V3-shaped tiny model (MLA, a shared expert, a first dense layer, one MTP
    module): the search's tables carry the MTP head time and activations as the evaluator."""
    from solver.model_parts import MLASpec

    base = moe_model()
    model = base.model_copy(update={
        "kv_heads": base.heads, "head_dim": 48, "mtp_layers": 1,
        "mla": MLASpec(q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32),
        "moe": base.moe.model_copy(update={"shared_experts": 1, "first_dense_layers": 1})})
    model = type(model).model_validate(model.model_dump())
    got, expected, _ = objectives(model, cluster(2, 4), training(), SearchOptions(top_k=3, **SMALL))
    assert got and got == pytest.approx(expected, rel=1e-12)
