"""The search loop: optimize, enumerate a rounding-aware window, re-rank with the evaluator.

1. Minimize the integer objective (time limit, workers and seed on every solve) over the rows
   that survive exact reductions: rows whose lower bound exceeds an incumbent (the best
   fitting pair, evaluated directly) and rows dominated within their group are dropped.
2. Enumerate every layout whose integer objective is <= T (a model over only the rows that
   can reach T). Each layout's integer objective is within E units of its exact objective
   (E: the rounding bound of the cost tables), so once the K-th best exact objective among
   the enumerated layouts is below T - E, no layout outside the window can enter the top K
   or tie with it. Otherwise T grows and the window is enumerated again.
3. Re-evaluate the enumerated layouts with the cost model (the specification), drop any it
   rejects (the deadline check is relaxed by E), sort by the exact objective. The window
   also covers every layout tied with the best (solver.search.ties: up to the best plus the
   model's resolution), so the caller can rank the tied ones simplest first.
A timeout anywhere downgrades OPTIMAL to FEASIBLE; a timeout before any solution is UNKNOWN
(SolverTimeoutError), never INFEASIBLE.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from collections.abc import Callable

from ortools.sat.python import cp_model

from solver.search.cpsat import make_solver
from solver.search.exhaustive import Evaluated, layout_key
from solver.search.model import (
    Coefficients, SearchModel, TermRows, incumbent, row_floors, useful_rows, window_rows,
)
from solver.search.options import SearchOptions
from solver.search.ties import tie_slack_units
from solver.specs import LayoutSpec

Evaluator = Callable[[LayoutSpec], "Evaluated | None"]
# First window above the optimum, as a fraction of it (grown by doubling).
FIRST_WINDOW = 0.002


@dataclass
class Optimum:
    status: str  # CP-SAT status name
    value: int | None
    bound: float | None


def optimize(rows: TermRows, coef: Coefficients, options: SearchOptions, deadline: float) -> Optimum:
    """Minimize the objective over all rows."""
    sm = SearchModel(rows, coef, *useful_rows(rows, coef, bound=incumbent(rows, coef)))
    sm.cp.minimize(sm.objective)
    solver = make_solver(options, deadline)
    name = solver.status_name(solver.solve(sm.cp))
    if name in ("OPTIMAL", "FEASIBLE"):
        return Optimum(name, round(solver.objective_value), solver.best_objective_bound)
    return Optimum(name, None, None)


class _Collector(cp_model.CpSolverSolutionCallback):
    """Collects the (pipeline row, shard row) pairs of enumerated solutions."""

    def __init__(self, sm: SearchModel, seen: set) -> None:
        super().__init__()
        self.sm, self.seen = sm, seen
        self.new: list[tuple[int, int]] = []

    def on_solution_callback(self) -> None:
        pair = self.sm.chosen(self.value)
        if pair not in self.seen:
            self.seen.add(pair)
            self.new.append(pair)


@dataclass
class Window:
    """State of the ranked enumeration."""

    threshold: int
    floors: tuple | None = None  # model.row_floors of the tables (the same for every threshold)
    seen: set = field(default_factory=set)
    good: list = field(default_factory=list)
    complete: bool = True
    solves: int = 0


def enumerate_window(rows: TermRows, coef: Coefficients, win: Window, options: SearchOptions,
                     deadline: float) -> list[LayoutSpec]:
    """The layouts of new (pipeline, shard) row pairs with objective <= win.threshold."""
    pipe, shard = window_rows(rows, coef, win.threshold, win.floors)
    if not pipe or not shard:
        return []
    sm = SearchModel(rows, coef, pipe, shard)
    sm.cp.add(sm.objective <= win.threshold)
    solver = make_solver(options, deadline, workers=1)  # enumeration runs on one worker
    solver.parameters.enumerate_all_solutions = True
    collector = _Collector(sm, win.seen)
    status = solver.status_name(solver.solve(sm.cp, collector))
    win.solves += 1
    if status not in ("OPTIMAL", "INFEASIBLE"):  # enumeration did not finish
        win.complete = False
    return [(sm.layout(i, j)) for i, j in collector.new]


def tie_limit(coef: Coefficients, fastest: Evaluated, objective: str) -> float:
    """The largest objective (in the tables' units) tied with the fastest layout
    (solver.search.ties: best + TIE_RESOLUTION x the best objective, or x its step time when
    GPUs are weighted first)."""
    exact = coef.exact(fastest.layout, fastest.estimate.step_time_s)
    return exact + tie_slack_units(objective, exact, fastest.estimate.step_time_s)


def ranked_window(rows: TermRows, coef: Coefficients, best: int, options: SearchOptions,
                  deadline: float, evaluate: Evaluator) -> Window:
    """The top-K layouts by the evaluator's exact objective (see module docstring)."""
    err = coef.error_units + 1.0  # +1 unit covers float summation-order differences
    hi = sum(max(v) for v in (coef.pipe, coef.shard))
    first = math.ceil(FIRST_WINDOW * abs(coef.step_part(best)))  # relative to the step time
    win = Window(threshold=best + max(math.ceil(2 * err), first), floors=row_floors(rows, coef))
    k = options.top_k
    while True:
        for layout in enumerate_window(rows, coef, win, options, deadline):
            ev = evaluate(layout)
            if ev is not None:
                win.good.append(ev)
        win.good.sort(key=lambda e: (e.objective_units, layout_key(e.layout)))
        if not win.complete or win.threshold >= hi:
            return win
        kth = coef.exact(win.good[k - 1].layout, win.good[k - 1].estimate.step_time_s) \
            if len(win.good) >= k else None
        if kth is not None:  # the K-th best and every layout tied with the best must be inside
            kth = max(kth, tie_limit(coef, win.good[0], options.objective))
        if kth is not None and kth < win.threshold - err:
            return win
        nxt = math.ceil(kth + err) + 1 if kth is not None else best + 2 * (win.threshold - best) + 1
        win.threshold = min(hi, max(nxt, win.threshold + 1))
        if time.perf_counter() >= deadline:
            win.complete = False
            return win
