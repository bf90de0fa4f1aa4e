"""The residual tables behind the error bands (solver/cost/bands.py), computed from the data files.

Usage: python -m benchmarks.bands [--write]
Prints JSON: per quantity and framework the rows, the 80% band (measured / predicted) and its
leave-one-out coverage on the rows (each run's band computed without that run: runs the band was
not fitted on). --write stores the tables in solver/data/bands/residuals.json, with provenance
(the files and their SHA-256, the cost model version, this command). tests/cost/test_bands.py
recomputes them and fails when the stored tables no longer match the cost model.

Residual rows: step time, benchmarks/data/heldout_runs.jsonl (runs the constants were not fitted
on; shared/calibration/runs.jsonl is the fitting set and is left out); memory,
benchmarks/data/memory_runs.jsonl. Groups: each row's training.framework (default when unstated).
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

from solver.cost.bands import LEVEL, POOLED, RESIDUALS_PATH, log_interval
from solver.cost.validation import validate_lines
from solver.cost.version import MODEL_VERSION
from solver.frameworks.profile import DEFAULT_FRAMEWORK

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STEP_FILE = HERE / "data" / "heldout_runs.jsonl"
MEMORY_FILE = HERE / "data" / "memory_runs.jsonl"
COMMAND = "python -m benchmarks.bands --write"


def framework_of(row: dict[str, Any]) -> str:
    """training.framework as the row states it; the default when unstated."""
    training = row.get("training")
    given = training.get("framework") if isinstance(training, dict) else None
    return str(given or DEFAULT_FRAMEWORK)


def residual_rows(path: Path, quantity: str) -> list[tuple[str, str, float]]:
    """(id, framework, ln(measured / predicted)) for every row of `path` measuring `quantity`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    raw = {r.get("id"): r for r in (json.loads(t) for t in lines if t.strip())}
    result = validate_lines(lines)
    if result["errors"]:
        raise SystemExit(f"{path}: rows could not be evaluated: {result['errors']}")
    key = "error" if quantity == "step_time" else "memory_error"
    return [(c["id"], framework_of(raw[c["id"]]), -math.log1p(c[key]))
            for c in result["cases"] if c[key] is not None]  # ln(m/p) = -ln(1 + error)


def group_table(rows: list[tuple[str, str, float]], source: Path) -> dict[str, Any]:
    """{source, groups: {framework: {rows, ids, log_residuals, low_ratio, high_ratio}}}."""
    groups: dict[str, Any] = {}
    for row_id, fw, r in rows:
        g = groups.setdefault(fw, {"ids": [], "log_residuals": []})
        g["ids"].append(row_id)
        g["log_residuals"].append(r)
    for g in groups.values():
        g["rows"] = len(g["ids"])
        interval = log_interval(g["log_residuals"])
        g["low_ratio"], g["high_ratio"] = (None, None) if interval is None else tuple(map(math.exp, interval))
    return {"source": str(source.relative_to(REPO)), "groups": dict(sorted(groups.items()))}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compute_table() -> dict[str, Any]:
    """The residual tables as solver/data/bands/residuals.json stores them."""
    return {
        "schema": 1, "model_version": MODEL_VERSION, "level": LEVEL,
        "residual": "ln(measured / predicted) per run",
        "provenance": {"command": COMMAND,
                       "files": {str(p.relative_to(REPO)): sha256(p) for p in (STEP_FILE, MEMORY_FILE)}},
        "step_time": group_table(residual_rows(STEP_FILE, "step_time"), STEP_FILE),
        "memory": group_table(residual_rows(MEMORY_FILE, "memory"), MEMORY_FILE),
    }


def loo_coverage(groups: dict[str, Any]) -> dict[str, Any]:
    """Share of rows inside their own group's band computed without them (pooled without them
    when the group is too small), overall and per group."""
    inside: dict[str, list[bool]] = {}
    for name, g in groups.items():
        for i, r in enumerate(g["log_residuals"]):
            own = g["log_residuals"][:i] + g["log_residuals"][i + 1:]
            interval = log_interval(own)
            if interval is None:
                others = [x for n, h in groups.items() if n != name for x in h["log_residuals"]]
                interval = log_interval(own + others)
            inside.setdefault(name, []).append(interval is not None and interval[0] <= r <= interval[1])
    flat = [x for v in inside.values() for x in v]
    return {"rows": len(flat), "coverage": sum(flat) / len(flat) if flat else None,
            "by_group": {n: {"rows": len(v), "coverage": sum(v) / len(v)} for n, v in inside.items()}}


def main(argv: list[str]) -> int:
    table = compute_table()
    if "--write" in argv:
        RESIDUALS_PATH.parent.mkdir(parents=True, exist_ok=True)
        RESIDUALS_PATH.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    report = {q: {"source": table[q]["source"],
                  "bands": {n: {k: g[k] for k in ("rows", "low_ratio", "high_ratio")}
                            for n, g in table[q]["groups"].items()},
                  "pooled": _pooled(table[q]["groups"]),
                  "leave_one_out": loo_coverage(table[q]["groups"])}
              for q in ("step_time", "memory")}
    print(json.dumps({"level": LEVEL, "model_version": MODEL_VERSION, **report}, indent=2))
    return 0


def _pooled(groups: dict[str, Any]) -> dict[str, Any]:
    pooled = [r for g in groups.values() for r in g["log_residuals"]]
    interval = log_interval(pooled)
    return {"group": POOLED, "rows": len(pooled),
            "low_ratio": None if interval is None else math.exp(interval[0]),
            "high_ratio": None if interval is None else math.exp(interval[1])}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
