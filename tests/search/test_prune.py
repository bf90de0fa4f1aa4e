"""Group pruning before the tables: the bound is a true lower bound, and the top-K is exact."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.cost.estimate import estimate_layout, make_context
from solver.search import exhaustive_search, search_layouts
from solver.search.cpsat import LayoutModel
from solver.search.exhaustive import evaluate
from solver.search.options import SearchOptions
from solver.search.model import pipe_group
from solver.search.rules import DENSE_ETP
from solver.search.prune import _lower_s
from solver.search.rules import accumulation
from solver.search.space import enumerate_layouts
from solver.search.terms import _Terms, term_rows
from tests.search.problems import (
    binding_cluster, models, shapes, tiny_cluster, tiny_model, tiny_training, trainings,
)

SMALL = {"max_micro_batch": 2, "max_vpp": 3, "max_cp": 2, "time_limit_s": 30}


@settings(deadline=None, max_examples=12, suppress_health_check=[HealthCheck.too_slow])
@given(models, shapes, trainings, st.booleans())
def test_group_bound_is_below_every_layout_of_the_group(model, shape, training, split_stages):
    """Busiest-rank model, or stage by stage with the search's splits (evaluate assigns them)."""
    cluster = binding_cluster(model, *shape)
    options = SearchOptions(allow_fewer_gpus=True, split_stages=split_stages, **SMALL)
    wide = tiny_cluster(*shape[:2], 9000)  # same links, every layout fits: evaluate returns all
    lm = LayoutModel(model, cluster, training, options)
    t = _Terms(make_context(model, cluster, training))
    rows: dict = {}
    for key in lm.pipeline_rows():
        rows.setdefault(pipe_group(key), []).append(key)
    acc = lambda dp, mb: accumulation(training, dp, mb)  # noqa: E731
    for layout in enumerate_layouts(model, cluster, training, options):
        lo = layout
        g = (lo.tp, lo.pp, lo.cp, lo.dp, int(lo.sequence_parallel), lo.micro_batch, lo.ep, lo.etp or DENSE_ETP)
        ev = evaluate(model, wide, training, options, lo)
        step = estimate_layout(model, cluster, training, ev.layout).step_time_s
        assert _lower_s(lm, t, g, rows[g], acc) <= step * (1 + 1e-12), ev.layout


@pytest.mark.parametrize("objective, fewer", [("step_time", True), ("min_cost", False), ("min_gpus", False),
                                              ("min_gpus_deadline", False)])
def test_pruned_top10_equals_exhaustive_on_64_gpus(objective, fewer):
    """A 12-layer model on 8 nodes x 8 GPUs with varying GPU counts (thousands of layouts).
    The deadline is 3x the fastest layout's run: it binds (the fewest-GPU layouts miss it)."""
    model = tiny_model(12, 8, 2, 128, 4, True)
    cluster, training = binding_cluster(model, 8, 8, 0.5), tiny_training(1024, 32)
    base = {"max_micro_batch": 2, "max_vpp": 2, "max_cp": 2, "recompute": ("none", "full")}
    deadline = None
    if objective == "min_gpus_deadline":
        fastest = search_layouts(model, cluster, training, {"top_k": 1, **base}).layouts[0].estimate
        deadline = 3 * fastest.step_time_s * -(-training.tokens // fastest.tokens_per_step)
    options = SearchOptions(top_k=10, objective=objective, allow_fewer_gpus=fewer, deadline_s=deadline, **base)
    expected = [e.objective_units for e in exhaustive_search(model, cluster, training, options)[:10]]
    res = search_layouts(model, cluster, training, options)
    assert [r.objective_units for r in res.layouts] == pytest.approx(expected, rel=1e-12)
    full = term_rows(LayoutModel(model, cluster, training, options))
    assert res.phases["rows"]["pipeline"] < len(full.pipe_keys)  # the pruning did prune


@pytest.mark.parametrize("moe", [False, True])
def test_cheap_bounds_equal_the_cheap_level(moe):
    """prune._cheap_bounds (every group's first bound, in one loop) equals _lower_s's cheap
    level group by group, bit for bit, for a dense and a MoE model (exact and floor terms);
    prune's row -> group getter is model.pipe_group."""
    from solver.search.prune import _GROUP_OF, EXACT_MOE, _cheap_bounds, _plain_lower_s
    from tests.search.test_experts import SMALL as MOE_SMALL, moe_model, training as moe_training
    from tests.search.test_experts_cost import cluster as moe_cluster

    if moe:
        model, training, options = moe_model(ffn=128), moe_training(), SearchOptions(**MOE_SMALL)
        cluster = moe_cluster(2, 4, memory_gb=3.45)
    else:
        model, training = tiny_model(6, 8, 2, 64, 4, True), tiny_training(1024, 16)
        cluster, options = binding_cluster(model, 2, 4, 0.6), SearchOptions(allow_fewer_gpus=True, **SMALL)
    lm = LayoutModel(model, cluster, training, options)
    t = _Terms(make_context(model, cluster, training))
    groups: dict = {}
    for key in lm.pipeline_rows():
        assert _GROUP_OF(key) == pipe_group(key)
        groups.setdefault(pipe_group(key), []).append(key)
    acc = lambda dp, mb: accumulation(training, dp, mb)  # noqa: E731
    assert _cheap_bounds(lm, t, groups, acc) == [_lower_s(lm, t, g, rows, acc) for g, rows in groups.items()]
    for g, rows in groups.items():
        exact = _lower_s(lm, t, g, rows, acc, EXACT_MOE)
        assert _plain_lower_s(model.layers, t, g, rows, acc(g[3], g[5]), moe) == exact, g
