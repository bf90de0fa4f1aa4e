"""The published-run files: provenance and accuracy against measurements.

../shared/calibration/runs.jsonl states each row's attention kernel (the one its source
documents); benchmarks/data/heldout_runs.jsonl must be other runs. The accuracy checks use
published step times (each row's `source`) against the target median |error| <= 5%,
max <= 15% on the calibration set.
"""
import json
import statistics
from pathlib import Path

import pytest

from solver.cost.validation import validate_lines

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def test_every_calibration_row_states_its_attention_kernel(calibration_runs_path):
    shared = rows(calibration_runs_path)
    assert len(shared) == 26
    assert all(r["training"]["attention_kernel"] in ("flash", "unfused") for r in shared)


def test_heldout_rows_are_other_runs_and_all_load(calibration_runs_path):
    heldout = rows(DATA / "heldout_runs.jsonl")
    assert not {r["id"] for r in heldout} & {r["id"] for r in rows(calibration_runs_path)}
    assert all(r["confidence"] in ("high", "medium", "low") and r["source"] for r in heldout)
    result = validate_lines((DATA / "heldout_runs.jsonl").read_text().splitlines())
    assert result["errors"] == [] and len(result["cases"]) == len(heldout)


def abs_errors(lines, keep=lambda row: True):
    keep_ids = {json.loads(t)["id"] for t in lines if t.strip() and keep(json.loads(t))}
    result = validate_lines(lines)
    return [abs(c["error"]) for c in result["cases"] if c["id"] in keep_ids]


def test_calibration_file_meets_the_target(calibration_runs_path):
    errors = abs_errors(calibration_runs_path.read_text().splitlines())
    assert len(errors) == 26
    assert statistics.median(errors) <= 0.05 and max(errors) <= 0.15


def test_heldout_high_confidence_runs_within_target():
    lines = (DATA / "heldout_runs.jsonl").read_text().splitlines()
    errors = abs_errors(lines, lambda r: r["confidence"] == "high")
    assert len(errors) >= 20
    assert statistics.median(errors) <= 0.05 and max(errors) <= 0.15


@pytest.mark.parametrize("prefix", ["narayanan2021", "korthikanti2022"])
def test_unfused_attention_explains_the_a100_rows(calibration_runs_path, prefix):
    # These pre-2022 Megatron rows document unfused attention (S x S scores in HBM). Scored
    # as if they had run FlashAttention they come out clearly too fast; with the documented
    # kernel the bias is gone.
    lines = [t for t in calibration_runs_path.read_text().splitlines() if prefix in t]
    assert all(json.loads(t)["training"]["attention_kernel"] == "unfused" for t in lines)

    def mean_signed(texts):
        return statistics.fmean(c["error"] for c in validate_lines(texts)["cases"])
    as_flash = [t.replace('"attention_kernel": "unfused"', '"attention_kernel": "flash"') for t in lines]
    documented = mean_signed(lines)
    assert mean_signed(as_flash) < documented - 0.04
    assert abs(documented) < 0.04
