"""The CP-SAT search model: pick one pipeline row and one shard row that agree and fit.

The cost terms (solver.search.terms) come as two tables over the structurally valid rows:
- pipeline rows, key (tp, pp, cp, dp, vpp, micro_batch, sp, recompute, ep, etp): the
  pipeline part of the step time (integer time units) and the activation bytes;
- shard rows, key (tp, pp, cp, dp, sp, zero_stage, micro_batch, ep, etp): the data-parallel
  and optimizer part of the step time and the other memory terms.
(ep, etp: the expert degrees of a MoE model; 1 and rules.DENSE_ETP for a dense one.)
A layout is one row of each. The model has one Boolean per row, exactly one per table,
and for every group (tp, pp, cp, dp, sp, micro_batch, ep, etp) the number of chosen rows in both
tables is equal (marginal consistency: a tight LP link). Memory: a shard row may only be
chosen with a pipeline row of its group whose summed memory (the cost model's own
composition and limit) fits: y_s <= sum of the compatible x_r. The objective is linear
in the row literals: every objective's multiplier (GPUs, steps) is constant within a
group, so GPU-time and run-time stay linear. No products are left for CP-SAT.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable, Sequence

from ortools.sat.python import cp_model

from solver.search.cpsat import RECOMPUTE_NAMES
from solver.search.objective import WallFactor, run_steps
from solver.search.options import SearchOptions
from solver.search.rules import DENSE_ETP
from solver.search.scaling import TIME_UNIT_S, time_int
from solver.specs import LayoutSpec, TrainingSpec

PIPE_KEY = ("tp", "pp", "cp", "dp", "vpp", "micro_batch", "sequence_parallel", "recompute", "ep", "etp")
SHARD_KEY = ("tp", "pp", "cp", "dp", "sequence_parallel", "zero_stage", "micro_batch", "ep", "etp")


def pipe_group(key: tuple) -> tuple:
    """(tp, pp, cp, dp, sp, micro_batch, ep, etp) of a pipeline row."""
    tp, pp, cp, dp, _vpp, mb, sp, _rc, ep, etp = key
    return (tp, pp, cp, dp, sp, mb, ep, etp)


def shard_group(key: tuple) -> tuple:
    """(tp, pp, cp, dp, sp, micro_batch, ep, etp) of a shard row."""
    tp, pp, cp, dp, sp, _zero, mb, ep, etp = key
    return (tp, pp, cp, dp, sp, mb, ep, etp)


@dataclass
class TermRows:
    """The cost tables: what solver.search.terms hands to the search model.

    pipe_units / shard_units: integer time units (TIME_UNIT_S) of the two parts of the
    step time; error_units: largest |pipe + shard - exact step / unit| over layouts.
    fits(pipe_index, shard_index) -> bool: the cost model's memory verdict for a pair;
    memory(pipe_index, shard_index) -> bytes per GPU; pipe_memory / shard_memory: the
    parts of it each row carries (their sum is memory up to float rounding), used to find
    the lightest layout when nothing fits.
    """

    pipe_keys: list[tuple]
    pipe_units: list[int]
    shard_keys: list[tuple]
    shard_units: list[int]
    error_units: float
    fits: Callable[[int, int], bool]
    memory: Callable[[int, int], float]
    pipe_memory: list[float]
    shard_memory: list[float]
    monotone_fit: bool = False  # fits(i, j) holds iff pipe_memory[i] <= a threshold of j
    # Explicit pipeline split of each pipeline row (split_stages; None: busiest-rank model). A
    # key may have several rows, one per split its layouts are assigned (per-stage memory).
    pipe_splits: list | None = None
    _groups: dict | None = None

    def groups(self) -> dict[tuple, tuple[list[int], list[int], dict[int, list[int]]]]:
        """Per group: pipeline rows, shard rows, and for each shard row its fitting pipeline rows."""
        if self._groups is None:
            out: dict[tuple, tuple[list[int], list[int], dict[int, list[int]]]] = {}
            for i, k in enumerate(self.pipe_keys):
                out.setdefault(pipe_group(k), ([], [], {}))[0].append(i)
            for j, k in enumerate(self.shard_keys):
                out.setdefault(shard_group(k), ([], [], {}))[1].append(j)
            for pipes, shards, fit in out.values():
                if self.monotone_fit:
                    self._threshold_fit(pipes, shards, fit)
                else:
                    for j in shards:
                        fit[j] = [i for i in pipes if self.fits(i, j)]
            self._groups = out
        return self._groups

    def _threshold_fit(self, pipes: list[int], shards: list[int], fit: dict[int, list[int]]) -> None:
        """fit[j] = the pipeline rows that fit with j: a prefix in pipe_memory order, its
        length found by bisection with the exact fits(i, j) (same sets as testing each pair)."""
        order = sorted(pipes, key=self.pipe_memory.__getitem__)
        for j in shards:
            lo, hi = 0, len(order)  # order[:lo] fit; order[hi:] do not
            while lo < hi:
                mid = (lo + hi) // 2
                if self.fits(order[mid], j):
                    lo = mid + 1
                else:
                    hi = mid
            fit[j] = order[:lo]


def layout_of(pipe_key: tuple, shard_key: tuple) -> LayoutSpec:
    """The LayoutSpec of a (pipeline row, shard row) pair."""
    tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp = pipe_key
    return LayoutSpec(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, sequence_parallel=bool(sp),
                      zero_stage=shard_key[5], micro_batch=mb, recompute=RECOMPUTE_NAMES[rc],
                      ep=ep, etp=None if etp == DENSE_ETP else etp)


@dataclass(frozen=True)
class _Shape:
    """The (tp, pp, cp, dp) of a row group, as objective.wall_factor_of reads it."""

    tp: int
    pp: int
    cp: int
    dp: int


def _no_failures(shape: object) -> float:
    return 1.0


@dataclass
class Coefficients:
    """Objective coefficients per row (integers) and the rounding bound in those units."""

    pipe: list[int]
    shard: list[int]
    error_units: float
    exact: Callable[[LayoutSpec, float], float]  # (layout, step_time_s) -> exact objective
    deadline: tuple[list[int], list[int], int] | None = None  # run-time rows and limit
    gpu_weight: int | None = None  # min_gpus*: objective = GPUs x gpu_weight + step units

    def step_part(self, value: int) -> int:
        """The step-time part of an objective value (all of it unless GPUs are weighted)."""
        return value % self.gpu_weight if self.gpu_weight else value


def coefficients(rows: TermRows, options: SearchOptions, training: TrainingSpec,
                 factor: WallFactor | None = None) -> Coefficients:
    """The objective of options.objective as per-row coefficients (see objective.py).
    `factor`: wall / work with failures per shape (objective.wall_factor_of), for min_cost
    (constant within a group, so the objective stays linear; default 1: no failures)."""
    kind = options.objective
    if kind == "step_time":
        return Coefficients(rows.pipe_units, rows.shard_units, rows.error_units, lambda lo, t: t / TIME_UNIT_S)
    steps = {g: run_steps(training, LayoutSpec(dp=g[3], micro_batch=g[5]))
             for g in map(shard_group, rows.shard_keys)}
    if kind == "min_cost":
        f = factor or _no_failures
        mult = {g: g[0] * g[1] * g[2] * g[3] * n * f(_Shape(*g[:4])) for g, n in steps.items()}
        # GPU-time in GPU-microseconds can pass int64 on large runs: divide by `div` so the
        # largest objective stays below 2^52. Each coefficient rounds once (<= 0.5 units, two
        # per layout: the +1).
        top = max(mult.values()) * (max(rows.pipe_units) + max(rows.shard_units))
        div = max(1, math.ceil(top / 2**52))
        return Coefficients(
            [round(mult[pipe_group(k)] * u / div) for k, u in zip(rows.pipe_keys, rows.pipe_units, strict=True)],
            [round(mult[shard_group(k)] * u / div) for k, u in zip(rows.shard_keys, rows.shard_units, strict=True)],
            rows.error_units * max(mult.values()) / div + 1.0,
            lambda lo, t: lo.gpus * run_steps(training, lo) * t / TIME_UNIT_S / div * f(lo))
    weight = max(rows.pipe_units) + max(rows.shard_units) + 1  # GPUs first, then step time
    deadline = None
    if kind == "min_gpus_deadline":
        run_pipe = [steps[pipe_group(k)] * u for k, u in zip(rows.pipe_keys, rows.pipe_units, strict=True)]
        run_shard = [steps[shard_group(k)] * u for k, u in zip(rows.shard_keys, rows.shard_units, strict=True)]
        slack = math.ceil(rows.error_units * max(steps.values()))  # relaxed; the evaluator decides
        assert options.deadline_s is not None  # SearchOptions requires it for this objective
        deadline = (run_pipe, run_shard, time_int(options.deadline_s) + slack)
    return Coefficients(
        rows.pipe_units,
        [u + weight * k[0] * k[1] * k[2] * k[3] for k, u in zip(rows.shard_keys, rows.shard_units, strict=True)],
        rows.error_units, lambda lo, t: lo.gpus * weight + t / TIME_UNIT_S, deadline, weight)


class SearchModel:
    """The CP-SAT model over a subset of the rows (all of them, or those a window keeps)."""

    def __init__(self, rows: TermRows, coef: Coefficients, pipe_idx: Sequence[int],
                 shard_idx: Sequence[int], memory_limit: bool = True) -> None:
        self.rows, self.coef = rows, coef
        self.pipe_idx, self.shard_idx = list(pipe_idx), list(shard_idx)
        self.cp = cp_model.CpModel()
        self.x = [self.cp.new_bool_var(f"pipe{i}") for i in self.pipe_idx]
        self.y = [self.cp.new_bool_var(f"shard{j}") for j in self.shard_idx]
        self.cp.add_exactly_one(self.x)
        self.cp.add_exactly_one(self.y)
        self._link(memory_limit)
        # Positions of the chosen rows as two integers, read once per solution (chosen()).
        self.pipe_pos = cp_model.LinearExpr.weighted_sum(self.x, range(len(self.x)))
        self.shard_pos = cp_model.LinearExpr.weighted_sum(self.y, range(len(self.y)))
        self.objective = self.expr(coef.pipe, coef.shard)
        if coef.deadline is not None:
            run_pipe, run_shard, limit = coef.deadline
            self.cp.add(self.expr(run_pipe, run_shard) <= limit)

    def expr(self, pipe_values: Sequence[int], shard_values: Sequence[int]) -> cp_model.LinearExpr:
        """sum of the chosen rows' values (one value per row of the full tables)."""
        return (cp_model.LinearExpr.weighted_sum(self.x, [pipe_values[i] for i in self.pipe_idx])
                + cp_model.LinearExpr.weighted_sum(self.y, [shard_values[j] for j in self.shard_idx]))

    def _link(self, memory_limit: bool) -> None:
        """Rows agree on their group; a shard row needs a compatible (fitting) pipeline row."""
        x = dict(zip(self.pipe_idx, self.x, strict=True))
        y = dict(zip(self.shard_idx, self.y, strict=True))
        for pipes, shards, fit in self.rows.groups().values():
            xs, ys = [x[i] for i in pipes if i in x], [y[j] for j in shards if j in y]
            if not xs and not ys:
                continue
            self.cp.add(sum(xs) == sum(ys))
            if memory_limit:
                for j in shards:
                    if j in y:
                        self.cp.add(y[j] <= sum(x[i] for i in fit[j] if i in x))

    def chosen(self, value: Callable) -> tuple[int, int]:
        """(pipeline row index, shard row index) of a solution (value: solver.value)."""
        return self.pipe_idx[int(value(self.pipe_pos))], self.shard_idx[int(value(self.shard_pos))]

    def layout(self, i: int, j: int) -> LayoutSpec:
        return layout_of(self.rows.pipe_keys[i], self.rows.shard_keys[j])


