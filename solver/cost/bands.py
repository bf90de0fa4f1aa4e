"""Error bands: an 80% interval on every prediction, from the model's measured residuals.

Method (split conformal prediction on log ratios; Vovk et al. 2005, Lei et al. 2018, "Distribution-
free predictive inference for regression", Sec. 2.2, with the two-sided signed-residual variant):
a residual is r = ln(measured / predicted) of one published run the constants were NOT fitted on
(benchmarks/data/heldout_runs.jsonl for step time, benchmarks/data/memory_runs.jsonl for peak
memory), grouped by the run's software stack, `training.framework` (the one fact of a run's
description that tracks the model's error: Megatron-Core recipes at ~2%, FSDP stacks at 5-26%).
With the n residuals of a group sorted, r_(1) <= ... <= r_(n), the 80% band is

    measured in [predicted x exp(r_(k_lo)), predicted x exp(r_(k_hi))],
    k_lo = floor((n + 1) x 0.1),  k_hi = ceil((n + 1) x 0.9),

which holds with probability >= 80% for a new run exchangeable with the group's (the conformal
rank guarantee, each tail at 10%). It needs k_lo >= 1 and k_hi <= n, i.e. n >= 9 rows; a group
with fewer uses all groups pooled, and the band says so. Quantities inverse to step time (MFU,
HFU, tokens/s) take the reciprocal ratios; wall time, days and GPU-hours the same ratios as step
time (they are steps x step time). The tables are data (solver/data/bands/residuals.json), written
by `python -m benchmarks.bands --write` from the data files, never typed in; a test recomputes
them. A calibrated profile (solver.cost.profile) replaces the step-time table with its own
leave-one-out residuals when it has at least 9 runs.

Unit legend: ratios are measured / predicted (dimensionless); `_log` is their natural log.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from solver.errors import SpecError

Quantity = Literal["step_time", "memory"]
LEVEL = 0.8
"""Coverage the bands state: 80% of runs inside, 10% each side."""
POOLED = "all"
"""Name of the pooled group (every framework's residuals together)."""
RESIDUALS_PATH = Path(__file__).resolve().parents[1] / "data" / "bands" / "residuals.json"

# Prediction fields that scale with step time (x ratio) and those inverse to it (/ ratio).
WITH_STEP_TIME = ("step_time_s", "wall_s", "days", "gpu_hours")
INVERSE_TO_STEP_TIME = ("mfu", "hfu", "tokens_per_s")


def conformal_ranks(n: int, level: float = LEVEL) -> tuple[int, int] | None:
    """1-based ranks (k_lo, k_hi) of the sorted residuals bounding a two-sided conformal band
    at `level`, or None when n is too small for that level."""
    alpha = 1.0 - level
    eps = 1e-9  # (1 - 0.8) / 2 is 0.09999... in binary: (n + 1) x alpha / 2 = 1 must floor to 1
    lo = math.floor((n + 1) * alpha / 2 + eps)
    hi = math.ceil((n + 1) * (1 - alpha / 2) - eps)
    return (lo, hi) if lo >= 1 and hi <= n else None


def log_interval(residuals: list[float], level: float = LEVEL) -> tuple[float, float] | None:
    """(low, high) log ratios of the conformal band, or None for too few residuals."""
    ordered = sorted(residuals)
    ranks = conformal_ranks(len(ordered), level)
    return None if ranks is None else (ordered[ranks[0] - 1], ordered[ranks[1] - 1])


@dataclass(frozen=True)
class Band:
    """An interval of measured / predicted for one quantity."""

    quantity: str
    group: str              # the framework whose residuals made it, or "all" (pooled)
    rows: int               # residuals behind it
    low_ratio: float        # measured / predicted at the low end
    high_ratio: float
    level: float
    source: str             # where the residuals come from

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@lru_cache(maxsize=1)
def shipped_table() -> dict[str, Any]:
    """The residual tables shipped with trainplan (benchmarks/bands.py writes them)."""
    try:
        return json.loads(RESIDUALS_PATH.read_text(encoding="utf-8"))
    except OSError as exc:  # an installation without its data files
        raise SpecError(f"bands: cannot read {RESIDUALS_PATH}: {exc.strerror}") from None


def band_from_groups(groups: dict[str, Any], quantity: str, group: str, source: str) -> Band:
    """The band of `group` in a {group: {"log_residuals": [...]}} table, pooled when too small."""
    own = groups.get(group, {}).get("log_residuals", [])
    interval = log_interval(own)
    name = group
    if interval is None:
        name = POOLED
        pooled = [r for g in groups.values() for r in g["log_residuals"]]
        interval = log_interval(pooled)
        own = pooled
    if interval is None:
        raise SpecError(f"bands: {len(own)} {quantity} residuals are too few for a {LEVEL:.0%} band")
    return Band(quantity, name, len(own), math.exp(interval[0]), math.exp(interval[1]), LEVEL, source)


@lru_cache(maxsize=32)
def shipped_band(quantity: Quantity, framework: str) -> Band:
    """The shipped band of one quantity for a run in `framework`."""
    table = shipped_table()[quantity]
    return band_from_groups(table["groups"], quantity, framework, table["source"])


def scale(value: float, band: Band, inverse: bool = False) -> tuple[float, float]:
    """(low, high) of a prediction under a band; inverse for quantities ~ 1 / step time."""
    if inverse:
        return value / band.high_ratio, value / band.low_ratio
    return value * band.low_ratio, value * band.high_ratio


def band_fields(pred: dict[str, Any], step: Band, memory: Band | None = None) -> dict[str, Any]:
    """`<field>_low` / `<field>_high` for every banded field present in `pred`, and
    memory_total_bytes_low/high from memory_per_gpu_bytes.total when a memory band is given."""
    out: dict[str, Any] = {}
    for name in WITH_STEP_TIME + INVERSE_TO_STEP_TIME:
        if isinstance(pred.get(name), (int, float)):
            low, high = scale(float(pred[name]), step, inverse=name in INVERSE_TO_STEP_TIME)
            out[f"{name}_low"], out[f"{name}_high"] = low, high
    total = (pred.get("memory_per_gpu_bytes") or {}).get("total")
    if memory is not None and isinstance(total, (int, float)):
        out["memory_total_bytes_low"], out["memory_total_bytes_high"] = scale(float(total), memory)
    return out


def with_bands(pred: dict[str, Any], framework: str, step: Band | None = None) -> dict[str, Any]:
    """`pred` plus its band fields and a `band` entry saying where they come from.

    `step` replaces the shipped step-time band (a calibrated profile's); memory always uses
    the shipped memory band.
    """
    step = step or shipped_band("step_time", framework)
    memory = shipped_band("memory", framework)
    return {**pred, **band_fields(pred, step, memory),
            "band": {"level": LEVEL, "step_time": step.as_dict(), "memory": memory.as_dict(),
                     "method": "split conformal on ln(measured / predicted) of runs the model was "
                               "not fitted on, per training.framework (solver/cost/bands.py)"}}


def mark_layouts(layouts: list[dict[str, Any]], step: Band | None = None) -> list[dict[str, Any]]:
    """Ranked layout dicts with their band fields and `within_band_of_best`.

    The best is the fastest listed layout (step time); a layout is within the band of it when
    their bands overlap (within_band_of_best) or the search tied it with the best
    (`tied_with_best`, solver.search.ties: a tie is always inside the band, so the two marks
    agree). `step` replaces the shipped step-time band of each layout's framework.
    """
    if not layouts:
        return layouts
    fastest = min(layouts, key=lambda d: d["step_time_s"])
    out = []
    for d in layouts:
        band = step or shipped_band("step_time", d.get("framework", POOLED))
        best_band = step or shipped_band("step_time", fastest.get("framework", POOLED))
        inside = bool(d.get("tied_with_best")) or (
            d["step_time_s"] * band.low_ratio <= fastest["step_time_s"] * best_band.high_ratio)
        out.append({**d, **band_fields(d, band), "within_band_of_best": inside})
    return out


def band_sentence(layouts: list[dict[str, Any]]) -> str | None:
    """Words for the layouts the band cannot tell from the fastest (None when only one)."""
    inside = [d["rank"] for d in layouts if d.get("within_band_of_best")]
    if len(inside) < 2:
        return None
    ranks = f"1-{len(inside)}" if inside == list(range(1, len(inside) + 1)) else ", ".join(map(str, inside))
    return (f"Ranks {ranks} are within the {LEVEL:.0%} error band of the fastest layout: their predicted "
            f"step-time intervals overlap, so the model cannot say which is faster on a real cluster; "
            f"measure them before choosing on speed alone.")
