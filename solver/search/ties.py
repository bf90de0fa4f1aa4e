"""Ties: layouts the cost model cannot tell apart are ranked simplest first.

The cost model's step time is a prediction with a measured error: on the published runs
it scores best on (the NVIDIA DGXC H100 recipes, high confidence) the median |error| is
1.7% (max 5.6%), on the calibration set 3.2% (README, "Cost model and validation").
Two layouts whose predictions differ by less than about that are not distinguishable
by the model, so the search states a resolution, TIE_RESOLUTION = 2% of the best
layout's objective, and prefers the simpler layout inside it:

    tied with the best  <=>  objective <= best objective + slack,
    slack = TIE_RESOLUTION x best objective          (step_time, min_cost)
          = TIE_RESOLUTION x best step time (units)  (min_gpus*: same GPU count required;
            another GPU count is one GPU_WEIGHT away, far beyond the slack)

Inside the tied set the order is simplicity (simplicity_key): lower CP, lower ZeRO stage,
fewer virtual stages, smaller micro-batch, fewer parallel dimensions above 1, then the
objective, then the layout's fields. The tied set is a prefix of the objective order
(everything up to best + slack), so the ranking is the objective order with that prefix
re-sorted; the CP-SAT driver enumerates every layout up to best + slack (and the top K)
before ranking, and the exhaustive oracle ranks with the same function.
"""
from __future__ import annotations

from typing import Any, Protocol, TypeVar
from collections.abc import Sequence

from solver.search.exhaustive import layout_key
from solver.search.scaling import TIME_UNIT_S
from solver.specs import LayoutSpec

class Ranked(Protocol):
    """What the ranking reads: an exhaustive.Evaluated or a result.RankedLayout."""

    @property
    def layout(self) -> LayoutSpec: ...
    @property
    def objective_units(self) -> float: ...
    @property
    def estimate(self) -> Any: ...


R = TypeVar("R", bound=Ranked)

# Relative step-time band within which layouts count as tied (see the module docstring).
TIE_RESOLUTION = 0.02


def simplicity_key(layout: LayoutSpec) -> tuple[int, int, int, int, int]:
    """Lower is simpler: CP, ZeRO stage, virtual stages, micro-batch, parallel dimensions > 1
    (EP counts as one for a MoE layout; a dense layout's ep is 1)."""
    dims = sum(d > 1 for d in (layout.tp, layout.pp, layout.cp, layout.dp, layout.ep))
    return (layout.cp, layout.zero_stage, layout.vpp, layout.micro_batch, dims)


def tie_slack_units(objective: str, best_objective_units: float, best_step_time_s: float) -> float:
    """How far above the best objective (units) a layout still ties with it."""
    if objective in ("min_gpus", "min_gpus_deadline"):
        return TIE_RESOLUTION * best_step_time_s / TIME_UNIT_S
    return TIE_RESOLUTION * abs(best_objective_units)


def by_objective(evaluated: Sequence[R]) -> list[R]:
    """Objective order, exact ties broken by the layout's fields."""
    return sorted(evaluated, key=lambda e: (e.objective_units, layout_key(e.layout)))


def rank_with_ties(evaluated: Sequence[R], objective: str) -> tuple[list[R], int]:
    """(ranking, size of the tied set): the layouts within the resolution of the best,
    simplest first, then the others in objective order."""
    ordered = by_objective(evaluated)
    if not ordered:
        return [], 0
    best = ordered[0]
    limit = best.objective_units + tie_slack_units(objective, best.objective_units,
                                                   best.estimate.step_time_s)
    n = sum(1 for e in ordered if e.objective_units <= limit)
    tied = sorted(ordered[:n], key=lambda e: (simplicity_key(e.layout), e.objective_units, layout_key(e.layout)))
    return tied + ordered[n:], n


def placement_identity(layout: LayoutSpec, split: Sequence[int] | None = None) -> tuple:
    """The layout as the cluster runs it: its fields and pipeline split, with the rank order
    left out at pp 1, where 'tp-cp-dp-pp' and 'tp-cp-pp-dp' place every rank alike (the two
    orders differ only in where the pipeline stages sit; topology.placement)."""
    fields = layout.model_dump()
    if layout.pp == 1:
        fields["rank_order"] = None
    return tuple(sorted(fields.items(), key=lambda kv: kv[0])) + (tuple(split or ()),)


def first_per_placement(items: Sequence[R]) -> list[R]:
    """`items` without the later ones that run as an earlier one does (same placement_identity
    of layout and pipeline split): a search over both rank orders finds each pp-1 layout once
    per order, and the ranking lists it once (the first order's)."""
    seen: set[tuple] = set()
    out: list[R] = []
    for item in items:
        key = placement_identity(item.layout, getattr(item, "pipeline_split", None))
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out
