"""Predictions against measured runs (the schema of shared/calibration/runs.jsonl).

A case is one JSON object per line: `id`, `model` and `cluster` (preset name, JSON path or
inline object), `training` (preset name, path or object; `tokens` optional), `layout`
(object), and `measured.step_time_s` (seconds; optional: without it only the prediction
is reported). Other keys (`source`, `confidence`, `assumed`, ...) are carried through
untouched. Errors are signed fractions: predicted / measured - 1.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any
from collections.abc import Iterable

from solver.cost.estimate import estimate_layout
from solver.cost.options import CostOptions
from solver.errors import PlannerError
from solver.presets import load_layout, load_model, load_training
from topology.catalog import load_cluster


@dataclass(frozen=True)
class CaseResult:
    """One case's prediction next to its measurement."""

    id: str
    predicted_step_time_s: float
    measured_step_time_s: float | None
    error: float | None            # signed fraction: predicted / measured - 1
    fits: bool
    memory_per_gpu_bytes_total: float
    predicted_mfu: float
    measured_mfu: float | None
    time_breakdown_s: dict[str, float]
    defaulted: list[str]           # software facts the case left unstated, as scored


# Training fields that describe the software rather than the run's shape: when a case leaves
# them out the default is scored, and the report says so (a pre-2023 Megatron run scored as
# FlashAttention is predicted 10-30% too fast; tests/cost/test_calibration_files.py).
SOFTWARE_FIELDS = ("attention_kernel", "precision")


def _defaulted(case: dict[str, Any], training: Any) -> list[str]:
    given = case.get("training")
    if not isinstance(given, dict):  # a preset or a file states its own fields
        return []
    return [f"training.{name}={_short(getattr(training, name))}"
            for name in SOFTWARE_FIELDS if name not in given]


def _short(value: Any) -> str:
    if hasattr(value, "model_dump"):
        return "(" + ", ".join(f"{k} {v}" for k, v in value.model_dump().items()) + ")"
    return str(value)


@dataclass(frozen=True)
class LineError:
    """A line that could not be evaluated, with every reason."""

    line: int
    id: str | None
    errors: list[str]


def _measured(case: dict[str, Any], field: str) -> float | None:
    value = (case.get("measured") or {}).get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise PlannerError(f"measured.{field}: expected a positive number, got {value!r}")
    return float(value)


def validate_case(case: Any, fallback_id: str, options: CostOptions | None = None) -> CaseResult:
    """Predict one case and compare it with its measurement.

    Raises: PlannerError (SpecError for bad specs) with field paths.
    """
    if not isinstance(case, dict):
        raise PlannerError("case: expected a JSON object")
    missing = [k for k in ("model", "cluster", "training", "layout") if k not in case]
    if missing:
        raise PlannerError("case: missing " + ", ".join(missing))
    training = load_training(case["training"])
    est = estimate_layout(load_model(case["model"]), load_cluster(case["cluster"]),
                          training, load_layout(case["layout"]), options)
    measured = _measured(case, "step_time_s")
    return CaseResult(
        id=str(case.get("id", fallback_id)), predicted_step_time_s=est.step_time_s,
        measured_step_time_s=measured,
        error=None if measured is None else est.step_time_s / measured - 1.0,
        fits=est.fits, memory_per_gpu_bytes_total=est.memory_per_gpu_bytes["total"],
        predicted_mfu=est.mfu, measured_mfu=_measured(case, "mfu"),
        time_breakdown_s=est.time_breakdown_s, defaulted=_defaulted(case, training))


def _problems(exc: PlannerError) -> list[str]:
    return [str(p) for p in exc.problems] or [exc.message]


def error_stats(errors: Iterable[float]) -> dict[str, float]:
    """Median / max / mean absolute and mean signed error of signed fractional errors
    (empty dict for none)."""
    signed = list(errors)
    if not signed:
        return {}
    absolute = [abs(e) for e in signed]
    return {"median_abs_error": statistics.median(absolute), "max_abs_error": max(absolute),
            "mean_abs_error": statistics.fmean(absolute), "mean_signed_error": statistics.fmean(signed)}


def summarize(results: list[CaseResult]) -> dict[str, Any]:
    """error_stats over the measured cases, the worst case, fits and defaults counted."""
    errs = [(r.id, r.error) for r in results if r.error is not None]
    if not errs:
        return {"cases": len(results), "measured_cases": 0}
    worst = max(errs, key=lambda e: abs(e[1]))
    defaulted = Counter(item for r in results for item in r.defaulted)
    return {"cases": len(results), "measured_cases": len(errs), **error_stats(e for _, e in errs),
            "worst_case": worst[0], "fits": sum(r.fits for r in results), "defaulted": dict(defaulted)}


def validate_lines(lines: Iterable[str], options: CostOptions | None = None) -> dict[str, Any]:
    """Validate every non-blank line; bad lines become per-line errors, never a crash."""
    results: list[CaseResult] = []
    bad: list[LineError] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        case_id = None
        try:
            case = json.loads(text)
            case_id = case.get("id") if isinstance(case, dict) else None
            results.append(validate_case(case, f"line {number}", options))
        except json.JSONDecodeError as exc:
            bad.append(LineError(number, None, [f"not valid JSON ({exc.msg} at column {exc.colno})"]))
        except PlannerError as exc:
            bad.append(LineError(number, case_id, _problems(exc)))
    return {"cases": [asdict(r) for r in results], "errors": [asdict(b) for b in bad],
            "summary": summarize(results)}
