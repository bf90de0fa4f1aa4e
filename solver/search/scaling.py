"""All float -> integer scaling for CP-SAT, in one place.

CP-SAT works on integers. Times are expressed in TIME_UNIT_S (1 microsecond) and
memory in MEMORY_UNIT_BYTES (1 kB = 1e3 bytes). `to_int` rounds to the nearest unit,
so one scaled value is off by at most half a unit (`resolution`, tested in
tests/search/test_scaling.py). Memory is rounded down (`memory_floor`) only where the
explanation minimizes it (solver.search.explain.lightest_layout, whose layout the cost
model then re-evaluates); the search's fit test compares unrounded bytes (solver.search.terms).

Units: TIME_UNIT_S seconds per integer step; MEMORY_UNIT_BYTES bytes per integer step.
"""
from __future__ import annotations

import math

TIME_UNIT_S = 1e-6
MEMORY_UNIT_BYTES = 1e3
# Scaled magnitudes beyond this cannot be CP-SAT coefficients (int64, with room for sums).
MAX_SOLVER_INT = 2**53


def _checked(units: float) -> float:
    """Raise a PlannerError (not an overflow) when an input is so extreme that a predicted
    time or memory falls outside the solver's integer range."""
    if not abs(units) < MAX_SOLVER_INT:  # also catches inf and nan
        from solver.errors import PlannerError

        raise PlannerError(f"a predicted step time or memory ({units:.3g} solver units) is beyond the "
                           "solver's range: check the model and GPU sizes (e.g. gpu.peak_tflops, "
                           "link bandwidths) for absurd values")
    return units


def to_int(value: float, unit: float) -> int:
    """Nearest integer number of `unit`s (error <= unit / 2). Raises: PlannerError when out of range."""
    return round(_checked(value / unit))


def floor_int(value: float, unit: float) -> int:
    """Largest integer number of `unit`s not above `value` (value - unit < result * unit <= value)."""
    return math.floor(_checked(value / unit))


def ceil_int(value: float, unit: float) -> int:
    """Smallest integer number of `unit`s not below `value`."""
    return math.ceil(_checked(value / unit))


def resolution(unit: float) -> float:
    """Largest error of one `to_int` value, in the float's units."""
    return unit / 2


def time_int(seconds: float) -> int:
    """Seconds -> integer time units (nearest)."""
    return to_int(seconds, TIME_UNIT_S)


def time_s(units: int) -> float:
    """Integer time units -> seconds."""
    return units * TIME_UNIT_S


def memory_floor(bytes_: float) -> int:
    """Bytes -> integer memory units, rounded down (feasible-set superset)."""
    return floor_int(bytes_, MEMORY_UNIT_BYTES)


def memory_ceil(bytes_: float) -> int:
    """Bytes -> integer memory units, rounded up (capacity side when the sum is floored)."""
    return ceil_int(bytes_, MEMORY_UNIT_BYTES)
