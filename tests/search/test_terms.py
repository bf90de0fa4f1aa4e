"""The CP-SAT cost tables agree with the cost model (solver.cost.estimate) layout by layout.

Step time: pipeline units + shard units is within the tables' rounding bound (1 us) of
estimate_layout's step_time_s; memory: the same total and the same `fits` verdict. Each
layout is evaluated with the pipeline split the search assigns it (split_stages on;
solver.search.exhaustive.with_search_split), or without one when split_stages is off.
"""
import random

import pytest

from solver.cost.estimate import estimate_with_context, make_context
from solver.search.cpsat import LayoutModel
from solver.search.exhaustive import with_search_split
from solver.search.model import layout_of
from solver.search.options import SearchOptions
from solver.search.scaling import TIME_UNIT_S
from solver.search.terms import term_rows
from tests.search.problems import binding_cluster, tiny_model, tiny_training


def check_pairs(model, cluster, training, samples=150, seed=0, options=None):
    options = options or SearchOptions()
    ctx = make_context(model, cluster, training)
    rows = term_rows(LayoutModel(model, cluster, training, options))
    pairs = [(i, j) for pipes, shards, _ in rows.groups().values() for i in pipes for j in shards]
    rng = random.Random(seed)
    fit_seen = set()
    for i, j in rng.sample(pairs, min(samples, len(pairs))):
        layout = with_search_split(ctx, options, layout_of(rows.pipe_keys[i], rows.shard_keys[j]))
        assert (layout.pipeline_layers is not None) == (options.split_stages and layout.pp > 1)
        if rows.pipe_splits is not None and rows.pipe_splits[i] != layout.pipeline_layers:
            assert not rows.fits(i, j)  # another row of the key carries the pair's split
            continue
        est = estimate_with_context(ctx, layout)
        units = rows.pipe_units[i] + rows.shard_units[j]
        assert abs(units - est.step_time_s / TIME_UNIT_S) <= rows.error_units, layout
        assert rows.memory(i, j) == pytest.approx(est.memory_per_gpu_bytes["total"], rel=1e-12)
        assert rows.fits(i, j) == est.fits
        fit_seen.add(est.fits)
    return fit_seen


def test_seed_tables_match_the_cost_model(seed_model, seed_cluster, seed_training):
    """split_stages on: every layout evaluated with the split the search assigns it."""
    options = SearchOptions(split_stages=True)
    assert check_pairs(seed_model, seed_cluster, seed_training, options=options) == {True, False}


def test_busiest_rank_tables_match_the_cost_model(seed_model, seed_cluster, seed_training):
    """split_stages off (the default): every stage charged as the busiest rank, no split."""
    options = SearchOptions()
    assert check_pairs(seed_model, seed_cluster, seed_training, options=options) == {True, False}


def test_small_tables_match_the_cost_model():
    model = tiny_model(6, 8, 2, 64, 4, True)
    cluster = binding_cluster(model, 2, 4, 0.6)
    assert check_pairs(model, cluster, tiny_training(1024, 16), samples=300) == {True, False}


@pytest.mark.parametrize("split_stages", [False, True])
def test_memory_only_tables_have_the_same_rows_and_fits(split_stages):
    """with_time=False (the explanation's fit questions): the same rows, splits, memory and
    fit verdicts as the full tables, and every time column 0."""
    model = tiny_model(6, 8, 2, 64, 4, True)
    cluster, training = binding_cluster(model, 2, 4, 0.6), tiny_training(1024, 16)
    lm = LayoutModel(model, cluster, training, SearchOptions(split_stages=split_stages))
    full, mem = term_rows(lm), term_rows(lm, with_time=False)
    assert (mem.pipe_keys, mem.shard_keys, mem.pipe_splits) == (full.pipe_keys, full.shard_keys, full.pipe_splits)
    assert set(mem.pipe_units) == set(mem.shard_units) == {0} and set(full.pipe_units) != {0}
    pairs = [(i, j) for pipes, shards, _ in full.groups().values() for i in pipes for j in shards]
    assert [mem.fits(i, j) for i, j in pairs] == [full.fits(i, j) for i, j in pairs]
    assert [mem.memory(i, j) for i, j in pairs] == [full.memory(i, j) for i, j in pairs]
    assert {full.fits(i, j) for i, j in pairs} == {True, False}