def row_floors(rows: TermRows, coef: Coefficients) -> tuple[list[float], list[float]]:
    """Per pipeline row and per shard row, a lower bound on the objective of any layout
    holding it: its own coefficient plus the smallest coefficient of the other table's rows
    in its group (inf when that table has no row of the group)."""
    best_pipe: dict[tuple, int] = {}
    best_shard: dict[tuple, int] = {}
    for k, c in zip(rows.pipe_keys, coef.pipe, strict=True):
        g = pipe_group(k)
        best_pipe[g] = min(best_pipe.get(g, c), c)
    for k, c in zip(rows.shard_keys, coef.shard, strict=True):
        g = shard_group(k)
        best_shard[g] = min(best_shard.get(g, c), c)
    return ([c + best_shard.get(pipe_group(k), math.inf) for k, c in zip(rows.pipe_keys, coef.pipe, strict=True)],
            [c + best_pipe.get(shard_group(k), math.inf) for k, c in zip(rows.shard_keys, coef.shard, strict=True)])


def window_rows(rows: TermRows, coef: Coefficients, threshold: int,
                floors: tuple[list[float], list[float]] | None = None) -> tuple[list[int], list[int]]:
    """Rows that can be part of a layout with objective <= threshold: those whose row_floors
    bound (pass `floors` when asking for several thresholds) is within it."""
    pipe_lb, shard_lb = floors or row_floors(rows, coef)
    return ([i for i, v in enumerate(pipe_lb) if v <= threshold],
            [j for j, v in enumerate(shard_lb) if v <= threshold])


