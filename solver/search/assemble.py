"""Assemble the CP-SAT objective from the cost terms, for each search objective.

The cost-term builder (solver.search.terms) adds the step-time composition and the memory
constraint to a LayoutModel and returns the step time as an integer variable together with
a bound on its rounding error. This module turns it into the objective variable that
mirrors solver.search.objective.objective_units, with the error bound carried along.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ortools.sat.python import cp_model

from solver.search.cpsat import LayoutModel
from solver.search.objective import GPU_WEIGHT, run_steps
from solver.search.scaling import time_int
from solver.specs import LayoutSpec


@dataclass(frozen=True)
class StepTerms:
    """Integer step time and per-GPU memory of the busiest rank, as built by the cost terms.

    step: step time in time units; error_units: largest |step - exact step / unit| over
    layouts. memory: per-GPU memory in memory units, each term rounded down (so it never
    exceeds the exact value); usable_memory: the largest memory the cost model accepts as
    fitting, rounded down to units (exact <= usable implies memory <= usable_memory).
    """

    step: cp_model.IntVar
    error_units: float
    memory: cp_model.IntVar
    usable_memory: int


class CostTerms(Protocol):
    """Adds cost tables to a LayoutModel and returns the step time and memory variables."""

    def build(self, lm: LayoutModel) -> StepTerms: ...


def add_memory_limit(lm: LayoutModel, terms: StepTerms) -> None:
    """Memory per GPU within the usable capacity (a relaxation of the evaluator's `fits`)."""
    lm.cp.add(terms.memory <= terms.usable_memory)


@dataclass(frozen=True)
class Objective:
    """The objective variable and the bound on |objective - objective_units(layout)|."""

    var: cp_model.IntVar
    error_units: float


def _steps_table(lm: LayoutModel) -> cp_model.IntVar:
    """Optimizer steps of the run, a function of (dp, micro_batch)."""
    def steps(dp: int, micro_batch: int) -> int:
        return run_steps(lm.training, LayoutSpec(dp=dp, micro_batch=micro_batch))
    return lm.table("run_steps", ("dp", "micro_batch"), steps)


def assemble(lm: LayoutModel, terms: StepTerms) -> Objective:
    """The objective variable for lm.options.objective (see solver.search.objective)."""
    kind = lm.options.objective
    if kind == "step_time":
        return Objective(terms.step, terms.error_units)
    steps = _steps_table(lm) if kind != "min_gpus" else None
    if kind == "min_cost":
        gpu_steps = lm.product("gpu_steps", lm.var["gpus"], steps)
        cost = lm.product("gpu_time", gpu_steps, terms.step)
        return Objective(cost, terms.error_units * max(lm.values["gpu_steps"]))
    if kind == "min_gpus_deadline":
        # The run (steps x step time) ends by the deadline. The integer check is relaxed by
        # the rounding error so no layout the evaluator accepts is cut; the evaluator
        # removes the few extra ones.
        run = lm.product("run_time", steps, terms.step)
        slack = int(terms.error_units * max(lm.values["run_steps"])) + 1
        lm.cp.add(run <= time_int(lm.options.deadline_s) + slack)
    hi = max(lm.values["gpus"]) * GPU_WEIGHT + max(lm.values[terms.step.name])
    obj = lm.cp.new_int_var(0, hi, "objective")
    lm.values["objective"] = (0, hi)
    lm.cp.add(obj == lm.var["gpus"] * GPU_WEIGHT + terms.step)
    return Objective(obj, terms.error_units)
