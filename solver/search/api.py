"""Public entry: search_layouts(model, cluster, training, options) -> SearchResult."""
from __future__ import annotations

import time
from typing import Any, NoReturn
from collections.abc import Callable

from solver.cost.bands import mark_layouts
from solver.errors import InfeasibleError, Problem, SolverTimeoutError, SpecError
from solver.frameworks.models import refuse_model
from solver.search.cpsat import LayoutModel
from solver.search.driver import Evaluator, optimize, ranked_window
from solver.search.exhaustive import evaluator
from solver.search.model import TermRows, coefficients
from solver.search.objective import run_outcome, wall_factor_of
from solver.search.options import SearchOptions
from solver.search.result import RankedLayout, SearchResult, assign_ranks, merge_ranked, relative_gap
from solver.search.ties import TIE_RESOLUTION
from solver.search.rules import accumulation, pipeline_split
from solver.search.scaling import TIME_UNIT_S
from solver.search.term_share import shared_terms
from solver.specs import ModelSpec, TrainingSpec
from topology.progress import note
from topology.spec import ClusterSpec, parse_spec

# Builds the cost tables for a LayoutModel (default: solver.search.terms.term_rows).
RowsBuilder = Callable[[LayoutModel], TermRows]


def default_rows(cost_options: Any = None, prune: bool = False) -> RowsBuilder:
    """The cost model's terms (solver.cost.step) tabulated for CP-SAT (prune: only the row
    groups that can hold a top-K layout, solver.search.prune)."""
    from solver.search.terms import term_rows

    return lambda lm: term_rows(lm, cost_options, prune=prune)


def default_evaluator(model, cluster, training, options, cost_options=None) -> Evaluator:
    """The cost model's verdict on one layout (solver.search.exhaustive.evaluate), one cost
    context for the whole search."""
    return evaluator(model, cluster, training, options, cost_options)


def search_layouts(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                   options: SearchOptions | dict | None = None, *, cost_options: Any = None,
                   rows_builder: RowsBuilder | None = None, evaluator: Evaluator | None = None,
                   explain: bool = True, domains: Any = None) -> SearchResult:
    """Ranked distinct layouts, best first (_search_layouts), each with its run at the
    predicted step time with failures (objective.run_outcome: days, GPU-hours, cost).
    `domains`: space.domains(model, cluster, training, options) when the caller already
    computed them (the service's admission), so they are not computed again."""
    import dataclasses

    res = _search_layouts(model, cluster, training, options, cost_options=cost_options,
                          rows_builder=rows_builder, evaluator=evaluator, explain=explain,
                          domains=domains)
    factor = wall_factor_of(model, cluster, training)
    res.layouts = [dataclasses.replace(r, run=run_outcome(training, r.layout, r.estimate.step_time_s,
                                                           factor(r.layout)))
                   for r in res.layouts]
    return res


def _search_layouts(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                    options: SearchOptions | dict | None = None, *, cost_options: Any = None,
                    rows_builder: RowsBuilder | None = None, evaluator: Evaluator | None = None,
                    explain: bool = True, domains: Any = None) -> SearchResult:
    """Ranked distinct layouts, best first, each re-evaluated by the cost model.

    When no layout can use all the GPUs (options.gpus, default all available) and the count
    is fixed, the largest usable counts are searched instead (solver.search.fallback) and the
    result says so (fallback, gpus_available, gpus_used). With options.split_stages each
    layout carries its pipeline split (LayoutSpec.pipeline_layers, stage by stage costs; a MoE
    model: first/last splits where its layers do not divide, solver.search.moe_split).

    Raises: InfeasibleError (message + explanation with the smallest fixes) when no layout
    fits; SolverTimeoutError when the time limit passes before any layout is found;
    SpecError for bad options (or training.tokens missing for run-level objectives).
    """
    options = parse_spec(SearchOptions, options or {}, "options")
    # A model the framework's exported configuration cannot express is refused before any
    # layout is ranked (solver.frameworks.models; the exports apply the same rules).
    refuse_model(training.framework, model, training)
    options = placeable_orders(training.framework, options)
    if options.gpus is not None and options.gpus > cluster.available_gpus:
        reason = f"{options.gpus} is more than the cluster's {cluster.available_gpus} available GPUs"
        raise SpecError(f"options.gpus: {reason}", [Problem("options.gpus", reason)])
    if explain:  # the outer search of a call (explain=False marks inner ones)
        note("searching layouts on %s GPUs (time limit %g s)", f"{options.gpus or cluster.available_gpus:,}",
             options.time_limit_s)
    if len(options.rank_orders) > 1:
        return _search_orders(model, cluster, training, options, cost_options=cost_options,
                              rows_builder=rows_builder, evaluator=evaluator, explain=explain)
    t0 = time.perf_counter()
    rows_builder = rows_builder or default_rows(cost_options, prune=True)

    def make_evaluator(o: SearchOptions) -> Evaluator:
        return evaluator or default_evaluator(model, cluster, training, o, cost_options)

    rows = rows_builder(LayoutModel(model, cluster, training, options, dom=domains))
    if not rows.pipe_keys or not rows.shard_keys:
        if not options.gpus_may_vary:  # no layout uses all the GPUs: try the largest usable counts
            from solver.search.fallback import search_fewer_gpus

            return search_fewer_gpus(model, cluster, training, options, t0,
                                     lambda o: _search(model, cluster, training, o, rows_builder,
                                                       make_evaluator(o), explain=False),
                                     lambda: _raise_infeasible(model, cluster, training, options,
                                                               cost_options, explain))
        _raise_infeasible(model, cluster, training, options, cost_options, explain)
    return _search(model, cluster, training, options, rows_builder, make_evaluator(options),
                   explain, cost_options, rows, t0)


