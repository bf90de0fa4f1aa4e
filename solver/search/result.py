"""Search results: ranked layouts with their estimates, the solver status, and timing."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
import math
from typing import Any, Literal

from solver.search.exhaustive import layout_key
from solver.specs import LayoutSpec

Status = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"]


@dataclass(frozen=True)
class RankedLayout:
    """One layout, its cost-model estimate (a LayoutEstimate) and its objective."""

    rank: int
    layout: LayoutSpec
    estimate: Any
    objective_units: float
    grad_accum: int
    pipeline_split: tuple[int, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        est = self.estimate
        out: dict[str, Any] = {"rank": self.rank, **self.layout.model_dump(), "gpus": self.layout.gpus,
                               "grad_accum": self.grad_accum,
                               "step_time_s": est.step_time_s, "mfu": est.mfu,
                               "memory_per_gpu_bytes": {"total": est.memory_per_gpu_bytes["total"]},
                               "fits": est.fits, "framework": est.framework,
                               "memory_recipe": est.memory_recipe["mode"]}
        if self.pipeline_split is not None:
            out["pipeline_split"] = list(self.pipeline_split)
        out["estimate"] = est.as_dict()
        return out


@dataclass
class SearchResult:
    """Layouts best first, the solver status and its bound/gap, wall seconds, counters."""

    layouts: list[RankedLayout]
    status: Status
    seconds: float
    objective: str
    bound_units: float | None = None
    gap: float | None = None
    solves: int = 0
    evaluated: int = 0
    explanation: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    phases: dict[str, Any] = field(default_factory=dict)  # seconds per phase, row counts
    gpus_available: int | None = None  # the cluster's available GPUs
    fallback: str | None = None  # why the layouts use fewer GPUs than asked (None: they do not)

    @property
    def gpus_used(self) -> list[int]:
        """Distinct GPU counts of the returned layouts, largest first."""
        return sorted({r.layout.gpus for r in self.layouts}, reverse=True)

    @property
    def best(self) -> RankedLayout | None:
        return self.layouts[0] if self.layouts else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "layouts": [r.as_dict() for r in self.layouts],
            "search": {"status": self.status, "seconds": self.seconds, "objective": self.objective,
                       "bound_units": self.bound_units, "gap": self.gap, "solves": self.solves,
                       "evaluated": self.evaluated, "notes": self.notes, "phases": self.phases,
                       "gpus_available": self.gpus_available, "gpus_used": self.gpus_used,
                       "fallback": self.fallback},
            "explanation": self.explanation,
        }


def relative_gap(best: float, bound: float) -> float:
    """(best - bound) / |best|, at least 0: how much better than `best` the optimum may be."""
    return max(0.0, (best - bound) / max(abs(best), 1e-12))


def merge_ranked(results: list[SearchResult], top_k: int,
                 complete: bool) -> tuple[list[RankedLayout], Status, float, float]:
    """(layouts, status, bound, gap) of several exact searches merged: their top_k layouts
    re-ranked by objective (exact ties by the layout's fields). OPTIMAL only when the merge
    is `complete` (no part left unsearched) and every search proved its optimum."""
    top = sorted((r for res in results for r in res.layouts),
                 key=lambda r: (r.objective_units, layout_key(r.layout)))[:top_k]
    layouts = [dataclasses.replace(r, rank=i + 1) for i, r in enumerate(top)]
    proven = complete and all(res.status == "OPTIMAL" for res in results)
    best = layouts[0].objective_units
    # a search without a proven bound bounds nothing: -inf (its gap is then infinite)
    bound = best if proven else min(-math.inf if r.bound_units is None else r.bound_units for r in results)
    return layouts, "OPTIMAL" if proven else "FEASIBLE", bound, relative_gap(best, bound)
