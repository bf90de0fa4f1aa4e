"""Memory-aware pipeline splits: each layout gets the fastest split whose busiest stage fits
(solver.cost.step.memory_aware_split), the same rule in the evaluator and the CP-SAT tables.

Ground truth: every composition of the layers into pp stages of >= 1 layer, each estimated by
the cost model (estimate_with_context with that explicit split), the fastest fitting one.
"""
import itertools

import pytest

from solver.cost.estimate import estimate_with_context, make_context
from solver.cost.step import chosen_split, stage_layer_limits, time_terms, usable_memory_bytes
from solver.search import exhaustive_search, search_layouts
from solver.search.cpsat import LayoutModel
from solver.search.exhaustive import evaluate, with_search_split
from solver.search.options import SearchOptions
from solver.search.rules import accumulation
from solver.search.space import enumerate_layouts
from solver.search.terms import term_rows
from solver.specs import LayoutSpec
from tests.search.problems import binding_cluster, tiny_model, tiny_training

OPTIONS = SearchOptions(max_micro_batch=2, max_vpp=1, max_cp=1, split_stages=True)


def problem(share=0.5):
    model = tiny_model(8, 8, 2, 64, 4, True)
    return model, binding_cluster(model, 2, 4, share), tiny_training(1024, 16)


def compositions(total, parts):
    for cuts in itertools.combinations(range(1, total), parts - 1):
        edges = (0,) + cuts + (total,)
        yield tuple(b - a for a, b in itertools.pairwise(edges))


def fastest_split(ctx, layout):
    m = accumulation(ctx.training, layout.dp, layout.micro_batch)
    return chosen_split(time_terms(ctx, layout, m), layers=ctx.model.layers, pp=layout.pp, vpp=1, grad_accum=m,
                        uneven=True)


@pytest.mark.parametrize("share", [0.35, 0.4])  # shares of the 18-byte Megatron-Core state
def test_split_is_the_fastest_that_fits(share):
    """Layouts whose fastest split does not fit: the assigned split fits and is as fast as the
    fastest fitting composition; when none fits, the layout is rejected."""
    model, cluster, training = problem(share)
    ctx = make_context(model, cluster, training)
    moved = 0
    for layout in enumerate_layouts(model, cluster, training, OPTIONS):
        if layout.pp == 1 or estimate_with_context(ctx, layout.model_copy(
                update={"pipeline_layers": fastest_split(ctx, layout)})).fits:
            continue
        ests = [estimate_with_context(ctx, layout.model_copy(update={"pipeline_layers": s}))
                for s in compositions(model.layers, layout.pp)]
        fitting = [e.step_time_s for e in ests if e.fits]
        got = evaluate(model, cluster, training, OPTIONS, layout)
        if not fitting:
            assert got is None
            continue
        moved += 1
        assert got is not None and got.estimate.fits
        assert got.estimate.step_time_s == pytest.approx(min(fitting), rel=1e-12)
    assert moved >= 5  # the case the rule exists for occurs (8 layouts at each share, counted by hand run)


def test_stage_layer_limits_are_exact():
    """Each rank's limit: that many layers fit on it and one more does not (every layout of
    the problem; a stage's memory read off an explicit split putting n layers on every rank)."""
    model, cluster, training = problem(0.5)
    ctx = make_context(model, cluster, training)
    usable = usable_memory_bytes(ctx)
    from solver.cost.step import compose_memory, stage_memory_terms, stage_profile
    from solver.cost import memory as M

    for layout in list(enumerate_layouts(model, cluster, training, OPTIONS))[::7]:
        if layout.pp == 1:
            continue
        m = accumulation(training, layout.dp, layout.micro_batch)
        lo = layout
        kw = {"tp": lo.tp, "pp": lo.pp, "dp": lo.dp, "cp": lo.cp, "zero": lo.zero_stage,
              "logits": M.logits_bytes(ctx, tp=lo.tp, cp=lo.cp, micro_batch=lo.micro_batch),
              "comm_buffers": M.comm_buffer_bytes(ctx, tp=lo.tp, cp=lo.cp, dp=lo.dp, pp=lo.pp,
                                                  sp=lo.sequence_parallel, zero=lo.zero_stage,
                                                  micro_batch=lo.micro_batch)}

        def total(r, n, lo=lo, m=m, kw=kw):  # this layout's
            prof = stage_profile(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel, recompute=lo.recompute,
                                 micro_batch=lo.micro_batch, pp=lo.pp, vpp=1, grad_accum=m, split=(n,) * lo.pp)
            return compose_memory(stage_memory_terms(ctx, prof[r], **kw))["total"]

        for r, k in enumerate(stage_layer_limits(ctx, layout, m, usable)):
            assert all(total(r, n) <= usable for n in range(1, k + 1))  # 0: not even one layer fits
            assert k == model.layers or total(r, k + 1) > usable


def test_seed_layout_takes_a_slower_split_that_fits(seed_model, seed_cluster, seed_training):
    """tp 8, pp 8, cp 2, ZeRO-2, micro-batch 4: the fastest split (fewer layers on the LM-head
    stage) overfills the first stages, which hold 8 micro-batches of activations under 1F1B;
    the search moves layers to the later stages until every stage fits (slower, but it runs)."""
    layout = LayoutSpec(tp=8, pp=8, dp=4, cp=2, zero_stage=2, micro_batch=4)
    ctx = make_context(seed_model, seed_cluster, seed_training)
    fast = estimate_with_context(ctx, layout.model_copy(update={"pipeline_layers": fastest_split(ctx, layout)}))
    got = evaluate(seed_model, seed_cluster, seed_training, SearchOptions(split_stages=True), layout)
    assert not fast.fits and got is not None and got.estimate.fits
    split = got.layout.pipeline_layers
    assert sum(split) == 80 and split[0] < split[-2]  # lighter early stages
    assert got.estimate.step_time_s > fast.step_time_s


def test_tables_carry_the_memory_split_and_search_equals_exhaustive():
    """The tables add a row per (key, split) a layout is assigned because its fastest split does
    not fit; CP-SAT's top-10 equals the exhaustive oracle's (same rule)."""
    model, cluster, training = problem(0.5)
    options = OPTIONS.model_copy(update={"top_k": 10, "allow_fewer_gpus": True})
    rows = term_rows(LayoutModel(model, cluster, training, options))
    assert len(rows.pipe_keys) > len(set(rows.pipe_keys))  # memory variants exist
    expected = exhaustive_search(model, cluster, training, options)[:10]
    res = search_layouts(model, cluster, training, options, explain=False)
    assert [r.objective_units for r in res.layouts] == pytest.approx([e.objective_units for e in expected],
                                                                     rel=1e-12)
    assert [r.layout for r in res.layouts] == [e.layout for e in expected]
    ctx = make_context(model, cluster, training)
    assert all(with_search_split(ctx, options, r.layout.model_copy(update={"pipeline_layers": None}))
               == r.layout for r in res.layouts)