def _search_orders(model, cluster, training, options: SearchOptions, **kw) -> SearchResult:
    """Each placement (options.rank_orders) searched exactly on its own, merged by objective;
    the orders' tables share the terms no rank order changes (solver.search.term_share).

    OPTIMAL means optimal over every listed order. Raises: InfeasibleError when no order has
    a fitting layout (the first order's explanation); SolverTimeoutError likewise.
    """
    with shared_terms():
        return _merged_orders(model, cluster, training, options, **kw)


def _merged_orders(model, cluster, training, options: SearchOptions, **kw) -> SearchResult:
    """_search_orders' searches and their merge."""
    import dataclasses

    t0 = time.perf_counter()
    results: list[SearchResult] = []
    searched: list[str] = []  # the orders of `results` (an order that raised has none)
    errors: list[InfeasibleError | SolverTimeoutError] = []
    solved_s = 0.0  # solver time spent by the orders before (their tables not counted)
    for order in options.rank_orders:
        left_s = max(1e-3, options.time_limit_s - solved_s)
        one = options.model_copy(update={"rank_orders": (order,), "time_limit_s": left_s})
        start = time.perf_counter()
        try:
            results.append(_search_layouts(model, cluster, training, one, **kw))
            searched.append(order)
            solved_s += _solve_s(results[-1], time.perf_counter() - start)
        except (InfeasibleError, SolverTimeoutError) as exc:
            errors.append(exc)
            solved_s += left_s if isinstance(exc, SolverTimeoutError) else 0.0
    if not results:
        raise errors[0]
    layouts, status, bound, gap = merge_ranked(  # a timed-out order leaves the merge incomplete
        results, options.top_k, complete=all(isinstance(e, InfeasibleError) for e in errors))
    first = results[0]
    notes = [f"placements searched: {', '.join(options.rank_orders)}"] + first.notes
    return dataclasses.replace(
        first, layouts=layouts, status=status,
        seconds=time.perf_counter() - t0, bound_units=bound, gap=gap,
        solves=sum(r.solves for r in results), evaluated=sum(r.evaluated for r in results),
        notes=notes, phases={o: r.phases for o, r in zip(searched, results, strict=True)},
        candidates=[c for r in results for c in (r.candidates or r.layouts)])


def _solve_s(res: SearchResult, wall_s: float) -> float:
    """Seconds of an order's search spent under its time limit: all but its tables (the
    limit is the solves' budget, SearchOptions.time_limit_s); its whole wall time when it
    reports no table phase (a fallback over GPU counts)."""
    tables_s = (res.phases or {}).get("tables_s")
    return wall_s - tables_s if isinstance(tables_s, float) else wall_s


