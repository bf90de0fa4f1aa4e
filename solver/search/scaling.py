"""All float -> integer scaling for CP-SAT, in one place.

CP-SAT works on integers. Times are expressed in TIME_UNIT_S (1 microsecond) and
memory in MEMORY_UNIT_BYTES (1 kB = 1e3 bytes). `to_int` rounds to the nearest unit,
so one scaled value is off by at most half a unit (`resolution`, tested in
tests/search/test_scaling.py). `floor_int` is used where CP-SAT must keep a superset
of the evaluator's feasible set (memory <= capacity): the evaluator's float `fits`
then removes the few layouts the rounding let through.

Units: TIME_UNIT_S seconds per integer step; MEMORY_UNIT_BYTES bytes per integer step.
"""
from __future__ import annotations

import math

TIME_UNIT_S = 1e-6
MEMORY_UNIT_BYTES = 1e3
# Largest magnitude we let a scaled value reach (CP-SAT integers are int64; products of
# two scaled values must stay below 2^62).
MAX_SCALED = 2**31


def to_int(value: float, unit: float) -> int:
    """Nearest integer number of `unit`s (error <= unit / 2)."""
    return int(round(value / unit))


def floor_int(value: float, unit: float) -> int:
    """Largest integer number of `unit`s not above `value` (value - unit < result * unit <= value)."""
    return int(math.floor(value / unit))


def ceil_int(value: float, unit: float) -> int:
    """Smallest integer number of `unit`s not below `value`."""
    return int(math.ceil(value / unit))


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
