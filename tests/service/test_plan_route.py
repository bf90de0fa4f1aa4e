"""The bar on the plan route: rank 1 of `trainplan plan` / POST /v1/plans (MoE first/last splits on,
both rank orders on an explicit fabric) exports and runs as exported at the memory the plan states
(benchmarks/audit_plan.py; the grid is benchmarks/audit_rank1.py --plan), and the two routes search
with the same options. The HTTP plan against the CLI plan end to end: tests/service/test_routes.py
test_plan_layouts_equal_cli."""
from __future__ import annotations

import time

import pytest

from benchmarks.audit_plan import plan_audit, route_options
from benchmarks.audit_rank1 import FRAMEWORKS, Problem, _spec, plan_problems


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_plan_rank1_runs_as_exported_at_the_stated_memory(framework):
    """The quick plan slice: DeepSeek-V2-Lite's 27 layers on 16 H800 in FP32 state (Megatron's
    rank 1 is a first/last split, PP8 [2, 4 x 6, 1]) and Llama 3 70B on a rail-optimized fabric
    (both rank orders searched; tp-cp-pp-dp wins). DeepSpeed refuses DeepSeek-V2-Lite up front
    (MLA) naming the field and its source."""
    rows = [plan_audit(p, framework, "http") for p in plan_problems(quick=True)]
    assert [r for r in rows if r["mismatches"]] == []
    exported = [r for r in rows if r["outcome"] == "exported"]
    assert len(exported) >= (2 if framework != "deepspeed" else 1), rows
    if framework == "megatron-core":
        assert exported[0]["layout"]["pipeline_layers"] == [2, 4, 4, 4, 4, 4, 4, 1]
        assert exported[1]["layout"]["rank_order"] == "tp-cp-pp-dp"


def test_cli_and_http_plans_search_with_the_same_options():
    """Both routes hand the plan's search the same options on a flat and an explicit fabric (the
    server's caps aside: workers and top_k at their defaults are under them). The HTTP plan used
    to search one rank order with the server's 2 s default for /v1/layouts."""
    from solver.search.options import SearchOptions
    from topology.spec import parse_spec

    for p in (Problem("llama3-8b", "dgx-h100-superpod", 4, 8192, 256),
              Problem("llama3-8b", "dgx-a100-superpod-rail-optimized", 20, 8192, 256),
              Problem("llama3-8b", "gb200-nvl72-superpod", 18, 8192, 256)):
        _m, cluster, _t = _spec(p, "megatron-core")
        cli = parse_spec(SearchOptions, route_options("cli", cluster, {}), "options")
        http = route_options("http", cluster, {})
        assert http == cli
        assert len(http.rank_orders) == (1 if cluster.topology is None else 2)
    stated = {"rank_orders": ["tp-cp-dp-pp"], "time_limit_s": 3}  # a request's own options win
    assert route_options("http", cluster, stated).rank_orders == ("tp-cp-dp-pp",)
    assert route_options("http", cluster, stated).time_limit_s == 3


def test_rank_orders_share_the_solver_budget_not_the_tables_time(monkeypatch):
    """time_limit_s is the CP-SAT solves' budget, the tables not counted (SearchOptions). With
    two rank orders the second order's budget was what the first left of the wall clock, tables
    included: a first order whose tables took longer than the limit (a loaded machine: 7-17 s
    for Mixtral 8x7B on 256 H100) left 1 ms, so the second order timed out and was dropped (or
    its window of tied layouts cut short), and rank 1 depended on the machine's load. Here the
    search's clock (solver.search api, driver, cpsat) jumps 60 s while each order's tables are
    built, against a 5 s limit: both orders are still searched to OPTIMAL."""
    from types import SimpleNamespace

    import solver.search.api as api
    from solver.search import search_layouts

    jumped = [0.0]
    clock = SimpleNamespace(perf_counter=lambda: time.perf_counter() + jumped[0])
    for module in ("api", "driver", "cpsat"):
        monkeypatch.setattr(f"solver.search.{module}.time", clock)
    fast = api.default_rows(prune=True)

    def slow(lm):
        jumped[0] += 60.0
        return fast(lm)

    model, cluster, training = _spec(Problem("llama3-70b", "dgx-a100-superpod-rail-optimized", 20, 4096, 512),
                                     "megatron-core")
    res = search_layouts(model, cluster, training, {"rank_orders": ["tp-cp-dp-pp", "tp-cp-pp-dp"],
                                                    "time_limit_s": 5}, rows_builder=slow, explain=False)
    assert res.status == "OPTIMAL" and set(res.phases) == {"tp-cp-dp-pp", "tp-cp-pp-dp"}
    assert res.layouts[0].layout.rank_order == "tp-cp-pp-dp"