def _search(model, cluster, training, options: SearchOptions, rows_builder: RowsBuilder,
            evaluator: Evaluator, explain: bool, cost_options: Any = None, rows: TermRows | None = None,
            t0: float | None = None) -> SearchResult:
    """The search on one problem whose tables (rows) may already be built."""
    t0 = time.perf_counter() if t0 is None else t0
    if rows is None:
        rows = rows_builder(LayoutModel(model, cluster, training, options))
    if not rows.pipe_keys or not rows.shard_keys:
        _raise_infeasible(model, cluster, training, options, cost_options, explain)
    phases: dict[str, Any] = {"tables_s": time.perf_counter() - t0}
    deadline = time.perf_counter() + options.time_limit_s  # the solver's budget, after the tables
    coef = coefficients(rows, options, training, wall_factor_of(model, cluster, training))
    best = optimize(rows, coef, options, deadline)
    phases["optimize_s"] = time.perf_counter() - t0 - phases["tables_s"]
    if best.value is None and best.status != "INFEASIBLE":
        raise SolverTimeoutError(f"no layout found within {options.time_limit_s} s (status {best.status})")
    win = ranked_window(rows, coef, best.value, options, deadline, evaluator) if best.value is not None else None
    if win is None or not win.good:
        if win is not None and not win.complete:
            raise SolverTimeoutError(f"no fitting layout confirmed within {options.time_limit_s} s")
        _raise_infeasible(model, cluster, training, options, cost_options, explain)
    seconds = time.perf_counter() - t0
    phases["window_s"] = seconds - phases["tables_s"] - phases["optimize_s"]
    phases["rows"] = {"pipeline": len(rows.pipe_keys), "shard": len(rows.shard_keys)}
    res = _result(training, options, win, best, coef, seconds, phases, model.layers)
    res.gpus_available = cluster.available_gpus
    return res


def _raise_infeasible(model, cluster, training, options, cost_options, explain: bool) -> NoReturn:
    explanation: dict = {}
    if explain:
        from solver.search.explain import explain_infeasible

        note("no layout fits: looking for the smallest change that makes one fit")
        explanation = explain_infeasible(model, cluster, training, options, cost_options)
    raise InfeasibleError(explanation.get("reason", "no layout fits"), explanation)


def _result(training, options: SearchOptions, win, best, coef, seconds: float, phases,
            layers: int) -> SearchResult:
    fastest = win.good[0]  # win.good is in objective order
    proven = best.status == "OPTIMAL" and win.complete
    best_exact = coef.exact(fastest.layout, fastest.estimate.step_time_s)
    bound = best_exact if proven else (best.bound - coef.error_units)
    gap = relative_gap(best_exact, bound)
    cands = [RankedLayout(0, e.layout, e.estimate, e.objective_units,
                          accumulation(training, e.layout.dp, e.layout.micro_batch), _split(layers, e.layout))
             for e in win.good]
    layouts = assign_ranks(cands, options.objective, options.top_k)
    notes = [f"objective in units of {TIME_UNIT_S} s", f"{len(win.seen)} layouts re-evaluated",
             f"layouts within {TIE_RESOLUTION:.0%} of the best objective are tied and ranked simplest first"]
    return SearchResult(layouts, "OPTIMAL" if proven else "FEASIBLE", seconds, options.objective,
                        bound, gap, win.solves + 1, len(win.seen), None, notes, phases, candidates=cands)


def _split(layers: int, layout) -> tuple[int, ...]:
    """Layers per pipeline rank: the layout's explicit split, else rules.pipeline_split."""
    if layout.pipeline_layers is not None:
        from solver.cost.step import rank_layers

        return tuple(rank_layers(layout.pipeline_layers, layout.pp))
    return pipeline_split(layers, layout.pp, layout.vpp)


def plan_layouts(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                 options: SearchOptions | dict | None = None, cost_options: Any = None,
                 step_band: Any = None) -> tuple[dict, list[dict]]:
    """The layout section for solver.plan.build_plan(rank_layouts=plan_layouts).

    Returns (search summary, layouts best first); each layout dict carries the layout
    fields, gpus, step_time_s, mfu, hfu, tokens_per_s, fits, time_breakdown_s,
    memory_per_gpu_bytes (by component, with model_state and total), memory_headroom_bytes
    (usable minus total) and memory_free_bytes (capacity minus the predicted total), with the
    80% error band of each timing (`*_low`/`*_high`) and within_band_of_best (solver.cost.bands).
    `cost_options` and `step_band` come from a calibrated profile (solver.cost.profile).
    Raises: InfeasibleError (with the explanation) when nothing fits.
    """
    res = search_layouts(model, cluster, training, plan_options(options), cost_options=cost_options)
    res.step_band = step_band
    layouts = []
    for r in res.layouts:
        d = r.as_dict()
        d.pop("estimate")
        d["memory_per_gpu_bytes"] = dict(r.estimate.memory_per_gpu_bytes)
        d["hfu"], d["tokens_per_s"] = r.estimate.hfu, r.estimate.tokens_per_s
        d["time_breakdown_s"] = dict(r.estimate.time_breakdown_s)
        d["memory_headroom_bytes"] = r.estimate.memory_margin.headroom_bytes
        d["memory_free_bytes"] = cluster.gpu.memory_bytes - d["memory_per_gpu_bytes"]["total"]
        layouts.append(d)
    summary = {"method": "CP-SAT search, exact for the cost model", **res.as_dict()["search"]}
    return summary, mark_layouts(layouts, res.step_band)  # *_low/*_high, within_band_of_best


