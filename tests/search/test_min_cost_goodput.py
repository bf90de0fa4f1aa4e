"""min_cost prices failures in (GPUs x steps x step time x wall/work), CP-SAT still equals the
exhaustive oracle, and every search row carries its run: days, GPU-hours, goodput, cost."""
from __future__ import annotations

import json

import pytest

from solver.cost.checkpoint import checkpoint_cost
from solver.cost.accounting import parameter_counts
from solver.cost.risk import failure_model, optimal_wall_factor
from solver.search import exhaustive_search, search_layouts
from solver.search.objective import run_steps
from solver.search.options import SearchOptions
from tests.search.problems import binding_cluster, tiny_model, tiny_training


def _problem(rate: float):
    model = tiny_model(12, 8, 2, 128, 4, True)
    cluster = binding_cluster(model, 8, 8, 0.5)
    # A failure-prone cluster with slow storage: goodput falls steeply with the GPU count.
    cluster = cluster.model_copy(update={"failures": cluster.failures.model_copy(
        update={"interruptions_per_gpu_hour": rate, "relaunch_s": 3600.0}),
        "storage": cluster.storage.model_copy(update={"aggregate_write_gb_s": 0.05})})
    return model, cluster, tiny_training(1024, 32, tokens=1e9)


def test_min_cost_with_failures_equals_exhaustive_and_is_priced():
    model, cluster, training = _problem(rate=2e-3)
    options = SearchOptions(top_k=5, objective="min_cost", max_micro_batch=2, max_vpp=2, max_cp=2,
                            recompute=("none", "full"))
    oracle = exhaustive_search(model, cluster, training, options)[:5]
    res = search_layouts(model, cluster, training, options)
    assert [r.objective_units for r in res.layouts] == pytest.approx([e.objective_units for e in oracle],
                                                                     rel=1e-12)
    # The objective is GPU-time WITH failures: gpus x steps x step x F (F = wall / work).
    best = res.layouts[0]
    n = parameter_counts(model, training.seq_len).total
    ckpt = checkpoint_cost(n, training.precision, cluster, best.layout)
    factor = optimal_wall_factor(failure_model(cluster, ckpt, best.layout.gpus))
    assert factor > 1.01  # failures matter on this cluster
    steps = run_steps(training, best.layout)
    assert best.objective_units == pytest.approx(
        best.layout.gpus * steps * best.estimate.step_time_s / 1e-6 * factor, rel=1e-12)
    assert best.run["gpu_hours"] == pytest.approx(best.layout.gpus * steps * best.estimate.step_time_s
                                                  * factor / 3600, rel=1e-12)
    assert best.run["goodput"] == pytest.approx(1 / factor)


@pytest.mark.parametrize("objective", ["min_cost", "min_gpus"])
def test_search_rows_show_days_gpu_hours_and_cost(objective, capsys, tmp_path):
    from service.cli import main

    model, cluster, training = _problem(rate=2e-3)
    paths = {}
    for name, spec in (("model", model), ("cluster", cluster), ("training", training)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(spec.model_dump_json())
    argv = ["search", "--model", str(paths["model"]), "--cluster", str(paths["cluster"]),
            "--training", str(paths["training"]), "--objective", objective, "--top", "2",
            "--price-per-gpu-hour", "2.5", "--currency", "EUR"]
    assert main(argv + ["--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["layouts"]
    for r in rows:
        run = r["run"]
        assert run["cost"] == pytest.approx(2.5 * run["gpu_hours"]) and run["currency"] == "EUR"
        assert run["days"] * 86_400 * r["gpus"] / 3600 == pytest.approx(run["gpu_hours"])
        assert run["days"] > run["steps"] * r["step_time_s"] / 86_400  # failures cost time
    from service.commands.search import render_search

    md = render_search({"search": {"objective": objective, "status": "OPTIMAL", "seconds": 0, "solves": 1,
                                   "evaluated": 1, "gap": 0.0}, "layouts": rows})
    assert "| run days | GPU-hours | goodput | cost |" in md
    assert f"{rows[0]['run']['cost']:,.0f} EUR" in md


def test_bad_currency_names_the_field(capsys):
    from service.cli import main

    assert main(["search", "--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b",
                 "--currency", "euro"]) == 2
    assert "training.currency" in capsys.readouterr().err
