"""The published-run files in benchmarks/data: provenance and accuracy against measurements.

calibration_documented.jsonl must be ../shared/calibration/runs.jsonl plus exactly one
documented fact per row (training.attention_kernel, with its basis appended to `assumed`);
heldout_runs.jsonl must be other runs. The accuracy checks use published step times
(each row's `source`), the issue's target for the calibration set.
"""
import json
import statistics
from pathlib import Path

import pytest

from solver.cost.validation import validate_lines

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def test_documented_file_only_adds_the_attention_kernel(calibration_runs_path):
    shared, documented = rows(calibration_runs_path), rows(DATA / "calibration_documented.jsonl")
    assert [r["id"] for r in documented] == [r["id"] for r in shared]
    for given, doc in zip(shared, documented):
        doc = json.loads(json.dumps(doc))
        kernel = doc["training"].pop("attention_kernel")
        note = doc["assumed"].pop()
        assert kernel in ("flash", "unfused") and note.startswith(f"attention_kernel {kernel}")
        assert doc == given, given["id"]


def test_heldout_rows_are_other_runs_and_all_load(calibration_runs_path):
    heldout = rows(DATA / "heldout_runs.jsonl")
    assert not {r["id"] for r in heldout} & {r["id"] for r in rows(calibration_runs_path)}
    assert all(r["confidence"] in ("high", "medium", "low") and r["source"] for r in heldout)
    result = validate_lines((DATA / "heldout_runs.jsonl").read_text().splitlines())
    assert result["errors"] == [] and len(result["cases"]) == len(heldout)


def abs_errors(path, keep=lambda row: True):
    keep_ids = {r["id"] for r in rows(path) if keep(r)}
    result = validate_lines(Path(path).read_text().splitlines())
    return [abs(c["error"]) for c in result["cases"] if c["id"] in keep_ids]


def test_documented_calibration_meets_the_issue_target():
    errors = abs_errors(DATA / "calibration_documented.jsonl")
    assert len(errors) == 26
    assert statistics.median(errors) <= 0.05 and max(errors) <= 0.15


def test_heldout_high_confidence_runs_within_target():
    errors = abs_errors(DATA / "heldout_runs.jsonl", lambda r: r["confidence"] == "high")
    assert len(errors) >= 20
    assert statistics.median(errors) <= 0.05 and max(errors) <= 0.15


@pytest.mark.parametrize("prefix", ["narayanan2021", "korthikanti2022"])
def test_unfused_attention_explains_the_a100_rows(calibration_runs_path, prefix):
    # Scored as FlashAttention runs these pre-2022 Megatron rows are predicted too fast;
    # with the kernel their sources document the bias is gone.
    def mean_signed(path):
        result = validate_lines(Path(path).read_text().splitlines())
        return statistics.fmean(c["error"] for c in result["cases"] if c["id"].startswith(prefix))
    documented = mean_signed(DATA / "calibration_documented.jsonl")
    assert mean_signed(calibration_runs_path) < documented - 0.04
    assert abs(documented) < 0.04
