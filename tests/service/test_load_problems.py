"""benchmarks.load's distinct workload: planner problems that are valid requests, each a
different cost-table problem, none sent twice before all were sent."""
from __future__ import annotations

import json

from benchmarks.load_problems import Workloads, planner_problems
from service.routers.common import load_specs


def test_planner_problems_are_valid_and_distinct_for_the_tables():
    problems = planner_problems()
    assert len(problems) == 3 * 8 * 2 * 3 * 2 * 2
    # what the tables read: model, cluster but its name, training (service.tables.TableCache.key)
    keys = {json.dumps([p["model"], {k: v for k, v in p["cluster"].items() if k != "name"},
                        p["training"]], sort_keys=True) for p in problems}
    assert len(keys) == len(problems)
    for p in problems[:: len(problems) // 12]:  # a spread of them parse as the server parses
        specs = load_specs(model=p["model"], cluster=p["cluster"], training=p["training"])
        assert specs["cluster"].gpus == 8 * p["cluster"]["nodes"]


def test_distinct_workload_repeats_nothing_until_every_problem_was_sent():
    w = Workloads()
    sent = w.bodies("distinct", 300) + w.bodies("distinct", 276)
    assert len(set(sent)) == 576
    assert w.bodies("seed", 3) == [w.bodies("seed", 1)[0]] * 3
