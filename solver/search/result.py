"""Search results: ranked layouts with their estimates, the solver status, and timing."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
import math
from typing import Any, Literal

from solver.cost.bands import band_sentence, mark_layouts
from solver.search.ties import TIE_RESOLUTION, first_per_placement, rank_with_ties
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
    # Within the model's resolution of the fastest layout (solver.search.ties): the tied
    # layouts lead the ranking, simplest first. False when no other layout ties.
    tied_with_best: bool = False
    run: dict[str, Any] | None = None  # objective.run_outcome: the run with failures


    def as_dict(self) -> dict[str, Any]:
        est = self.estimate
        out: dict[str, Any] = {"rank": self.rank, **self.layout.model_dump(), "gpus": self.layout.gpus,
                               "grad_accum": self.grad_accum,
                               "step_time_s": est.step_time_s, "mfu": est.mfu, **est.mfu_fields(),
                               "memory_per_gpu_bytes": {"total": est.memory_per_gpu_bytes["total"]},
                               "fits": est.fits, "framework": est.framework,
                               "memory_recipe": est.memory_recipe["mode"],
                               "tied_with_best": self.tied_with_best}
        if self.pipeline_split is not None:
            out["pipeline_split"] = list(self.pipeline_split)
        if self.run is not None:
            out["run"] = self.run
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
    tie_resolution: float = TIE_RESOLUTION  # relative band of solver.search.ties
    # Every layout the search confirmed (unranked): its top K by objective and every layout
    # tied with its best, so that merged searches rank exactly (merge_ranked). Not serialized.
    candidates: list[RankedLayout] = field(default_factory=list, repr=False)
    # The step-time error band of a calibrated profile (solver.cost.bands.Band); None: the
    # shipped band of each layout's framework. Each layout carries *_low/*_high fields and
    # within_band_of_best (solver.cost.bands.mark_layouts).
    step_band: Any = None

    @property
    def gpus_used(self) -> list[int]:
        """Distinct GPU counts of the returned layouts, largest first."""
        return sorted({r.layout.gpus for r in self.layouts}, reverse=True)

    @property
    def best(self) -> RankedLayout | None:
        return self.layouts[0] if self.layouts else None

    def as_dict(self) -> dict[str, Any]:
        layouts = mark_layouts([r.as_dict() for r in self.layouts], self.step_band)
        return {
            "layouts": layouts,
            "search": {"status": self.status, "seconds": self.seconds, "objective": self.objective,
                       "bound_units": self.bound_units, "gap": self.gap, "solves": self.solves,
                       "evaluated": self.evaluated, "notes": self.notes, "phases": self.phases,
                       "gpus_available": self.gpus_available, "gpus_used": self.gpus_used,
                       "fallback": self.fallback, "tie_resolution": self.tie_resolution,
                       "tied_layouts": sum(r.tied_with_best for r in self.layouts),
                       "within_band_layouts": sum(d["within_band_of_best"] for d in layouts),
                       "band_sentence": band_sentence(layouts)},
            "explanation": self.explanation,
        }


def relative_gap(best: float, bound: float) -> float:
    """(best - bound) / |best|, at least 0: how much better than `best` the optimum may be."""
    return max(0.0, (best - bound) / max(abs(best), 1e-12))


def assign_ranks(candidates: list[RankedLayout], objective: str, top_k: int) -> list[RankedLayout]:
    """The top_k of `candidates` ranked with solver.search.ties.rank_with_ties (the layouts
    tied with the best first, simplest first, each marked), numbered from 1."""
    ranked, tied = rank_with_ties(candidates, objective)
    return [dataclasses.replace(r, rank=i + 1, tied_with_best=tied > 1 and i < tied)
            for i, r in enumerate(ranked[:top_k])]


def merge_ranked(results: list[SearchResult], top_k: int,
                 complete: bool) -> tuple[list[RankedLayout], Status, float, float]:
    """(layouts, status, bound, gap) of several exact searches merged: their candidates
    (each search's top K by objective and its tied set, which hold the merged top K and the
    merged tied set), each placement once (first_per_placement: at pp 1 the rank orders
    coincide), ranked again (assign_ranks). OPTIMAL only when the merge is `complete` (no
    part left unsearched) and every search proved its optimum."""
    cands = first_per_placement([c for res in results for c in (res.candidates or res.layouts)])
    layouts = assign_ranks(cands, results[0].objective, top_k)
    proven = complete and all(res.status == "OPTIMAL" for res in results)
    best = min(c.objective_units for c in cands)
    # a search without a proven bound bounds nothing: -inf (its gap is then infinite)
    bound = best if proven else min(-math.inf if r.bound_units is None else r.bound_units for r in results)
    return layouts, "OPTIMAL" if proven else "FEASIBLE", bound, relative_gap(best, bound)
