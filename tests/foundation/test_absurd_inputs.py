"""Absurd but well-typed inputs get a clear error naming the field, never an overflow.

Found by review: a GPU of 1e-12 TFLOP/s or a link of 1e-300 GB/s used to overflow the
solver's integer coefficients (a pybind cast error, an OverflowError, an HTTP 500).
"""
import pytest

from solver.errors import PlannerError, SpecError
from solver.presets import load_model
from solver.search.scaling import MAX_SOLVER_INT, time_int
from topology.catalog import load_cluster

SEED = {"name": "x", "nodes": 64, "gpus_per_node": 8,
        "gpu": {"name": "g", "memory_gb": 80, "peak_tflops": 1000, "hbm_gb_s": 3350},
        "intra_node": {"bandwidth_gb_s": 450, "latency_us": 3},
        "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}}


@pytest.mark.parametrize("path,value", [
    (("gpu", "peak_tflops"), 1e-12), (("gpu", "memory_gb"), 1e-9), (("gpu", "hbm_gb_s"), 1e-6),
    (("intra_node", "bandwidth_gb_s"), 1e-300), (("inter_node", "bandwidth_gb_s"), 1e-9),
])
def test_vanishing_hardware_figures_are_rejected_with_the_field(path, value):
    data = {**SEED, path[0]: {**SEED[path[0]], path[1]: value}}
    with pytest.raises(SpecError) as e:
        load_cluster(data)
    assert [p.field for p in e.value.problems] == ["cluster." + ".".join(path)]


def test_explicit_graph_links_need_a_real_bandwidth():
    graph = {"kind": "graph", "vertices": [{"id": "g0", "type": "gpu", "node": 0},
                                          {"id": "sw", "type": "nvswitch"}],
             "links": [{"a": "g0", "b": "sw", "bandwidth_gb_s": 1e-300, "latency_us": 1}]}
    with pytest.raises(SpecError) as e:
        load_cluster({**SEED, "nodes": 1, "gpus_per_node": 1, "topology": graph})
    assert any(p.field.endswith("bandwidth_gb_s") for p in e.value.problems)


def test_too_many_layers_is_rejected():
    with pytest.raises(SpecError) as e:
        load_model({**load_model("seed-70b").model_dump(), "layers": 10_000})
    assert [p.field for p in e.value.problems] == ["model.layers"]


def test_solver_range_overflow_is_a_planner_error():
    # 2^53 microseconds is 285 years: beyond it the solver cannot hold a coefficient.
    assert time_int(3600.0) == 3_600_000_000
    with pytest.raises(PlannerError):
        time_int(MAX_SOLVER_INT * 1e-6 * 2)
    with pytest.raises(PlannerError):
        time_int(float("inf"))
