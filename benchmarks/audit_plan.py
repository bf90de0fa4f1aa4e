"""The audit of benchmarks/audit_rank1.py on the plan route: rank 1 of `trainplan plan` and of
POST /v1/plans, which search with the plan's own defaults (solver.layouts.default_plan_options:
both rank orders on an explicit fabric; solver.search.api.plan_options: MoE first/last splits
on), and the launch both return for it (`launch`, service.launchers.plan_launch: the plan's
layout entry, `pipeline_layers` included, and its `pipeline_split` through the framework's
launcher), through the same checks as the search's rank 1 (tests/service/framework_semantics.py).

Two checks the search audit has no need of: the plan's entry must state the memory and step
time the cost model gives the layout it exports (an entry that lost its split or its rank order
would be exported as another layout than the one costed), and each framework's rules.

    .venv/bin/python -m benchmarks.audit_rank1 --plan cli [--quick | --random N --seed S]
    .venv/bin/python -m benchmarks.audit_rank1 --plan http
"""
from __future__ import annotations

import json
from typing import Any

# Relative agreement the plan's stated memory and step time must have with the estimate of the
# exported layout (both come from the same cost model; only float summation order may differ).
_REL_TOL = 1e-6


def route_options(route: str, cluster: Any, stated: dict[str, Any]) -> Any:
    """The search options a plan on `route` searches with, `stated` the request's options
    (`trainplan plan` has no flags for them: an HTTP body's `options` are applied on both
    routes, so a stated option is audited the same way on each).

    cli: what `trainplan plan` hands build_plan (solver.layouts.default_plan_options);
    http: what the solve worker's plan job hands it (service.routers.solving.plan_search_options,
    under the default server settings)."""
    if route == "cli":
        from solver.layouts import default_plan_options

        return default_plan_options(cluster, **stated)
    from service.routers.solving import plan_search_options
    from service.settings import Settings

    return plan_search_options(json.loads(json.dumps(stated)), cluster, Settings())[0]


def plan_rank1(model: Any, cluster: Any, training: Any, options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(search summary, rank-1 entry) of the plan's ranking (solver.plan.build_plan's
    layout section, solver.layouts.searched_layouts), as JSON values the route returns."""
    from service.routers.errors import jsonable
    from solver.layouts import searched_layouts

    summary, layouts = searched_layouts(model, cluster, training, options)
    return summary, jsonable(layouts[0])


def _stated_agrees(entry: dict[str, Any], estimate: dict[str, Any]) -> list[str]:
    """Where the plan's entry states another memory or step time than the exported layout's."""
    out = []
    for name, stated, exact in (("memory_per_gpu_bytes.total", entry["memory_per_gpu_bytes"]["total"],
                                 estimate["memory_per_gpu_bytes"]["total"]),
                                ("step_time_s", entry["step_time_s"], estimate["step_time_s"])):
        if abs(stated - exact) > _REL_TOL * abs(exact):
            out.append(f"the plan states {name} {stated:.6g}; the layout it exports is estimated at {exact:.6g}")
    return out


def plan_audit(p: Any, framework: str, route: str = "cli") -> dict[str, Any]:
    """One problem on one framework through the plan route: the outcome and every mismatch."""
    from benchmarks.audit_rank1 import _spec, search_failure
    from service.launchers import export_layout, framework_rules, plan_launch, rank_placement
    from solver.cost.estimate import estimate_layout
    from solver.errors import InfeasibleError, SpecError
    from solver.plan import layout_fields
    from solver.specs import LayoutSpec
    from tests.service.framework_semantics import export_mismatches

    out: dict[str, Any] = {"problem": p.label, "framework": framework, "route": route}
    try:
        model, cluster, training = _spec(p, framework)
        summary, best = plan_rank1(model, cluster, training, route_options(route, cluster, dict(p.search)))
    except (SpecError, InfeasibleError) as exc:
        return search_failure(out, exc)
    layout = LayoutSpec.model_validate(layout_fields(best), strict=False)
    split = best.get("pipeline_split")
    out.update(layout={k: v for k, v in layout.model_dump(mode="json").items() if v is not None},
               memory_gb=round(best["memory_per_gpu_bytes"]["total"] / 1e9, 2), status=summary["status"])
    rules = framework_rules(framework, model, training, layout, split)
    if rules:
        return {**out, "outcome": "rank1_refused_by_export", "mismatches": [f"{f}: {r}" for f, r in rules]}
    try:  # the plan's own `launch` (what both routes return), then the launch of its layout alone
        launch = plan_launch(model, cluster, training, best)
        again = export_layout(framework, model, training, layout, rank_placement(cluster, layout), split)
    except (SpecError, ValueError) as exc:
        return {**out, "outcome": "export_failed", "mismatches": [f"export raised: {exc}"[:400]]}
    if "refused" in launch:
        return {**out, "outcome": "rank1_refused_by_export", "mismatches": [launch["refused"][:400]]}
    if {k: v for k, v in launch.items() if k not in ("framework", "rank", "placement")} != again:
        return {**out, "outcome": "exported", "mismatches": ["the plan's launch is not its layout's export"]}
    estimate = estimate_layout(model, cluster, training, layout).as_dict()
    found = _stated_agrees(best, estimate)
    found += export_mismatches(framework, model, cluster, training, layout, split, estimate, launch)
    return {**out, "outcome": "exported", "mismatches": found}
