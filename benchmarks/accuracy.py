"""Prediction accuracy: `trainplan validate` on the calibration runs, printed as JSON.

Usage: python -m benchmarks.accuracy [CASES.jsonl]
Default file: ../shared/calibration/runs.jsonl next to the repository (the 26 published
runs), or $TRAINPLAN_CALIBRATION. Prints the per-case table, the summary (median / max
absolute step-time error) and the cost-model constants used.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from solver.cost.options import DEFAULT_OPTIONS
from solver.cost.validation import validate_lines

DEFAULT_CASES = Path(__file__).resolve().parents[1].parent / "shared" / "calibration" / "runs.jsonl"
TARGET = {"median_abs_error": 0.05, "max_abs_error": 0.15}  # issue 4, "Done when"


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else os.environ.get("TRAINPLAN_CALIBRATION", DEFAULT_CASES))
    start = time.perf_counter()
    result = validate_lines(path.read_text(encoding="utf-8").splitlines())
    elapsed = time.perf_counter() - start
    summary = result["summary"]
    report = {
        "cases_file": str(path),
        "summary": summary,
        "target": TARGET,
        "meets_target": all(summary.get(k, float("inf")) <= v for k, v in TARGET.items()),
        "constants": dataclasses.asdict(DEFAULT_OPTIONS),
        "seconds": elapsed,
        "cases": [{k: c[k] for k in ("id", "predicted_step_time_s", "measured_step_time_s", "error",
                                     "fits", "memory_per_gpu_bytes_total")} for c in result["cases"]],
        "errors": result["errors"],
    }
    print(json.dumps(report, indent=2))
    return 0 if not result["errors"] else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
