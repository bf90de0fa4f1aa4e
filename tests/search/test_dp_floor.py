"""solver.search.dp_floor, the DP + optimizer floor the pruning adds to a group's pipeline bound
before its costlier levels: against the per-layout estimate of every layout of every group, on
a MoE and a dense problem where memory binds (some ZeRO stages' model state alone is over the
usable memory, so the floor leaves them out and rises above the least DP + optimizer time of
all stages; a floor taken over a stage some fitting layout does not have, or over too few
stages, fails here).

1. Every fitting layout's ZeRO stage is among state_zeros, and floor_s is at most its
   dp_exposed_s + optimizer_s (the estimate's breakdown); math.inf only for a group with no
   fitting layout.
2. Each pipeline level below REFINED plus the floor is at most the step time of every fitting
   layout of the group (the sum prune_keys queues).
"""
from __future__ import annotations

import math

import pytest

from solver.cost.estimate import estimate_with_context, make_context
from solver.search import dp_floor
from solver.search.cpsat import RECOMPUTE_NAMES, LayoutModel
from solver.search.model import layout_of, pipe_group
from solver.search.options import SearchOptions
from solver.search.exhaustive import with_search_split
from solver.search.moe_split import rule
from solver.search.prune import CHEAP, EXACT_MOE, FITTING, _lower_s
from solver.search.rules import accumulation
from solver.search.terms import _Terms
from tests.search.problems import binding_cluster, tiny_model, tiny_training
from tests.search.test_experts import SMALL, moe_model, training
from tests.search.test_experts_cost import cluster as moe_cluster
from tests.search.test_moe_split import dsv3_shaped

REL = 1e-12


def check_floor(model, clu, train, options, first_last: bool = False) -> dict[str, int]:
    """The module docstring's checks on every group; counts of what was seen. first_last: the
    MoE first/last splits (options.moe_splits) as the search assigns them."""
    lm, ctx = LayoutModel(model, clu, train, options), make_context(model, clu, train)
    t = (_Terms(ctx, None, True, rule(model, train, True)) if first_last
         else _Terms(ctx, options.allow_uneven_pipeline if options.split_stages else None))
    groups: dict = {}
    for key in lm.pipeline_rows():
        groups.setdefault(pipe_group(key), []).append(key)
    acc = lambda dp, mb: accumulation(train, dp, mb)  # noqa: E731
    seen = {"fits": 0, "empty": 0, "stages_left_out": 0, "above_all_stages": 0, "split_rows_left_out": 0}
    memo: dict = {}
    for g, keys in groups.items():
        tp, pp, cp, dp, sp, mb, ep, etp = g
        m = acc(dp, mb)
        floor = dp_floor.floor_s(lm, t, g, keys, m, memo)
        zeros = dp_floor.state_zeros(lm, t, g, keys, memo)
        every = lm.zero_stages(tp, pp, cp, dp, ep, etp)
        seen["stages_left_out"] += len(zeros) < len(every)
        seen["split_rows_left_out"] += len(zeros) < len(every) and first_last and all(t.first_last(pp, k[4])
                                                                                        for k in keys)
        seen["above_all_stages"] += floor > min(t.dp_opt(tp, cp, dp, pp, z, m, ep, etp) for z in every)
        levels = [_lower_s(lm, t, g, keys, acc, level) for level in (CHEAP, EXACT_MOE, FITTING)]
        any_fit = False
        for key in keys:
            for z in every:
                shard = (tp, pp, cp, dp, sp, z, mb, ep, etp)
                split_of = t.choice(shard, key[4], RECOMPUTE_NAMES[key[7]], m)[0]  # the split the search assigns
                lo = layout_of(key, shard).model_copy(update={"pipeline_layers": split_of})
                if first_last:
                    lo = with_search_split(ctx, options, layout_of(key, shard))
                est = estimate_with_context(ctx, lo)
                if not est.fits:
                    continue
                any_fit = True
                seen["fits"] += 1
                assert z in zeros, lo
                dp_s = est.time_breakdown_s["dp_exposed"] + est.time_breakdown_s["optimizer"]
                assert floor <= dp_s * (1 + REL), lo
                for bound in levels:
                    assert bound + floor <= est.step_time_s * (1 + REL), lo
        if floor == math.inf:
            assert not any_fit, g
            seen["empty"] += 1
    return seen


# GPU memory where some groups' cheapest DP stage does not fit on its model state alone while
# other layouts fit (at 3.40 GB and above no left-out stage is the cheapest one)
@pytest.mark.parametrize("shared, memory_gb", [(0, 3.35), (1, 3.38)])
def test_floor_is_below_every_fitting_moe_layout(shared, memory_gb):
    """A MoE model whose expert block costs less than the dense FFN, with and without a shared
    expert (and then an MTP module)."""
    base = moe_model(ffn=128)
    model = base.model_copy(update={"moe": base.moe.model_copy(update={"shared_experts": shared}),
                                    "mtp_layers": shared})
    seen = check_floor(model, moe_cluster(2, 4, memory_gb=memory_gb), training(), SearchOptions(**SMALL))
    assert seen["fits"] and seen["stages_left_out"] and seen["above_all_stages"], seen


@pytest.mark.parametrize("split_stages", [False, True])
def test_floor_is_below_every_fitting_dense_layout(split_stages):
    model = tiny_model(6, 8, 2, 64, 4, True)
    options = SearchOptions(allow_fewer_gpus=True, split_stages=split_stages, max_micro_batch=2, max_vpp=3,
                            max_cp=2, time_limit_s=30)
    seen = check_floor(model, binding_cluster(model, 2, 4, 0.6), tiny_training(1024, 16), options)
    assert seen["fits"], seen
    if not split_stages:  # with explicit splits every stage is taken (dp_floor docstring)
        assert seen["stages_left_out"] and seen["above_all_stages"], seen


@pytest.mark.parametrize("memory_gb", [80, 3.5])
def test_floor_is_below_every_fitting_first_last_split_layout(memory_gb):
    """A DeepSeek-V3-shaped 7-layer model with first/last splits (test_moe_split_bounds'
    problem): the split rows' stages come from the split memory floor."""
    options = SearchOptions(moe_splits=True, **SMALL)
    seen = check_floor(dsv3_shaped(), moe_cluster(2, 4, memory_gb=memory_gb), training(batch_seqs=16), options,
                       first_last=True)
    assert seen["fits"], seen
    if memory_gb < 10:
        assert seen["split_rows_left_out"] and seen["above_all_stages"], seen
