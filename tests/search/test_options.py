"""SearchOptions: strict, closed choices, checked once at the boundary."""
import pytest

from solver.errors import SpecError
from solver.search.options import SearchOptions
from topology.spec import parse_spec


def test_defaults_set_limit_workers_and_seed():
    o = SearchOptions()
    assert (o.top_k, o.time_limit_s, o.workers, o.seed, o.objective) == (10, 10.0, 2, 0, "step_time")


@pytest.mark.parametrize("bad, field", [
    ({"top_k": 0}, "options.top_k"), ({"objective": "fastest"}, "options.objective"),
    ({"unknown": 1}, "options.unknown"), ({"workers": "2"}, "options.workers"),
    ({"batch_tolerance": 1.5}, "options.batch_tolerance"), ({"zero_stages": [4]}, "options.zero_stages.0"),
])
def test_bad_options_name_the_field(bad, field):
    with pytest.raises(SpecError) as err:
        parse_spec(SearchOptions, bad, "options")
    assert any(p.field == field for p in err.value.problems)


def test_deadline_objective_needs_a_deadline():
    with pytest.raises(SpecError):
        parse_spec(SearchOptions, {"objective": "min_gpus_deadline"}, "options")
    assert SearchOptions(objective="min_gpus_deadline", deadline_s=1e6).gpus_may_vary
