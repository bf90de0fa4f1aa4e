"""Deadline objective against the oracle; solver status reporting; CLI surface."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.cli import main
from solver.errors import InfeasibleError, SolverTimeoutError
from solver.search import exhaustive_search, search_layouts
from solver.search.options import SearchOptions
from tests.search.problems import binding_cluster, models, shapes, trainings


@settings(deadline=None, max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(models, shapes, trainings, st.floats(0.2, 3.0))
def test_min_gpus_deadline_equals_exhaustive(model, shape, training, deadline_factor):
    """Deadline = factor x the run time of the fastest layout, so it binds in some examples."""
    cluster = binding_cluster(model, *shape)
    base = {"max_micro_batch": 2, "max_vpp": 2, "max_cp": 2, "top_k": 2}
    fastest = exhaustive_search(model, cluster, training, SearchOptions(**base))
    if not fastest:
        return
    run_s = fastest[0].estimate.step_time_s * -(-training.tokens // fastest[0].estimate.tokens_per_step)
    options = SearchOptions(objective="min_gpus_deadline", deadline_s=run_s * deadline_factor, **base)
    expected = [e.objective_units for e in exhaustive_search(model, cluster, training, options)][:2]
    try:
        got = [r.objective_units for r in search_layouts(model, cluster, training, options,
                                                         explain=False).layouts]
    except InfeasibleError:
        got = []
    assert got == pytest.approx(expected, rel=1e-12)


def test_status_and_bounds_on_the_seed(seed_model, seed_cluster, seed_training):
    res = search_layouts(seed_model, seed_cluster, seed_training, {"top_k": 3})
    fastest = min(r.objective_units for r in res.layouts)  # #1 is the simplest of the tied layouts
    assert res.status == "OPTIMAL" and res.gap == 0.0 and res.bound_units == fastest
    d = res.as_dict()
    assert {"layouts", "search"} <= d.keys() and d["search"]["status"] == "OPTIMAL"
    first = d["layouts"][0]
    assert {"tp", "pp", "dp", "cp", "step_time_s", "mfu"} <= first.keys()
    assert first["memory_per_gpu_bytes"]["total"] > 0 and d["search"]["seconds"] > 0


def test_a_timeout_is_never_infeasible(seed_model, seed_cluster, seed_training):
    """With almost no time the search may prove nothing; it must not claim infeasibility."""
    try:
        res = search_layouts(seed_model, seed_cluster, seed_training, {"time_limit_s": 0.001})
    except SolverTimeoutError:
        return
    assert res.status in ("OPTIMAL", "FEASIBLE")


def test_cli_search_json_and_md(capsys):
    args = ["search", "--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b", "--top", "2"]
    assert main(args + ["--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["layouts"]) == 2 and out["search"]["status"] == "OPTIMAL"
    first, second = out["layouts"]
    # either in step-time order, or #1 is a simpler layout tied with the fastest (#2)
    assert first["step_time_s"] <= second["step_time_s"] or (
        first["tied_with_best"] and second["tied_with_best"]
        and first["step_time_s"] <= second["step_time_s"] * (1 + out["search"]["tie_resolution"]))
    assert main(args + ["--format", "md"]) == 0
    assert "| rank |" in capsys.readouterr().out


def test_cli_infeasible_exits_3_with_reason(capsys, tmp_path):
    """Llama 3 405B on one node of 8 x 80 GB: exit code 3, the reason and the fix on stderr."""
    node = {"name": "one-node", "nodes": 1, "gpus_per_node": 8, "gpu": "seed-gpu",
            "intra_node": {"bandwidth_gb_s": 450, "latency_us": 3},
            "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}}
    path = tmp_path / "one-node.json"
    path.write_text(json.dumps(node))
    args = ["search", "--model", "llama3-405b", "--cluster", str(path), "--training", "seed-300b"]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "lightest layout needs" in err and '"more_gpus"' in err


def test_layout_rank_counts_like_the_oracle():
    from solver.search.api import layout_rank
    from tests.search.problems import tiny_model, tiny_training

    model = tiny_model(6, 8, 2, 64, 4, True)
    cluster, training = binding_cluster(model, 2, 4, 0.6), tiny_training(1024, 16)
    ranked = exhaustive_search(model, cluster, training)
    pick = ranked[len(ranked) // 2]
    got = layout_rank(model, cluster, training, pick.layout)
    better = sum(e.objective_units < pick.objective_units for e in ranked)
    assert got["rank_min"] <= better + 1 <= got["rank_max"] and got["fitting_layouts"] == len(ranked)


def test_an_unproven_optimum_is_reported_feasible_with_bound_and_gap(monkeypatch):
    """If CP-SAT stops before proving optimality (status FEASIBLE), so does the result."""
    import solver.search.api as api
    from solver.search.driver import Optimum
    from tests.search.problems import tiny_model, tiny_training

    real = api.optimize

    def stopped_early(*args, **kwargs):
        best = real(*args, **kwargs)
        return Optimum("FEASIBLE", best.value, best.bound * 0.9)

    monkeypatch.setattr(api, "optimize", stopped_early)
    model = tiny_model(4, 4, 1, 64, 4, True)
    res = search_layouts(model, binding_cluster(model, 2, 4, 1.0), tiny_training(1024, 16), {"top_k": 2})
    assert res.status == "FEASIBLE" and 0.09 < res.gap < 0.11
    assert res.bound_units < res.layouts[0].objective_units
