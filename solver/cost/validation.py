"""Predictions against measured runs (the schema of shared/calibration/runs.jsonl).

A case is one JSON object per line: `id`, `model` and `cluster` (preset name, JSON path or
inline object), `training` (preset name, path or object; `tokens` optional), `layout`
(object), and `measured.step_time_s` (seconds) and/or `measured.peak_memory_bytes` (peak
memory of one GPU, bytes) with `measured.peak_memory_kind` (what the figure counts, see
PEAK_MEMORY_KINDS); both optional: without them only the prediction is reported. Other keys
(`source`, `confidence`, `assumed`, ...) are carried through untouched. Errors are signed
fractions: predicted / measured - 1, for step time and memory alike.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

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
    predicted_mfu: float           # under mfu_attention_convention (training.causal_attention_flops)
    measured_mfu: float | None     # as published (the source's own FLOP convention)
    time_breakdown_s: dict[str, float]
    defaulted: list[str]           # software facts the case left unstated, as scored
    peak_memory_kind: str | None = None             # measured.peak_memory_kind
    predicted_peak_memory_bytes: float | None = None  # the prediction in the measurement's scope
    measured_peak_memory_bytes: float | None = None
    memory_error: float | None = None  # signed fraction: predicted / measured - 1
    device_capacity_bytes: float = 0.0  # device_capacity_bytes(gpu): the HBM the run had
    fits_device: bool = False  # predicted total <= device capacity: consistent with having run
    # The predicted MFU under both attention-FLOP conventions (LayoutEstimate.mfu_fields).
    predicted_mfu_causal: float = 0.0
    predicted_mfu_noncausal: float = 0.0
    mfu_attention_convention: str = "non-causal"


# What a published peak-memory figure counts. The first two are PyTorch caching-allocator
# statistics (torch.cuda.max_memory_allocated / memory_stats()["allocated_bytes.all.peak"],
# and max_memory_reserved / "reserved_bytes.all.peak", which adds the allocator's cached,
# fragmented blocks); "device_used" is the whole device (nvidia-smi / NVML used memory).
PeakMemoryKind = Literal["max_allocated", "max_reserved", "device_used"]
PEAK_MEMORY_KINDS: tuple[str, ...] = get_args(PeakMemoryKind)
ALLOCATOR_KINDS = ("max_allocated", "max_reserved")


def predicted_peak_memory_bytes(memory: dict[str, float], kind: str) -> float:
    """The predicted per-GPU bytes a measurement of `kind` counts (bytes).

    The allocator statistics never see the CUDA context and NCCL's own buffers (allocated by
    the driver and NCCL outside PyTorch's caching allocator), which the cost model holds in its
    `framework_overhead` term (options.framework_overhead_bytes); so allocator-kind figures are
    compared with total - framework_overhead, device-level figures with the total.
    """
    if kind in ALLOCATOR_KINDS:
        return memory["total"] - memory.get("framework_overhead", 0.0)
    return memory["total"]


GIB_BYTES = 2**30


def device_capacity_bytes(memory_gb: float) -> float:
    """The memory a GPU sold as `memory_gb` "GB" of HBM physically has, bytes: memory_gb GiB.

    HBM capacities are built from power-of-two stacks and sold in GiB under the "GB" label:
    "80 GB" A100/H100 are 5 x 16 GiB stacks, and NVML (nvidia-smi) reports 81,920 MiB on the
    A100 80GB (80 GiB = 85.9e9 bytes), 81,559 MiB on the H100 80GB HBM3 (85.5e9 bytes: the
    driver keeps 361 MiB) and 143,771 MiB on the "141 GB" H200 (150.8e9 bytes) (NVIDIA H100
    MIG guide: "80 GB HBM2e, 5 HBM2e stacks"; NVML figures as tabulated by Modal,
    thundergolfer.com/blog/nvidia-gpu-memory-capacity). The topology presets keep memory_gb x
    1e9 (GB = 1e9 bytes) as the *planning* capacity, 6.9% below this, on top of the 10% margin
    (options.memory_margin_fraction); this figure is only for asking whether a run that ran
    is consistent with having fit (validate's `fits_device`). GDDR parts (L40S, L4) are sold
    in decimal GB and expose about 0.6% more than memory_gb x 1e9, less than this: the verdict
    is meant for the HBM GPUs of the published runs.
    """
    return memory_gb * GIB_BYTES


# Training fields that describe the software rather than the run's shape: when a case leaves
# them out the default is scored, and the report says so (a pre-2023 Megatron run scored as
# FlashAttention is predicted 10-30% too fast; tests/cost/test_calibration_files.py). The
# framework sets the per-layout memory recipe (solver/cost/state.py), so it is named here
# rather than training.precision: left out, precision leaves the framework's recipe as is.
SOFTWARE_FIELDS = ("attention_kernel", "framework")


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


def _measured_memory(case: dict[str, Any]) -> tuple[float | None, str | None]:
    """measured.peak_memory_bytes and its kind (both or neither). Raises: PlannerError."""
    value = _measured(case, "peak_memory_bytes")
    kind = (case.get("measured") or {}).get("peak_memory_kind")
    if value is None:
        if kind is not None:
            raise PlannerError("measured.peak_memory_kind: given without measured.peak_memory_bytes")
        return None, None
    if kind not in PEAK_MEMORY_KINDS:
        raise PlannerError(f"measured.peak_memory_kind: expected one of {', '.join(PEAK_MEMORY_KINDS)} "
                           f"(what the peak_memory_bytes figure counts), got {kind!r}")
    return value, kind


def validate_case(case: Any, fallback_id: str, options: CostOptions | None = None,
                  framework_options: Mapping[str, CostOptions] | None = None) -> CaseResult:
    """Predict one case and compare it with its measurement (under `options`, or the case's
    training.framework's entry of `framework_options`: a calibrated profile's traits).

    Raises: PlannerError (SpecError for bad specs) with field paths.
    """
    if not isinstance(case, dict):
        raise PlannerError("case: expected a JSON object")
    missing = [k for k in ("model", "cluster", "training", "layout") if k not in case]
    if missing:
        raise PlannerError("case: missing " + ", ".join(missing))
    training = load_training(case["training"])
    options = (framework_options or {}).get(training.framework, options)
    cluster = load_cluster(case["cluster"])
    est = estimate_layout(load_model(case["model"]), cluster, training, load_layout(case["layout"]), options)
    device = device_capacity_bytes(cluster.gpu.memory_gb)
    measured = _measured(case, "step_time_s")
    memory, kind = _measured_memory(case)
    predicted_memory = memory_error = None
    if memory is not None and kind is not None:
        predicted_memory = predicted_peak_memory_bytes(est.memory_per_gpu_bytes, kind)
        memory_error = predicted_memory / memory - 1.0
    return CaseResult(
        id=str(case.get("id", fallback_id)), predicted_step_time_s=est.step_time_s,
        measured_step_time_s=measured,
        error=None if measured is None else est.step_time_s / measured - 1.0,
        fits=est.fits, memory_per_gpu_bytes_total=est.memory_per_gpu_bytes["total"],
        predicted_mfu=est.mfu, measured_mfu=_measured(case, "mfu"),
        time_breakdown_s=est.time_breakdown_s, defaulted=_defaulted(case, training),
        peak_memory_kind=kind, predicted_peak_memory_bytes=predicted_memory,
        measured_peak_memory_bytes=memory, memory_error=memory_error,
        device_capacity_bytes=device, fits_device=est.memory_per_gpu_bytes["total"] <= device,
        predicted_mfu_causal=est.mfu_causal, predicted_mfu_noncausal=est.mfu_noncausal,
        mfu_attention_convention=est.mfu_attention_convention)


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


def memory_summary(results: list[CaseResult]) -> dict[str, Any]:
    """error_stats of the memory errors over the cases with a measured peak, the worst case,
    and the largest under-prediction, max(-error) = max(1 - predicted / measured) (0 when no
    case is under-predicted): the smallest fit margin under which none of these runs' measured
    peaks exceeds a GPU the model says it fits (fits needs predicted <= (1 - margin) x
    capacity and measured = predicted / (1 + error), so measured <= capacity whenever
    margin >= -error)."""
    errs = [(r.id, r.memory_error, r.peak_memory_kind) for r in results if r.memory_error is not None]
    if not errs:
        return {"measured_cases": 0}
    worst = max(errs, key=lambda e: abs(e[1]))
    under = max(0.0, max(-e for _, e, _ in errs))
    return {"measured_cases": len(errs), **error_stats(e for _, e, _ in errs),
            "worst_case": worst[0], "max_under_prediction": under,
            "kinds": dict(Counter(kind for _, _, kind in errs))}


def summarize(results: list[CaseResult]) -> dict[str, Any]:
    """Step time: error_stats over the measured cases, the worst case, fits and defaults
    counted; memory: memory_summary under "memory". Two fit verdicts, counted apart: `fits`
    (the planning verdict: total <= (1 - margin) x memory_gb x 1e9, what a plan may fill) and
    `fits_device` (total <= device_capacity_bytes, no margin: a run that ran must pass it,
    or the prediction is inconsistent with the run having fit)."""
    errs = [(r.id, r.error) for r in results if r.error is not None]
    memory = memory_summary(results)
    if not errs:
        return {"cases": len(results), "measured_cases": 0, "fits": sum(r.fits for r in results),
                "fits_device": sum(r.fits_device for r in results), "memory": memory}
    worst = max(errs, key=lambda e: abs(e[1]))
    defaulted = Counter(item for r in results for item in r.defaulted)
    return {"cases": len(results), "measured_cases": len(errs), **error_stats(e for _, e in errs),
            "worst_case": worst[0], "fits": sum(r.fits for r in results),
            "fits_device": sum(r.fits_device for r in results), "defaulted": dict(defaulted),
            "memory": memory}


def validate_lines(lines: Iterable[str], options: CostOptions | None = None,
                   framework_options: Mapping[str, CostOptions] | None = None) -> dict[str, Any]:
    """Validate every non-blank line; bad lines become per-line errors, never a crash
    (options / framework_options as validate_case)."""
    results: list[CaseResult] = []
    bad: list[LineError] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        case_id = None
        try:
            case = json.loads(text)
            case_id = case.get("id") if isinstance(case, dict) else None
            results.append(validate_case(case, f"line {number}", options, framework_options))
        except json.JSONDecodeError as exc:
            bad.append(LineError(number, None, [f"not valid JSON ({exc.msg} at column {exc.colno})"]))
        except PlannerError as exc:
            bad.append(LineError(number, case_id, _problems(exc)))
    return {"cases": [asdict(r) for r in results], "errors": [asdict(b) for b in bad],
            "summary": summarize(results)}
