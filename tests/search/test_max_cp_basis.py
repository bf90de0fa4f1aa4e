"""The search's default context-parallel cap (SearchOptions.max_cp) against the published runs:
the default must not exclude the CP degree of any run we hold, and its value is the largest
one (Llama 3 405B at 131,072 tokens, CP 16; Dubey et al. 2024, Table 4)."""
import json
from pathlib import Path

from solver.search.options import SearchOptions

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def _cps(path: Path) -> dict[str, int]:
    rows = (json.loads(t) for t in path.read_text().splitlines() if t.strip())
    return {r["id"]: int(r["layout"].get("cp", 1)) for r in rows}


def test_default_max_cp_is_the_largest_published_cp(calibration_runs_path):
    cps: dict[str, int] = {}
    for path in (Path(calibration_runs_path), *sorted(DATA.glob("*_runs.jsonl"))):
        cps.update(_cps(path))
    assert len(cps) > 200
    largest = max(cps.values())
    assert SearchOptions().max_cp == largest == 16
    assert [k for k, v in cps.items() if v == largest] == ["dubey2024_llama3_405b_t4_16384_cp16"]