def incumbent(rows: TermRows, coef: Coefficients) -> int | None:
    """The objective of the best fitting (pipeline, shard) pair, by direct evaluation.

    An upper bound on the optimum (it is a layout's value), used to drop rows whose lower
    bound exceeds it before CP-SAT runs. None with a deadline constraint (not checked here).
    """
    if coef.deadline is not None:
        return None
    best = None
    pipe = coef.pipe.__getitem__
    for _, shards, fit in rows.groups().values():
        for j in shards:
            if fit[j]:
                v = coef.shard[j] + min(map(pipe, fit[j]))
                best = v if best is None or v < best else best
    return best


def useful_rows(rows: TermRows, coef: Coefficients, memory_limit: bool = True,
                bound: int | None = None) -> tuple[list[int], list[int]]:
    """Rows that can be part of an optimal layout: exact reductions before optimizing.

    With `bound` (an objective some layout reaches), rows that cannot reach it are dropped
    (window_rows). Within a group, a row never chosen with a fitting partner is dropped,
    and so is a row dominated by another row of its group with a coefficient no larger and
    every fitting partner of it (the optimum value is unchanged; the window enumeration
    uses all rows).
    """
    keep_p: set[int] | None = None
    keep_s: set[int] = set()
    if bound is not None:
        kp, ks = window_rows(rows, coef, bound)
        keep_p, keep_s = set(kp), set(ks)
    pipe, shard = [], []
    for pipes, shards, fit in rows.groups().values():
        if keep_p is not None:
            pipes = [i for i in pipes if i in keep_p]
            shards = [j for j in shards if j in keep_s]
            if not pipes or not shards:
                continue
        pset = set(pipes)
        partners: dict[int, set[int]] = {i: set() for i in pipes}
        shard_fit = {j: set(fit[j] if memory_limit else pipes) & pset for j in shards}
        for j in shards:
            for i in shard_fit[j]:
                partners[i].add(j)
        pipe += _front({i: (coef.pipe[i], partners[i]) for i in pipes})
        shard += _front({j: (coef.shard[j], shard_fit[j]) for j in shards})
    return sorted(pipe), sorted(shard)


def _front(cands: dict[int, tuple[int, set]]) -> list[int]:
    """Rows with a partner that no other row dominates (smaller-or-equal cost, superset partners)."""
    order = sorted((c, -len(p), i) for i, (c, p) in cands.items() if p)
    kept: list[int] = []
    for c, _, i in order:
        p = cands[i][1]
        if not any(cands[k][0] <= c and p <= cands[k][1] for k in kept):
            kept.append(i)
    return kept
