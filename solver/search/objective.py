"""The float objective of a re-evaluated layout (the specification the CP-SAT model mirrors).

Every objective is expressed in time units (solver.search.scaling.TIME_UNIT_S) so the
CP-SAT integer objective and the float value differ only by rounding:
- step_time: the step time.
- min_cost: GPU-time of the run WITH failures, GPUs x steps x step time x F, where F =
  wall / work at the optimal checkpoint interval (solver.cost.risk.optimal_wall_factor:
  checkpoint stalls, lost work and restarts; goodput = 1/F). F depends only on the GPU
  count and the (tp, pp, cp, dp) shape (checkpoint writers, load replicas), constant within
  a CP-SAT row group, so the objective stays linear in the row literals. Multiply by the
  price per GPU-hour / 3600 for money (a constant factor: it does not change the rank).
- min_gpus: GPUs first, then step time (GPUs x GPU_WEIGHT + step time).
- min_gpus_deadline: as min_gpus, among layouts whose run (steps x step time) ends by the
  deadline.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

from solver.cost.accounting import batch_plan, parameter_counts
from solver.cost.checkpoint import checkpoint_cost
from solver.cost.risk import failure_model, optimal_wall_factor
from solver.errors import SpecError
from solver.search.options import SearchOptions
from solver.search.scaling import TIME_UNIT_S
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

# (layout-like with tp, pp, cp, dp) -> wall / work with failures
WallFactor = Callable[[Any], float]

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


def wall_factor_of(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> WallFactor:
    """wall / work with failures at the optimal checkpoint interval for a layout shape (reads
    tp, pp, cp, dp), cached per shape (solver.cost.checkpoint, solver.cost.risk)."""
    n = parameter_counts(model, training.seq_len).total
    cache: dict[tuple[int, int, int, int], float] = {}

    def factor(shape: Any) -> float:
        key = (shape.tp, shape.pp, shape.cp, shape.dp)
        if key not in cache:
            lay = LayoutSpec(tp=shape.tp, pp=shape.pp, cp=shape.cp, dp=shape.dp)
            ckpt = checkpoint_cost(n, training.precision, cluster, lay, training.framework,
                                   training.async_checkpoint)
            cache[key] = optimal_wall_factor(failure_model(cluster, ckpt, lay.gpus))
        return cache[key]

    return factor


def run_outcome(training: TrainingSpec, layout: LayoutSpec, step_time_s: float,
                factor: float) -> dict[str, Any] | None:
    """A layout's run at its predicted step time, with failures (wall = steps x step x F):
    steps, days, GPU-hours, goodput (1/F) and cost when priced; None without training.tokens."""
    if training.tokens is None:
        return None
    steps = run_steps(training, layout)
    wall = steps * step_time_s * factor
    hours = wall * layout.gpus / 3600
    price = training.price_per_gpu_hour
    return {"steps": steps, "days": wall / 86_400, "gpu_hours": hours, "goodput": 1 / factor,
            "cost": None if price is None else hours * price, "currency": training.currency,
            "price_per_gpu_hour": price}


def objective_units(options: SearchOptions, training: TrainingSpec, layout: LayoutShape,
                    step_time_s: float, factor: float = 1.0) -> float:
    """The objective of one layout in time units (float; lower is better). `factor`: the
    layout's wall / work with failures (wall_factor_of), used by min_cost."""
    step_u = step_time_s / TIME_UNIT_S
    if options.objective == "step_time":
        return step_u
    if options.objective == "min_cost":
        return layout.gpus * run_steps(training, layout) * step_u * factor
    return layout.gpus * GPU_WEIGHT + step_u


def meets_deadline(options: SearchOptions, training: TrainingSpec, layout: LayoutSpec,
                   step_time_s: float) -> bool:
    """Whether the run ends by the deadline (always true without a deadline objective)."""
    if options.objective != "min_gpus_deadline" or options.deadline_s is None:
        return True
    return run_steps(training, layout) * step_time_s <= options.deadline_s
