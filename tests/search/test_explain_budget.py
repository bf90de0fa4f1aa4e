"""The explanation of an infeasible problem keeps to its time budget, every step included."""
import time

import pytest

from solver.errors import InfeasibleError, SolverTimeoutError
from solver.presets import load_model, load_training
from solver.search import explain, search_layouts
from solver.search.cpsat import LayoutModel
from solver.search.options import SearchOptions
from solver.search.terms import term_rows
from tests.search.problems import tiny_cluster, tiny_model, tiny_training
from topology.catalog import load_cluster

# Fix kinds tried with every ZeRO stage and recompute level allowed (the allow_* fixes only
# run when the options excluded some), and with ZeRO-0 only.
FIX_KINDS = {"more_gpus", "shorter_sequence", "bigger_gpu"}
ZERO0_KINDS = FIX_KINDS | {"allow_zero_stages"}

# A 52.8T-parameter dense model: per layer 4 x 65536^2 attention + 2 x 65536 x 262144 FFN
# = 51.5e9 parameters, x 1024 layers = 52.8e12 (solver.cost.accounting.parameter_counts agrees).
HUGE = {"name": "huge-52t", "layers": 1024, "hidden": 65536, "ffn_hidden": 262144, "ffn_gated": False,
        "heads": 512, "kv_heads": 512, "head_dim": 128, "vocab": 128000, "tied_embeddings": True}


def _accounted(ex: dict, kinds: set[str]) -> None:
    """Each fix kind is reported exactly once: found, none found, not tried or timed out."""
    seen = ([f["change"] for f in ex["fixes"]] + ex["no_fix_found"]
            + ex.get("not_tried_time_limit", []) + [k for k in ex.get("timed_out", []) if k in ZERO0_KINDS])
    assert sorted(seen) == sorted(kinds)


def test_huge_model_explanation_keeps_its_budget(monkeypatch):
    """52T parameters on the seed's 512 GPUs: the "more GPUs" table alone (a cluster 64x
    larger, 1.45M pipeline x 1.88M shard rows) took ~70 s to build before every step had a
    deadline; with a 3 s budget the explanation returns in about 3 s and says what it cut."""
    monkeypatch.setattr(explain, "EXPLAIN_MIN_S", 3.0)
    model, cluster = load_model(HUGE), load_cluster("seed-512")
    t0 = time.perf_counter()
    with pytest.raises(InfeasibleError) as err:
        search_layouts(model, cluster, load_training("seed-300b"), {"time_limit_s": 1.0, "top_k": 1})
    elapsed_s = time.perf_counter() - t0
    ex = err.value.explanation
    # Budget 3 s + the search itself (~0.5 s) + slack for a loaded 2-core machine.
    assert elapsed_s < 12.0
    assert ex["kind"] == "memory" and "lightest layout needs" in ex["reason"]
    assert "more_gpus" in ex["timed_out"]
    _accounted(ex, FIX_KINDS)


def test_spent_budget_tries_no_fix_and_says_so():
    """Budget 0: nothing may run, so every step is cut off or left unstarted (never 'no fix')."""
    model, training = tiny_model(1, 1, 1, 4096, 4, True), tiny_training(512, 8)
    cluster = tiny_cluster(1, 8, 5.0)
    opts = SearchOptions(zero_stages=(0,), top_k=1)
    ex = explain.explain_infeasible(model, cluster, training, opts, budget_s=0.0)
    assert ex["kind"] == "memory" and ex["lightest_layout"] is None
    assert ex["fixes"] == [] and ex["no_fix_found"] == []
    assert ex["timed_out"] == ["lightest_layout"]
    assert ex["not_tried_time_limit"] == ["allow_zero_stages", "more_gpus", "shorter_sequence", "bigger_gpu"]


def test_normal_explanation_has_no_timeout_keys():
    """The same small problem with the default budget: every fix decided, nothing cut."""
    model, training = tiny_model(1, 1, 1, 4096, 4, True), tiny_training(512, 8)
    with pytest.raises(InfeasibleError) as err:
        search_layouts(model, tiny_cluster(1, 8, 5.0), training, {"zero_stages": [0], "top_k": 1})
    ex = err.value.explanation
    assert "timed_out" not in ex and "not_tried_time_limit" not in ex
    _accounted(ex, ZERO0_KINDS)


def test_past_deadline_stops_table_build_and_fit_search():
    model, training = tiny_model(2, 2, 1, 64, 4, True), tiny_training(512, 8)
    cluster, opts = tiny_cluster(1, 4, 80), SearchOptions()
    past = time.perf_counter() - 1.0
    with pytest.raises(SolverTimeoutError):
        term_rows(LayoutModel(model, cluster, training, opts), with_time=False, deadline=past)
    with pytest.raises(SolverTimeoutError):
        explain.fitting_layout(model, cluster, training, opts, deadline=past)
    # Without a deadline (or a future one) the same question is answered: a layout fits.
    assert explain.fitting_layout(model, cluster, training, opts) is not None
    assert explain.fitting_layout(model, cluster, training, opts, deadline=time.perf_counter() + 60) is not None


def test_allow_fix_is_not_listed_when_only_heavier_values_are_excluded():
    """ZeRO-0 and no recompute never lower memory, so excluding only them leaves no allow_*
    fix to try: the kinds are absent, not reported as "no fix found"."""
    model, training = tiny_model(1, 1, 1, 4096, 4, True), tiny_training(512, 8)
    opts = SearchOptions(zero_stages=(1, 2, 3), recompute=("selective", "full"), top_k=1)
    ex = explain.explain_infeasible(model, tiny_cluster(1, 8, 3.0), training, opts)
    assert ex["kind"] == "memory"
    _accounted(ex, FIX_KINDS)  # exactly more_gpus, shorter_sequence, bigger_gpu
