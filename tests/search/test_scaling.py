"""Float -> integer scaling for CP-SAT: the resolution is what solver.search.scaling says."""
import math

from hypothesis import given
from hypothesis import strategies as st

from solver.search import scaling as S


@given(st.floats(0, 1e4, allow_nan=False))
def test_time_rounding_error_is_at_most_half_a_unit(seconds):
    assert abs(S.time_s(S.time_int(seconds)) - seconds) <= S.resolution(S.TIME_UNIT_S) + 1e-12 * seconds


@given(st.floats(1.0, 1e13, allow_nan=False))
def test_memory_floor_and_ceil_bracket_the_value(bytes_):
    lo, hi = S.memory_floor(bytes_), S.memory_ceil(bytes_)
    assert lo * S.MEMORY_UNIT_BYTES <= bytes_ * (1 + 1e-15) and hi * S.MEMORY_UNIT_BYTES >= bytes_ * (1 - 1e-15)
    assert hi - lo <= 1


def test_resolution_values():
    # 1 us time unit -> 0.5 us worst-case error; 1 kB memory unit.
    assert S.resolution(S.TIME_UNIT_S) == 0.5e-6
    assert S.MEMORY_UNIT_BYTES == 1e3
    assert S.time_int(1.0) == 1_000_000 and S.time_int(2.5e-6) in (2, 3)
    assert math.isclose(S.time_s(7_279_116), 7.279116)
