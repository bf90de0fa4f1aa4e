"""solver.search.moe_split's bounds, which let the first/last split search drop row groups
unevaluated: every prune level of a group with split rows is below every layout of the group
that fits, the first (CHEAP) below every layout (the later ones read only layouts that may fit,
and are math.inf only when none does), and may_fit is False only for layouts whose estimate does not fit. On a
DeepSeek-V3-shaped 7-layer model at a roomy and at a memory-binding capacity (where some
groups hold no fitting layout and others do)."""
from __future__ import annotations

import math

import pytest

from solver.cost.estimate import estimate_layout, make_context
from solver.cost.step_memory import usable_memory_bytes
from solver.search.cpsat import RECOMPUTE_NAMES, LayoutModel
from solver.search.exhaustive import with_search_split
from solver.search.model import layout_of, pipe_group
from solver.search.moe_split import may_fit, rule
from solver.search.options import SearchOptions
from solver.search.prune import CHEAP, REFINED, _lower_s
from solver.search.rules import accumulation
from solver.search.terms import _Terms
from tests.search.test_experts import SMALL, training
from tests.search.test_experts_cost import cluster
from tests.search.test_moe_split import dsv3_shaped


@pytest.mark.parametrize("memory_gb", [80, 3.5])
def test_every_level_is_below_every_fitting_split_layout(memory_gb):
    model, clu, train = dsv3_shaped(), cluster(2, 4, memory_gb=memory_gb), training(batch_seqs=16)
    options = SearchOptions(moe_splits=True, **SMALL)
    lm, ctx = LayoutModel(model, clu, train, options), make_context(model, clu, train)
    t = _Terms(ctx, None, True, rule(model, train, True))
    usable = usable_memory_bytes(ctx)
    groups: dict = {}
    for key in lm.pipeline_rows():
        groups.setdefault(pipe_group(key), []).append(key)
    acc = lambda dp, mb: accumulation(train, dp, mb)  # noqa: E731
    seen = {"fits": 0, "refused": 0, "empty": 0}
    for g, keys in groups.items():
        tp, pp, cp, dp, sp, mb, ep, etp = g
        if not any(t.first_last(pp, k[4]) for k in keys):
            continue
        levels = [_lower_s(lm, t, g, keys, acc, level) for level in range(CHEAP, REFINED + 1)]
        fitting = 0
        for key in keys:
            m = acc(dp, mb)
            for z in lm.zero_stages(tp, pp, cp, dp, ep, etp):
                shard = (tp, pp, cp, dp, sp, z, mb, ep, etp)
                lo = with_search_split(ctx, options, layout_of(key, shard))
                est = estimate_layout(model, clu, train, lo)
                fits = est.memory_per_gpu_bytes["total"] <= usable
                if not may_fit(t, shard, key[4], RECOMPUTE_NAMES[key[7]], m):
                    assert not fits, lo
                    seen["refused"] += 1
                step = est.step_time_s * (1 + 1e-12)
                assert levels[CHEAP] <= step, lo  # the time bound: every layout
                if fits:
                    fitting += 1
                    assert max(levels) <= step, lo
        if fitting:
            assert levels[-1] < math.inf
            seen["fits"] += 1
        elif levels[-1] == math.inf:
            seen["empty"] += 1
    assert seen["fits"]  # not vacuous
    if memory_gb < 10:  # the memory bounds act: groups dropped whole, pairs refused
        assert seen["empty"] and seen["refused"]
