"""Thin calls into solver/: search options under the server's limits, search, plan, estimate.

Imports of solver.search / solver.plan happen inside the functions (no import-time work,
and the app still starts for /healthz while a solver module is missing).
"""
from __future__ import annotations

import json
from typing import Any

from service.settings import Settings
from topology.errors import Problem, SpecError


def search_options(raw: dict[str, Any] | None, settings: Settings,
                   default_time_limit_s: float | None = None) -> tuple[Any, dict[str, Any]]:
    """Validate options and apply the server's caps; returns (SearchOptions, limits applied).

    time_limit_s defaults to `default_time_limit_s` (else settings.default_time_limit_s), capped at
    settings.max_time_limit_s, workers at settings.max_solver_workers (the response's
    `limits` says so); an unset top_k defaults to at most settings.max_top_k, an asked one
    above it is a 422. Raises: SpecError.
    """
    from solver.search.options import SearchOptions
    from topology.spec import parse_spec

    raw = dict(raw or {})
    opts = parse_spec(SearchOptions, json.dumps(raw), "options")
    if "top_k" not in raw and opts.top_k > settings.max_top_k:  # the default obeys the cap
        opts = opts.model_copy(update={"top_k": settings.max_top_k})
    if opts.top_k > settings.max_top_k:
        raise SpecError("options.top_k too large",
                        [Problem("options.top_k", f"at most {settings.max_top_k} on this server")])
    default = settings.default_time_limit_s if default_time_limit_s is None else default_time_limit_s
    asked = opts.time_limit_s if "time_limit_s" in raw else default
    applied = min(asked, settings.max_time_limit_s)
    workers = min(opts.workers, settings.max_solver_workers)
    opts = opts.model_copy(update={"time_limit_s": applied, "workers": workers})
    return opts, {"time_limit_s": applied, "time_limit_cap_s": settings.max_time_limit_s,
                  "time_limit_capped": asked > settings.max_time_limit_s, "workers": workers}


def plan_search_options(raw: dict[str, Any] | None, cluster: Any,
                        settings: Settings) -> tuple[Any, dict[str, Any]]:
    """The search options of POST /v1/plans: those `trainplan plan` searches with, under the
    server's caps (search_options), so the same job gets the same rank 1 over HTTP and the CLI
    (tests/service/test_plan_route.py): both rank orders on an explicit fabric unless the
    request states rank_orders (solver.layouts.default_plan_options), and the CLI's solver time
    limit (SearchOptions' default) unless it states one, not the server's shorter default for
    /v1/layouts: a plan's window of tied layouts cut short by the limit ranks another layout
    first. The request's deadline (settings.max_time_limit_s) still bounds the whole plan. The
    plan turns MoE splits on in solver.search.api.plan_options. Raises: SpecError."""
    from solver.layouts import default_plan_options
    from solver.search.options import SearchOptions

    cli_limit_s = SearchOptions.model_fields["time_limit_s"].default
    return search_options(default_plan_options(cluster, **(raw or {})), settings, cli_limit_s)


def run_search(model, cluster, training, options, profile: Any = None,
               domains: Any = None) -> dict[str, Any]:
    """Ranked layouts (solver.search.search_layouts), its cost tables from the worker's
    cache (service.tables) when this problem was solved before; `domains`: the search
    domains admission computed (service.admission.admit_search). Raises: InfeasibleError,
    SpecError, SolverTimeoutError."""
    try:
        from solver.search import search_layouts
    except ImportError:  # package without its re-export
        from solver.search.api import search_layouts

    from service.tables import TABLES  # a worker's tables of the problems it last solved

    cost_options = None if profile is None else profile.options
    result = search_layouts(model, cluster, training, options, cost_options=cost_options,
                            rows_builder=TABLES.builder(cost_options), domains=domains)
    result.step_band = None if profile is None else profile.step_band  # a calibrated profile's band
    return result.as_dict()


def run_plan(model, cluster, training, options, profile: Any = None) -> dict[str, Any]:
    """The plan of `trainplan plan` (solver.plan.build_plan), its layout ranking from the
    same search (solver.layouts.searched_layouts) under this request's options and caps.

    Raises: InfeasibleError, SpecError, SolverTimeoutError.
    """
    cost = {} if profile is None else {"cost_options": profile.options, "step_band": profile.step_band}
    return launched_plan(model, cluster, training, options, **cost)


def launched_plan(model, cluster, training, options: Any = None, **cost: Any) -> dict[str, Any]:
    """solver.plan.build_plan with `launch`, the launch of its rank 1 in training.framework
    (service.launchers.plan_launch): the plan of `trainplan plan` and POST /v1/plans."""
    from service.launchers import plan_launch
    from solver.plan import build_plan

    plan = build_plan(model, cluster, training, search_options=options, **cost)
    plan["launch"] = plan_launch(model, cluster, training, plan["layouts"][0])
    return plan


def run_estimate(model, cluster, training, layout, profile: Any = None) -> dict[str, Any]:
    """The estimate of `trainplan estimate` (solver.layouts.estimate): accounting plus the
    cost model's prediction. Raises: SpecError when the layout does not fit model or cluster.
    """
    from solver.layouts import estimate

    if profile is None:
        return estimate(model, cluster, training, layout)
    return estimate(model, cluster, training, layout, profile.options, profile.step_band)


REPORT_LAYOUTS = 6  # layouts charted in a plan's report


def report_data(plan: dict[str, Any], model, cluster) -> dict[str, Any]:
    """Chart inputs for a plan's report: per-GPU memory by component and step-time breakdown
    of the top layouts and of the ladder's choice, as the plan's search estimated them
    (solver.search.api.plan_layouts gives every layout both; nothing is estimated again)."""
    from solver.plan import layout_fields

    rows = [_chart_row(f"#{i}", {**layout_fields(entry), "framework": entry.get("framework")}, entry)
            for i, entry in enumerate((plan.get("layouts") or [])[:REPORT_LAYOUTS], 1)]
    choice = plan.get("ladder_choice") or {}
    if choice.get("memory_per_gpu_bytes") and choice.get("time_breakdown_s"):
        rows.append(_chart_row("ladder", choice["layout"], choice))
    return {"capacity_bytes": cluster.gpu.memory_bytes, "gpu": cluster.gpu.name,
            "model": model.name, "cluster": cluster.name, "layouts": rows}


def _chart_row(label: str, layout: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    return {"label": label, "layout": layout, "step_time_s": data.get("step_time_s"),
            "mfu": data.get("mfu"), "fits": data.get("fits"),
            "memory_per_gpu_bytes": data.get("memory_per_gpu_bytes") or {},
            "time_breakdown_s": data.get("time_breakdown_s") or {}}
