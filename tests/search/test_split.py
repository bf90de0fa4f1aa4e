"""Uneven pipeline stages: each stage charged separately, the split chosen and reported.

Sources: step = m t_max + (sum t_r - t_max)/v + DP + optimizer (solver/cost/step.py, from
Narayanan et al. 2021 Sec. 2.2); Llama 3 lighter first/last stages (Dubey et al. 2024, 3.3.2).
"""
import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.cost.estimate import estimate_layout, estimate_with_context, make_context
from solver.cost.step import TimeTerms, balanced_split, compose_split_step_time, compose_step_time
from solver.errors import InfeasibleError, SpecError
from solver.search import exhaustive_search, search_layouts
from solver.search.cpsat import LayoutModel
from solver.search.exhaustive import evaluate, with_search_split
from solver.search.model import layout_of
from solver.search.options import SearchOptions
from solver.search.scaling import TIME_UNIT_S
from solver.search.terms import term_rows
from solver.specs import LayoutSpec
from tests.search.problems import binding_cluster, models, shapes, tiny_model, tiny_training, trainings


def terms(layer_s, head_s, emb_s, p2p_s=0.0):
    return TimeTerms(layer_s, 0.0, 0.0, p2p_s, head_s, 0.0, 0.0, emb_s)


def compositions(total, parts):
    for cuts in itertools.combinations(range(1, total), parts - 1):
        edges = (0,) + cuts + (total,)
        yield tuple(b - a for a, b in itertools.pairwise(edges))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 10), st.integers(1, 5), st.floats(0.1, 2.0), st.floats(0, 3.0), st.floats(0, 3.0),
       st.integers(1, 8))
def test_balanced_split_is_time_optimal_then_memory_optimal(layers, pp, layer_s, head, emb, m):
    """Against every composition of the layers into pp stages of >= 1 layer."""
    if pp > layers:
        return
    tt = terms(layer_s, head, emb)
    extra = [0.0] * pp
    extra[-1] += head
    extra[0] += emb if pp > 1 else 0.0

    def t_max(split):
        return max(n * layer_s + e for n, e in zip(split, extra, strict=True))

    def held(split):
        return max(n * min(pp - r, m) for r, n in enumerate(split))

    got = balanced_split(tt, layers=layers, pp=pp, grad_accum=m)
    assert sum(got) == layers and min(got) >= 1
    every = list(compositions(layers, pp))
    best_t = min(map(t_max, every))
    assert t_max(got) == best_t
    assert held(got) == min(held(s) for s in every if t_max(s) == best_t)


def test_equal_stages_give_the_busiest_rank_formula():
    """No embedding/head work and equal stages: (m + (p-1)/v) x stage, as compose_step_time."""
    tt = TimeTerms(0.01, 0.002, 0.001, 0.003, 0.0, 0.5, 0.1, 0.0)
    a = compose_split_step_time(tt, split=(5,) * 8, pp=4, vpp=2, grad_accum=8)
    b = compose_step_time(tt, layers=10, pp=4, vpp=2, grad_accum=8)
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert sum(a.breakdown_s.values()) == pytest.approx(a.step_time_s, rel=1e-12)


def test_explicit_split_is_validated(seed_model, seed_cluster, seed_training):
    with pytest.raises(ValueError):
        LayoutSpec(pp=2, pipeline_layers=(40,))
    with pytest.raises(SpecError):
        estimate_layout(seed_model, seed_cluster, seed_training,
                        LayoutSpec(tp=8, pp=2, dp=32, pipeline_layers=(40, 39)))


def test_lighter_last_stage_beats_an_even_split(seed_model, seed_cluster, seed_training):
    """80 layers on pp 8 (10 each): the LM head makes the last stage the slowest; the chosen
    split moves layers off it and the step gets faster (the cost model, stage by stage)."""
    options = SearchOptions(split_stages=True)
    even = LayoutSpec(tp=8, pp=8, dp=8, zero_stage=1, sequence_parallel=True, pipeline_layers=(10,) * 8)
    chosen = evaluate(seed_model, seed_cluster, seed_training, options, even.model_copy(
        update={"pipeline_layers": None}))
    assert chosen.layout.pipeline_layers[-1] < 10 and sum(chosen.layout.pipeline_layers) == 80
    flat = estimate_layout(seed_model, seed_cluster, seed_training, even)
    assert chosen.estimate.step_time_s < flat.step_time_s