def plan_options(options: SearchOptions | dict | None) -> SearchOptions:
    """A plan's search options: the caller's, with moe_splits on unless they state it (a MoE
    model's first/last pipeline splits are searched by default in plans, where the latency of
    a few seconds is acceptable; solver.search.moe_split). Raises: SpecError for bad options."""
    parsed = parse_spec(SearchOptions, options or {}, "options")
    if "moe_splits" in parsed.model_fields_set:
        return parsed
    return parsed.model_copy(update={"moe_splits": True})


def layout_rank(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, layout,
                options: SearchOptions | dict | None = None, cost_options: Any = None,
                best_step_time_s: float | None = None, estimate: Any = None) -> dict:
    """Where one layout (e.g. the seed's TP8 + ZeRO-1) ranks among all fitting layouts.

    Counts the fitting layouts whose tabulated step-time objective is below the layout's
    (exact within the tables' 1 us rounding: `rank` is a range when layouts lie within it).
    Returns rank_min/rank_max (1 = best), fitting layout count, its estimate and the gap to
    the best layout; a caller that already searched passes `best_step_time_s` and saves a
    second search, one that already estimated the layout passes `estimate` (its
    LayoutEstimate under the same cost options). Raises: SpecError when the layout does not
    fit the model or cluster.
    """
    from solver.cost.estimate import estimate_layout

    from solver.search.terms import STEP_ERROR_UNITS

    options = parse_spec(SearchOptions, options or {}, "options")
    est = estimate or estimate_layout(model, cluster, training, layout, cost_options)
    lm = LayoutModel(model, cluster, training, options)
    within_s = None
    if options.objective == "step_time":  # only groups that can reach the layout's step time
        within_s = est.step_time_s + (STEP_ERROR_UNITS + 2.0) * TIME_UNIT_S
    with shared_terms():  # the two tables below share their memory terms
        return _layout_rank(lm, layout, est, options, cost_options, within_s, best_step_time_s)


def _layout_rank(lm: LayoutModel, layout, est, options: SearchOptions, cost_options: Any,
                 within_s: float | None, best_step_time_s: float | None) -> dict:
    """layout_rank's counts from its tables (step time within `within_s`; memory only)."""
    from solver.search.terms import term_rows

    model, cluster, training = lm.spec, lm.cluster, lm.training
    rows = term_rows(lm, cost_options, within_s=within_s)
    coef = coefficients(rows, options, training, wall_factor_of(model, cluster, training))
    mine = coef.exact(layout, est.step_time_s)
    err = coef.error_units + 1.0
    below = near = fitting = 0
    for _pipes, shards, fit in rows.groups().values():
        for j in shards:
            for i in fit[j]:
                v = coef.pipe[i] + coef.shard[j]
                fitting += 1
                below += v < mine - err
                near += mine - err <= v <= mine + err
    if within_s is not None:  # the fitting count over every group, from the memory-only tables
        fitting = sum(len(fit[j]) for _p, shards, fit in term_rows(lm, cost_options, with_time=False)
                      .groups().values() for j in shards)
    if best_step_time_s is None:
        best_step_time_s = search_layouts(model, cluster, training, options.model_copy(update={"top_k": 1}),
                                          cost_options=cost_options).layouts[0].estimate.step_time_s
    return {"rank_min": below + 1, "rank_max": below + max(near, 1), "fitting_layouts": fitting,
            "fits": est.fits, "step_time_s": est.step_time_s, "mfu": est.mfu, **est.mfu_fields(),
            "best_step_time_s": best_step_time_s,
            "slower_than_best": est.step_time_s / best_step_time_s - 1.0}


def placeable_orders(framework: str, options: SearchOptions) -> SearchOptions:
    """options.rank_orders less 'tp-cp-pp-dp' where the framework always places pipeline stages
    outermost (Capabilities.pp_inside_dp, cited; at pp 1 both orders are one placement).
    Raises: SpecError naming options.rank_orders when no listed order remains."""
    from solver.frameworks import load_framework
    from solver.frameworks.capability import PP_INSIDE_DP

    fact = load_framework(framework).capabilities.pp_inside_dp
    if fact.value or PP_INSIDE_DP not in options.rank_orders:
        return options
    orders = tuple(o for o in options.rank_orders if o != PP_INSIDE_DP)
    if not orders:
        src = fact.sources[0]
        reason = (f"{framework} places pipeline stages outermost (rank order tp-cp-dp-pp), never "
                  f"{PP_INSIDE_DP} ({src.repository} {src.path})")
        raise SpecError(f"options.rank_orders: {reason}", [Problem("options.rank_orders", reason)])
    return options.model_copy(update={"rank_orders": orders})
