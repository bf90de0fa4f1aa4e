"""Ties: layouts within the model's resolution of the fastest are ranked simplest first.

The resolution (solver.search.ties.TIE_RESOLUTION, 2% of the best objective) is about the
cost model's median |step-time error| on the runs it scores best (NVIDIA DGXC H100, 1.7%).
"""
from types import SimpleNamespace

import pytest

from solver.search import search_layouts
from solver.search.objective import GPU_WEIGHT
from solver.search.scaling import TIME_UNIT_S
from solver.search.ties import TIE_RESOLUTION, rank_with_ties, simplicity_key
from solver.specs import LayoutSpec


def item(step_s, gpus=8, **fields):
    lo = LayoutSpec(**{"tp": 8, "dp": gpus // 8, **fields})
    return SimpleNamespace(layout=lo, objective_units=step_s / TIME_UNIT_S,
                           estimate=SimpleNamespace(step_time_s=step_s))


def test_resolution_is_two_percent():
    assert TIE_RESOLUTION == 0.02


def test_simpler_layout_inside_the_band_comes_first():
    # best 10.0 s: the band ends at 10.2 s. Inside: ZeRO-2 VPP1 (10.1 s) and ZeRO-1 (10.19 s),
    # CP2 (10.0 s, the fastest); outside: ZeRO-0 at 10.21 s (simplest of all, but not tied).
    fastest = item(10.0, gpus=16, cp=2, zero_stage=1)
    zero2 = item(10.1, zero_stage=2)
    zero1 = item(10.19, zero_stage=1)
    outside = item(10.21, zero_stage=0)
    ranking, tied = rank_with_ties([outside, zero2, fastest, zero1], "step_time")
    assert tied == 3
    assert ranking == [zero1, zero2, fastest, outside]  # CP1 before CP2, then ZeRO-1 before ZeRO-2


def test_simplicity_order_is_cp_zero_vpp_micro_batch_dimensions():
    a = LayoutSpec(tp=8, dp=8, cp=1, zero_stage=3, vpp=1, micro_batch=1)
    b = LayoutSpec(tp=8, dp=4, cp=2, zero_stage=0, vpp=1, micro_batch=1)
    assert simplicity_key(a) < simplicity_key(b)  # lower CP wins over a lower ZeRO stage
    c = LayoutSpec(tp=4, pp=2, dp=8, vpp=2, zero_stage=1)
    d = LayoutSpec(tp=4, pp=2, dp=8, vpp=1, zero_stage=1, micro_batch=4)
    assert simplicity_key(d) < simplicity_key(c)  # fewer virtual stages before a smaller micro-batch
    e = LayoutSpec(tp=8, pp=1, dp=8)
    f = LayoutSpec(tp=4, pp=2, dp=8)
    assert simplicity_key(e) < simplicity_key(f)  # two parallel dimensions instead of three


def test_min_gpus_ties_only_within_one_gpu_count():
    # objective = GPUs x GPU_WEIGHT + step: 8 GPUs at 10 s and 8 GPUs at 10.1 s (ZeRO-0) tie,
    # 16 GPUs never ties with 8 however close the step time.
    def g(step_s, gpus, **kw):
        it = item(step_s, gpus=gpus, **kw)
        it.objective_units = gpus * GPU_WEIGHT + step_s / TIME_UNIT_S
        return it
    a, b, c = g(10.0, 8, zero_stage=1), g(10.1, 8, zero_stage=0), g(9.0, 16, zero_stage=0)
    ranking, tied = rank_with_ties([c, a, b], "min_gpus")
    assert (ranking, tied) == ([b, a, c], 2)


def test_seed_search_marks_its_ties_and_states_the_resolution(seed_model, seed_cluster, seed_training):
    res = search_layouts(seed_model, seed_cluster, seed_training, {"top_k": 10})
    d = res.as_dict()
    assert d["search"]["tie_resolution"] == TIE_RESOLUTION
    fastest = min(r.estimate.step_time_s for r in res.layouts)
    tied = [r for r in res.layouts if r.tied_with_best]
    assert len(tied) >= 2 and res.layouts[: len(tied)] == tied
    assert any(r.estimate.step_time_s == fastest for r in tied)
    assert all(r.estimate.step_time_s <= fastest * (1 + TIE_RESOLUTION) for r in tied)
    keys = [simplicity_key(r.layout) for r in tied]
    assert keys == sorted(keys)
    rest = [r.estimate.step_time_s for r in res.layouts[len(tied):]]
    assert rest == sorted(rest) and all(t > fastest * (1 + TIE_RESOLUTION) for t in rest)
    assert d["layouts"][0]["tied_with_best"] is True
    assert pytest.approx(res.bound_units) == fastest / TIME_UNIT_S
