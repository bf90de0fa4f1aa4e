"""Prediction accuracy: `trainplan validate` on published runs, printed as JSON.

Usage: python -m benchmarks.accuracy [CASES.jsonl]
With a file: that file's per-case table and summary. Without: two sets, each with its
summary, per-group summaries and per-case rows:
- calibration: ../shared/calibration/runs.jsonl (or $TRAINPLAN_CALIBRATION), the 26 runs
  the constants were fitted on, as shipped (each row states `training.attention_kernel`,
  the kernel its source documents);
- heldout: benchmarks/data/heldout_runs.jsonl, 146 other published runs never used for
  fitting, with summaries by `confidence` and by `group` (source table).
The issue's target (median |error| <= 5%, max <= 15%) is checked on each set.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from solver.cost.options import DEFAULT_OPTIONS
from solver.cost.validation import error_stats, validate_lines

HERE = Path(__file__).resolve().parent
SHARED_CASES = HERE.parents[1] / "shared" / "calibration" / "runs.jsonl"
HELDOUT_CASES = HERE / "data" / "heldout_runs.jsonl"
TARGET = {"median_abs_error": 0.05, "max_abs_error": 0.15}  # issue 4, "Done when"
CASE_KEYS = ("id", "predicted_step_time_s", "measured_step_time_s", "error", "fits",
             "memory_per_gpu_bytes_total")


def _by(cases: list[dict[str, Any]], raw: dict[str, dict[str, Any]], key: str) -> dict[str, Any]:
    groups: dict[str, list[float]] = {}
    for c in cases:
        if c["error"] is not None:
            groups.setdefault(str(raw[c["id"]].get(key)), []).append(c["error"])
    return {name: {"cases": len(errs), **error_stats(errs)} for name, errs in sorted(groups.items())}


def evaluate(path: Path) -> dict[str, Any]:
    """validate on one file: summary, target check, per-group summaries and per-case rows."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    result = validate_lines(lines)
    raw = {c.get("id"): c for c in (json.loads(t) for t in lines if t.strip())}
    summary = result["summary"]
    out = {"cases_file": str(path), "seconds": time.perf_counter() - start, "summary": summary,
           "meets_target": all(summary.get(k, float("inf")) <= v for k, v in TARGET.items()),
           "by_group": _by(result["cases"], raw, "group"),
           "by_confidence": _by(result["cases"], raw, "confidence"),
           "cases": [{k: c[k] for k in CASE_KEYS} for c in result["cases"]],
           "errors": result["errors"]}
    return out


def main(argv: list[str]) -> int:
    if argv:
        sets = {"cases": Path(argv[0])}
    else:
        shared = Path(os.environ.get("TRAINPLAN_CALIBRATION", SHARED_CASES))
        sets = {"calibration": shared, "heldout": HELDOUT_CASES}
    report: dict[str, Any] = {"target": TARGET, "constants": dataclasses.asdict(DEFAULT_OPTIONS)}
    missing = [str(p) for p in sets.values() if not p.is_file()]
    for name, path in sets.items():
        if path.is_file():
            report[name] = evaluate(path)
    report["missing_files"] = missing
    print(json.dumps(report, indent=2))
    return 0 if not any(r["errors"] for r in report.values() if isinstance(r, dict) and "errors" in r) else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
