"""The float objective of a re-evaluated layout (the specification the CP-SAT model mirrors).

Every objective is expressed in time units (solver.search.scaling.TIME_UNIT_S) so the
CP-SAT integer objective and the float value differ only by rounding:
- step_time: the step time.
- min_cost: GPU-time of the run, GPUs x steps x step time (multiply by the price per
  GPU-hour / 3600 for money; the price is a constant factor, so it does not change the rank).
- min_gpus: GPUs first, then step time (GPUs x GPU_WEIGHT + step time).
- min_gpus_deadline: as min_gpus, among layouts whose run (steps x step time) ends by the
  deadline.
"""
from __future__ import annotations

import math
from typing import Protocol

from solver.cost.accounting import batch_plan
from solver.errors import SpecError
from solver.search.options import SearchOptions
from solver.search.scaling import TIME_UNIT_S
from solver.specs import LayoutSpec, TrainingSpec

# Weight of one GPU in the min_gpus_deadline objective, in time units: larger than any
# step time we scale (2^36 us = 19 hours), so GPUs always dominate the rank, and small
# enough that 10 million GPUs x GPU_WEIGHT stays inside int64.
GPU_WEIGHT = 2**36


class LayoutShape(Protocol):
    """What the objective reads of a layout: a LayoutSpec, or a row's shape (search.prune)."""

    @property
    def gpus(self) -> int: ...
    @property
    def dp(self) -> int: ...
    @property
    def micro_batch(self) -> int: ...


def run_steps(training: TrainingSpec, layout: LayoutShape) -> int:
    """Optimizer steps for the run. Raises: SpecError when training.tokens is missing."""
    if training.tokens is None:
        raise SpecError("training.tokens: needed for the min_cost and min_gpus_deadline objectives")
    return math.ceil(training.tokens / batch_plan(training, layout.dp, layout.micro_batch).tokens_per_step)


def objective_units(options: SearchOptions, training: TrainingSpec, layout: LayoutShape,
                    step_time_s: float) -> float:
    """The objective of one layout in time units (float; lower is better)."""
    step_u = step_time_s / TIME_UNIT_S
    if options.objective == "step_time":
        return step_u
    if options.objective == "min_cost":
        return layout.gpus * run_steps(training, layout) * step_u
    return layout.gpus * GPU_WEIGHT + step_u


def meets_deadline(options: SearchOptions, training: TrainingSpec, layout: LayoutSpec,
                   step_time_s: float) -> bool:
    """Whether the run ends by the deadline (always true without a deadline objective)."""
    if options.objective != "min_gpus_deadline" or options.deadline_s is None:
        return True
    return run_steps(training, layout) * step_time_s <= options.deadline_s
