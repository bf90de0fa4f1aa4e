"""Public entry: search_layouts(model, cluster, training, options) -> SearchResult."""
from __future__ import annotations

import time
from typing import Any

from solver.errors import InfeasibleError, SolverTimeoutError
from solver.search.assemble import CostTerms, add_memory_limit, assemble
from solver.search.cpsat import LayoutModel
from solver.search.driver import Evaluator, optimize, ranked_window
from solver.search.exhaustive import evaluate
from solver.search.options import SearchOptions
from solver.search.result import RankedLayout, SearchResult
from solver.search.rules import accumulation
from solver.search.scaling import TIME_UNIT_S
from solver.specs import ModelSpec, TrainingSpec
from topology.spec import ClusterSpec, parse_spec


def default_terms(cost_options: Any = None) -> CostTerms:
    """The cost model's terms (solver.cost.step) tabulated for CP-SAT."""
    from solver.search.terms import StepCostTerms

    return StepCostTerms(cost_options)


def default_evaluator(model, cluster, training, options, cost_options=None) -> Evaluator:
    """The cost model's verdict on one layout (solver.search.exhaustive.evaluate)."""
    return lambda layout: evaluate(model, cluster, training, options, layout, cost_options)


def build(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, options: SearchOptions,
          terms: CostTerms, explain: bool = False, memory_limit: bool = True):
    """A LayoutModel with its cost terms and objective. Returns (lm, step terms, objective)."""
    lm = LayoutModel(model, cluster, training, options, explain=explain)
    st = terms.build(lm)
    if memory_limit:
        add_memory_limit(lm, st)
    return lm, st, assemble(lm, st)


def search_layouts(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                   options: SearchOptions | dict | None = None, *, cost_options: Any = None,
                   terms: CostTerms | None = None, evaluator: Evaluator | None = None,
                   explain: bool = True) -> SearchResult:
    """Ranked distinct layouts, best first, each re-evaluated by the cost model.

    Raises: InfeasibleError (message + explanation with the smallest fixes) when no layout
    fits; SolverTimeoutError when the time limit passes before any layout is found.
    """
    options = parse_spec(SearchOptions, options or {}, "options")
    t0 = time.perf_counter()
    deadline = t0 + options.time_limit_s
    terms = terms or default_terms(cost_options)
    evaluator = evaluator or default_evaluator(model, cluster, training, options, cost_options)
    lm, _, obj = build(model, cluster, training, options, terms)
    status, best, bound, _ = optimize(lm, obj, options, deadline)
    if status in ("UNKNOWN", "MODEL_INVALID") and best is None:
        raise SolverTimeoutError(f"no layout found within {options.time_limit_s} s (status {status})")
    win = ranked_window(lm, obj, best, options, deadline, evaluator) if best is not None else None
    if win is None or not win.good:
        if win is not None and not win.complete:
            raise SolverTimeoutError(f"no fitting layout confirmed within {options.time_limit_s} s")
        _raise_infeasible(model, cluster, training, options, cost_options, explain)
    return _result(training, options, win, status, bound, time.perf_counter() - t0)


def _raise_infeasible(model, cluster, training, options, cost_options, explain: bool) -> None:
    explanation: dict = {}
    if explain:
        from solver.search.explain import explain_infeasible

        explanation = explain_infeasible(model, cluster, training, options, cost_options)
    raise InfeasibleError(explanation.get("reason", "no layout fits"), explanation)


def _result(training, options: SearchOptions, win, status: str, bound, seconds: float) -> SearchResult:
    top = win.good[: options.top_k]
    proven = status == "OPTIMAL" and win.complete
    best_units = top[0].objective_units
    bound_units = best_units if proven else bound
    gap = 0.0 if proven else max(0.0, (best_units - bound) / max(abs(best_units), 1e-12))
    layouts = [RankedLayout(i + 1, e.layout, e.estimate, e.objective_units,
                            accumulation(training, e.layout.dp, e.layout.micro_batch),
                            getattr(e.estimate, "pipeline_split", None))
               for i, e in enumerate(top)]
    notes = [f"objective in units of {TIME_UNIT_S} s"]
    return SearchResult(layouts, "OPTIMAL" if proven else "FEASIBLE", seconds, options.objective,
                        bound_units, gap, win.solves + 1, len(win.seen), None, notes)
