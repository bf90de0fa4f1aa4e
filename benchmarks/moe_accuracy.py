"""Step-time accuracy on published mixture-of-experts training runs, printed as JSON.

Usage: python -m benchmarks.moe_accuracy [CASES.jsonl]   (default: benchmarks/data/moe_runs.jsonl)

Every row is a published MoE run in the schema of benchmarks/data/heldout_runs.jsonl (see
solver.cost.validation) plus `published_precision`: the compute precision the source ran,
"bf16" or an FP8 recipe ("fp8-delayed", "fp8-current", "fp8-blockwise"). Each case is one
of:
- "scored": predicted and compared (error = predicted / measured - 1);
- "refused": the cost model refused it naming the field it does not model (model.mla; FP8
  with MoE layers: training.compute_precision), with its reason;
- "pending": an FP8 run whose `training` does not state training.compute_precision (scoring
  it would predict a BF16 run against an FP8 measurement).
Summaries: BF16 runs and FP8 runs apart, each against issue 13's target (median |error| <=
8%, max <= 20%), over all rows and over the target set (confidence high or medium: a row
is "low" when its own source shows the software, not the layout, set its pace, said in its
`assumed`), and by `group` (one source table) and `confidence`. Exit status 0, or 2 when a row does not
load (a malformed row, not a refusal).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from solver.cost.validation import error_stats, validate_case
from solver.errors import PlannerError, Problem, SpecError
from solver.presets import load_layout, load_model, load_training
from solver.specs import TrainingSpec, check_layout_fits_model
from topology.catalog import load_cluster

HERE = Path(__file__).resolve().parent
MOE_CASES = HERE / "data" / "moe_runs.jsonl"
TARGET = {"median_abs_error": 0.08, "max_abs_error": 0.20}  # issue 13, "Done when"
BF16 = "bf16"
# The training field an FP8 run must state to be scored (TrainingSpec.compute_precision).
FP8_FIELD = "compute_precision"
TARGET_CONFIDENCE = ("high", "medium")
PRECISIONS = (BF16, "fp8-delayed", "fp8-current", "fp8-blockwise")
REQUIRED = ("id", "source", "confidence", "group", "published_precision", "model", "cluster",
            "training", "layout", "measured", "assumed")


def load_row(row: Any) -> None:
    """Check that a row is well formed: its keys, its precision, a positive measured step
    time, and specs that load and fit together (cluster size = layout GPUs). Refusals of the
    cost model are not checked here.

    Raises: PlannerError naming the field.
    """
    if not isinstance(row, dict):
        raise PlannerError("case: expected a JSON object")
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise PlannerError("case: missing " + ", ".join(missing))
    if row["published_precision"] not in PRECISIONS:
        raise PlannerError(f"published_precision: expected one of {', '.join(PRECISIONS)}, "
                           f"got {row['published_precision']!r}")
    step = (row["measured"] or {}).get("step_time_s")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0:
        raise PlannerError(f"measured.step_time_s: expected a positive number, got {step!r}")
    if not row["assumed"] or not row["source"]:
        raise PlannerError("assumed: every row states its source and its unprinted choices")
    model, training = load_model(row["model"]), load_training(row["training"])
    layout, cluster = load_layout(row["layout"]), load_cluster(row["cluster"])
    problems = [Problem(*p.split(": ", 1)) for p in check_layout_fits_model(model, training, layout)]
    if layout.gpus != cluster.nodes * cluster.gpus_per_node:
        problems.append(Problem("layout", f"uses {layout.gpus} GPUs; the cluster has "
                                          f"{cluster.nodes * cluster.gpus_per_node}"))
    if problems:
        raise SpecError("; ".join(str(p) for p in problems), problems)


def _pending_reason(row: dict[str, Any]) -> str | None:
    """Why an FP8 row cannot be scored yet (None: it can)."""
    if row.get("published_precision", BF16) == BF16:
        return None
    if FP8_FIELD not in TrainingSpec.model_fields:
        return f"training.{FP8_FIELD}: the training spec has no FP8 compute recipe yet"
    training = row.get("training")
    if not isinstance(training, dict) or FP8_FIELD not in training:
        return f"training.{FP8_FIELD}: the row does not state its FP8 recipe"
    return None


# Fields a refusal of the cost model names: model parts it does not cover (model.mla,
# model.mtp_layers: solver.model_parts.refuse_unmodelled) and an FP8 recipe it does not cost
# for this model (solver.cost.fp8.check_compute_precision). Any other SpecError raised after
# the row loaded is a malformed row (e.g. a topology that cannot be built).
REFUSAL_FIELDS = ("model.", "training.compute_precision")


def _is_refusal(exc: SpecError) -> bool:
    """Whether a SpecError is the cost model refusing what it does not model."""
    return bool(exc.problems) and all(p.field.startswith(REFUSAL_FIELDS) for p in exc.problems)


def evaluate_row(row: Any, fallback_id: str) -> dict[str, Any]:
    """One case: its status and, when scored, measured / predicted step time and error.

    Raises: PlannerError when the row is malformed (load_row), not when the model refuses it.
    """
    load_row(row)
    out: dict[str, Any] = {"id": row["id"], "group": row.get("group"),
                           "confidence": row.get("confidence"),
                           "precision": row.get("published_precision", BF16),
                           "measured_step_time_s": (row.get("measured") or {}).get("step_time_s"),
                           "predicted_step_time_s": None, "error": None}
    pending = _pending_reason(row)
    if pending:
        return {**out, "status": "pending", "reason": pending}
    try:
        result = validate_case(row, fallback_id)
    except SpecError as exc:
        if not _is_refusal(exc):
            raise
        return {**out, "status": "refused", "reason": exc.message}
    return {**out, "status": "scored", "predicted_step_time_s": result.predicted_step_time_s,
            "error": result.error, "predicted_mfu": result.predicted_mfu, "fits": result.fits,
            "fits_device": result.fits_device}


def _summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [c["error"] for c in cases if c["status"] == "scored" and c["error"] is not None]
    counts = {s: sum(c["status"] == s for c in cases) for s in ("scored", "refused", "pending")}
    summary: dict[str, Any] = {"cases": len(cases), **counts, **error_stats(errors)}
    if errors:
        worst = max((c for c in cases if c["error"] is not None), key=lambda c: abs(c["error"]))
        summary["worst_case"] = worst["id"]
        summary["meets_target"] = all(summary[k] <= v for k, v in TARGET.items())
    else:
        summary["meets_target"] = None
    return summary


def evaluate(path: Path) -> dict[str, Any]:
    """Every row of `path`: per-case results, BF16 / FP8 / per-group summaries, bad rows."""
    start = time.perf_counter()
    cases: list[dict[str, Any]] = []
    bad: list[dict[str, Any]] = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            cases.append(evaluate_row(json.loads(text), f"line {number}"))
        except json.JSONDecodeError as exc:
            bad.append({"line": number, "errors": [f"not valid JSON ({exc.msg})"]})
        except PlannerError as exc:
            bad.append({"line": number, "errors": [str(p) for p in exc.problems] or [exc.message]})
    groups = sorted({str(c["group"]) for c in cases})
    bf16 = [c for c in cases if c["precision"] == BF16]
    fp8 = [c for c in cases if c["precision"] != BF16]
    return {"cases_file": str(path), "target": TARGET, "target_confidence": TARGET_CONFIDENCE,
            "seconds": time.perf_counter() - start,
            "bf16": _summary(bf16), "fp8": _summary(fp8),
            "bf16_target_set": _summary([c for c in bf16 if c["confidence"] in TARGET_CONFIDENCE]),
            "fp8_target_set": _summary([c for c in fp8 if c["confidence"] in TARGET_CONFIDENCE]),
            "by_group": {g: _summary([c for c in cases if str(c["group"]) == g]) for g in groups},
            "by_confidence": {k: _summary([c for c in bf16 if c["confidence"] == k])
                              for k in ("high", "medium", "low")},
            "cases": cases, "errors": bad}


def main(argv: list[str]) -> int:
    report = evaluate(Path(argv[0]) if argv else MOE_CASES)
    print(json.dumps(report, indent=2))
    return 2 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
