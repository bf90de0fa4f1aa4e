"""The search loop: optimize, enumerate a rounding-aware window, re-rank with the evaluator.

1. Minimize the integer objective (time limit, workers, seed set on every solve).
2. Enumerate every layout whose integer objective is <= T. Each layout's integer objective
   is within E units of its exact objective (E: the rounding bound from the cost terms), so
   once the K-th best exact objective among the enumerated layouts is below T - E, no
   layout outside the window can enter the top K (nor tie with it). Otherwise T grows.
3. Re-evaluate the enumerated layouts with the cost model (the specification), drop those
   that do not fit (the integer memory check is a relaxation), sort by the exact objective.
A timeout anywhere downgrades OPTIMAL to FEASIBLE; a timeout before any solution is UNKNOWN
(SolverTimeoutError), never INFEASIBLE.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from ortools.sat.python import cp_model

from solver.search.assemble import Objective
from solver.search.cpsat import FIELDS, LayoutModel, make_solver
from solver.search.exhaustive import Evaluated, layout_key
from solver.search.options import SearchOptions

Evaluator = Callable[..., "Evaluated | None"]
# First window above the optimum, as a fraction of it (grown by doubling).
FIRST_WINDOW = 0.01


class _Collector(cp_model.CpSolverSolutionCallback):
    """Collects the distinct field assignments of enumerated solutions."""

    def __init__(self, lm: LayoutModel, seen: set) -> None:
        super().__init__()
        self.lm, self.seen, self.new = lm, seen, []

    def on_solution_callback(self) -> None:
        key = tuple(self.value(self.lm.var[f]) for f in FIELDS)
        if key not in self.seen:
            self.seen.add(key)
            self.new.append(key)


@dataclass
class Window:
    """State of the ranked enumeration."""

    threshold: int
    seen: set = field(default_factory=set)
    good: list = field(default_factory=list)
    complete: bool = True
    solves: int = 0


def optimize(lm: LayoutModel, obj: Objective, options: SearchOptions, deadline: float):
    """Minimize the objective. Returns (status name, objective value, bound, solver)."""
    lm.cp.minimize(obj.var)
    solver = make_solver(options, deadline)
    status = solver.solve(lm.cp)
    name = solver.status_name(status)
    if name in ("OPTIMAL", "FEASIBLE"):
        return name, int(solver.objective_value), solver.best_objective_bound, solver
    return name, None, None, solver


def enumerate_window(lm: LayoutModel, obj: Objective, win: Window, options: SearchOptions,
                     deadline: float) -> list[tuple]:
    """Distinct new field assignments with objective <= win.threshold."""
    model = lm.cp.clone()
    model.clear_objective()
    model.add(model.get_int_var_from_proto_index(obj.var.index) <= win.threshold)
    solver = make_solver(options, deadline, workers=1)  # enumeration runs on one worker
    solver.parameters.enumerate_all_solutions = True
    collector = _Collector(lm, win.seen)
    status = solver.solve(model, collector)
    win.solves += 1
    if solver.status_name(status) != "OPTIMAL":  # enumeration did not finish
        win.complete = False
    return collector.new


def ranked_window(lm: LayoutModel, obj: Objective, best: int, options: SearchOptions,
                  deadline: float, evaluate: Evaluator) -> Window:
    """The top-K layouts by the evaluator's exact objective (see module docstring)."""
    err = obj.error_units + 1.0  # +1 unit covers float summation-order differences
    hi = max(lm.values[obj.var.name])
    win = Window(threshold=best + max(math.ceil(2 * err), math.ceil(FIRST_WINDOW * abs(best))))
    while True:
        for key in enumerate_window(lm, obj, win, options, deadline):
            ev = evaluate(lm.layout(dict(zip(FIELDS, key))))
            if ev is not None:
                win.good.append(ev)
        win.good.sort(key=lambda e: (e.objective_units, layout_key(e.layout)))
        k = options.top_k
        if not win.complete or win.threshold >= hi:
            return win
        if len(win.good) >= k and win.good[k - 1].objective_units < win.threshold - err:
            return win
        if len(win.good) >= k:
            nxt = math.ceil(win.good[k - 1].objective_units + err) + 1
        else:
            nxt = best + 2 * (win.threshold - best) + 1
        win.threshold = min(hi, max(nxt, win.threshold + 1))
        if time.perf_counter() >= deadline:
            win.complete = False
            return win