def test_split_tables_match_the_cost_model():
    model = tiny_model(7, 8, 2, 64, 4, True)
    cluster, training = binding_cluster(model, 2, 4, 0.6), tiny_training(1024, 16)
    options = SearchOptions(split_stages=True)
    ctx = make_context(model, cluster, training)
    rows = term_rows(LayoutModel(model, cluster, training, options))
    pairs = [(i, j) for pipes, shards, _ in rows.groups().values() for i in pipes for j in shards]
    fits, uneven = set(), 0
    for i, j in random.Random(0).sample(pairs, 300):
        layout = with_search_split(ctx, options, layout_of(rows.pipe_keys[i], rows.shard_keys[j]))
        if rows.pipe_splits[i] != layout.pipeline_layers:
            assert not rows.fits(i, j)  # another row of the key carries the pair's split
            continue
        est = estimate_with_context(ctx, layout)
        assert abs(rows.pipe_units[i] + rows.shard_units[j] - est.step_time_s / TIME_UNIT_S) <= rows.error_units
        assert rows.memory(i, j) == pytest.approx(est.memory_per_gpu_bytes["total"], rel=1e-12)
        assert rows.fits(i, j) == est.fits
        fits.add(est.fits)
        uneven += layout.pipeline_layers is not None and len(set(layout.pipeline_layers)) > 1
    assert fits == {True, False} and uneven > 0


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(models, shapes, trainings, st.sampled_from(["step_time", "min_cost", "min_gpus"]), st.booleans(),
       st.booleans())
def test_split_search_equals_exhaustive(model, shape, training, objective, fewer, uneven):
    cluster = binding_cluster(model, *shape)
    options = SearchOptions(top_k=3, objective=objective, allow_fewer_gpus=fewer, split_stages=True,
                            allow_uneven_pipeline=uneven, max_micro_batch=2, max_vpp=2, max_cp=2)
    expected = [e.objective_units for e in exhaustive_search(model, cluster, training, options)[:3]]
    try:
        res = search_layouts(model, cluster, training, options, explain=False)
    except InfeasibleError:
        assert expected == []
        return
    assert [r.objective_units for r in res.layouts] == pytest.approx(expected, rel=1e-12)
    for r in res.layouts:
        if r.layout.pp > 1:
            assert r.layout.pipeline_layers is not None and sum(r.pipeline_split) == model.layers


def test_each_stage_holds_its_own_weights(seed_model, seed_cluster, seed_training):
    """pp 2 with (1, 79) layers: the second stage (79 layers + final norm + LM head) is the
    busiest; its weights are its own parameters over TP (hand count from parameter_counts)."""
    from solver.cost.accounting import parameter_counts, per_gpu_model_state_bytes

    pc = parameter_counts(seed_model, seed_training.seq_len)
    layout = LayoutSpec(tp=8, pp=2, dp=32, zero_stage=1, pipeline_layers=(1, 79))
    est = estimate_layout(seed_model, seed_cluster, seed_training, layout)
    params = 79 * pc.per_layer + pc.final_norm + pc.lm_head
    expected = per_gpu_model_state_bytes(params, seed_training.precision, layout.model_copy(
        update={"pp": 1, "pipeline_layers": None}))
    assert est.memory_per_gpu_bytes["weights"] == pytest.approx(expected.weights, rel=1e-12)
    even = estimate_layout(seed_model, seed_cluster, seed_training, layout.model_copy(
        update={"pipeline_layers": (40, 40)}))
    assert est.memory_per_gpu_bytes["total"] > even.memory_per_gpu_bytes["total"]