def test_a_moe_scaling_grid_row_is_the_layout_it_was_costed_as():
    """Stage 2's grid rows (the layouts the plan asks to run at 8 GPUs, 8 nodes, a quarter and
    all) listed TP, PP, VPP, DP, CP, ZeRO, micro-batch and recompute but not EP / ETP, the rank
    order or the split: Mixtral 8x7B's row on 16 A100 (TP2 PP4 CP2 ETP4, searched) read as EP 1
    ETP none, another layout at another memory. Now each row carries every LayoutSpec field and
    the layout it gives is estimated at the row's memory and step time."""
    from solver.cost.estimate import estimate_layout
    from solver.plan import layout_fields
    from solver.plan_stages import _grid_point
    from solver.specs import LayoutSpec

    model, cluster, training = _spec(Problem("hf:mixtral-8x7b", "dgx-a100-superpod", 2, 4096, 128), "megatron-core")
    row = _grid_point(model, cluster, training, {}, 16)
    layout = LayoutSpec.model_validate(layout_fields(row), strict=False)
    assert layout.ep * (layout.etp or 1) > 1  # the row is a MoE layout with expert parallelism
    est = estimate_layout(model, cluster, training, layout)
    assert est.memory_per_gpu_bytes["total"] == row["memory_per_gpu_bytes"]
    assert est.step_time_s == row["step_time_s"]


def test_an_infeasible_fp8_plan_is_explained_not_refused_for_a_gpu_never_named():
    """Found by the plan audit (--plan http --random 30 --seed 6: Llama 3 405B, 128k tokens, MXFP8 on
    4,096 B200): when nothing fits, the plan's search explains it (explain_infeasible), and the
    'bigger GPU' fix tried every catalog GPU with more memory; MXFP8 needs compute capability
    >= 10.0 (Transformer Engine quantization.py L149-185 d0067d0), which the MI300X does not
    state, so that candidate raised a SpecError naming cluster.gpu.compute_capability of
    'mi300x-192gb' and `trainplan plan` / `search` exited 2 (HTTP 422) instead of 3 with the
    explanation. Here on 8 B200 (the lightest layout needs 920.8 GB per GPU): the GB200 and both
    MI300-series GPUs are passed over and no bigger-GPU fix is found."""
    from solver.search.explain import fix_bigger_gpu
    from solver.search.options import SearchOptions

    model, cluster, training = _spec(Problem("llama3-405b", "hgx-b200-cluster", 1, 8192, 128, fp8=True),
                                     "megatron-core")
    assert training.compute_precision == "mxfp8"
    assert fix_bigger_gpu(model, cluster, training, SearchOptions()) is None


def test_the_markdown_plan_prints_rank_1s_launch_line():
    """`trainplan plan` (Markdown) prints the launch line of `launch` or the framework's refusal."""
    from service.render_md import _launch

    text = "\n".join(_launch({"launch": {"framework": "deepspeed", "launcher": "deepspeed --num_nodes 2 train.py"}}))
    assert "## Launch of the recommended layout (deepspeed)" in text and "deepspeed --num_nodes 2 train.py" in text
    refused = "\n".join(_launch({"launch": {"framework": "torchtitan", "refused": "torchtitan: no MLA"}}))
    assert "torchtitan refuses it: torchtitan: no MLA" in refused
    assert _launch({}) == []
