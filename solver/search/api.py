"""Public entry: search_layouts(model, cluster, training, options) -> SearchResult."""
from __future__ import annotations

import time
from typing import Any, Callable

from solver.errors import InfeasibleError, SolverTimeoutError
from solver.search.cpsat import LayoutModel
from solver.search.driver import Evaluator, optimize, ranked_window
from solver.search.exhaustive import evaluate
from solver.search.model import TermRows, coefficients
from solver.search.options import SearchOptions
from solver.search.result import RankedLayout, SearchResult
from solver.search.rules import accumulation
from solver.search.scaling import TIME_UNIT_S
from solver.specs import ModelSpec, TrainingSpec
from topology.spec import ClusterSpec, parse_spec

# Builds the cost tables for a LayoutModel (default: solver.search.terms.term_rows).
RowsBuilder = Callable[[LayoutModel], TermRows]


def default_rows(cost_options: Any = None) -> RowsBuilder:
    """The cost model's terms (solver.cost.step) tabulated for CP-SAT."""
    from solver.search.terms import term_rows

    return lambda lm: term_rows(lm, cost_options)


def default_evaluator(model, cluster, training, options, cost_options=None) -> Evaluator:
    """The cost model's verdict on one layout (solver.search.exhaustive.evaluate)."""
    return lambda layout: evaluate(model, cluster, training, options, layout, cost_options)


def search_layouts(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                   options: SearchOptions | dict | None = None, *, cost_options: Any = None,
                   rows_builder: RowsBuilder | None = None, evaluator: Evaluator | None = None,
                   explain: bool = True) -> SearchResult:
    """Ranked distinct layouts, best first, each re-evaluated by the cost model.

    Raises: InfeasibleError (message + explanation with the smallest fixes) when no layout
    fits; SolverTimeoutError when the time limit passes before any layout is found;
    SpecError for bad options (or training.tokens missing for run-level objectives).
    """
    options = parse_spec(SearchOptions, options or {}, "options")
    t0 = time.perf_counter()
    deadline = t0 + options.time_limit_s
    rows_builder = rows_builder or default_rows(cost_options)
    evaluator = evaluator or default_evaluator(model, cluster, training, options, cost_options)
    rows = rows_builder(LayoutModel(model, cluster, training, options))
    if not rows.pipe_keys or not rows.shard_keys:
        _raise_infeasible(model, cluster, training, options, cost_options, explain)
    phases = {"tables_s": time.perf_counter() - t0}
    coef = coefficients(rows, options, training)
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
    return _result(training, options, win, best, coef, seconds, phases)


def _raise_infeasible(model, cluster, training, options, cost_options, explain: bool) -> None:
    explanation: dict = {}
    if explain:
        from solver.search.explain import explain_infeasible

        explanation = explain_infeasible(model, cluster, training, options, cost_options)
    raise InfeasibleError(explanation.get("reason", "no layout fits"), explanation)


def _result(training, options: SearchOptions, win, best, coef, seconds: float, phases) -> SearchResult:
    top = win.good[: options.top_k]
    proven = best.status == "OPTIMAL" and win.complete
    best_exact = coef.exact(top[0].layout, top[0].estimate.step_time_s)
    bound = best_exact if proven else (best.bound - coef.error_units)
    gap = 0.0 if proven else max(0.0, (best_exact - bound) / max(abs(best_exact), 1e-12))
    layouts = [RankedLayout(i + 1, e.layout, e.estimate, e.objective_units,
                            accumulation(training, e.layout.dp, e.layout.micro_batch))
               for i, e in enumerate(top)]
    notes = [f"objective in units of {TIME_UNIT_S} s", f"{len(win.seen)} layouts re-evaluated"]
    return SearchResult(layouts, "OPTIMAL" if proven else "FEASIBLE", seconds, options.objective,
                        bound, gap, win.solves + 1, len(win.seen), None, notes, phases)
