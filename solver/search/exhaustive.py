"""The exhaustive evaluator: the oracle for the CP-SAT search and its speed baseline.

It walks every structurally valid layout (solver.search.space.enumerate_layouts), asks the
cost model for each (solver.cost.estimate.estimate_layout), keeps those that fit in memory
(and meet the deadline for that objective), and sorts by the objective, then by the
layout's fields so equal objectives have a fixed order; the layouts tied with the best
(within the model's resolution, solver.search.ties) come first, simplest first. Nothing
clever on purpose.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from solver.search.objective import meets_deadline, objective_units
from solver.search.options import SearchOptions
from solver.search.rules import accumulation
from solver.search.space import enumerate_layouts
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.spec import ClusterSpec


@dataclass(frozen=True)
class Evaluated:
    layout: LayoutSpec
    estimate: Any
    objective_units: float


def layout_key(layout: LayoutSpec) -> tuple:
    """A total order on layouts used to break exact ties deterministically."""
    return (layout.tp, layout.pp, layout.dp, layout.cp, layout.vpp, layout.sequence_parallel,
            layout.zero_stage, layout.micro_batch, layout.recompute, layout.rank_order,
            layout.ep, layout.expert_tp)


def with_search_split(ctx: Any, options: SearchOptions, layout: LayoutSpec) -> LayoutSpec:
    """The layout with the pipeline split the search assigns it (LayoutSpec.pipeline_layers):
    the fastest split whose busiest stage fits memory (solver.cost.step.memory_aware_split),
    or unchanged without options.split_stages, for pp = 1, or when the layers do not divide
    and uneven stages are not allowed; a MoE layout whose layers do not divide over pp gets its
    first/last split (solver.search.moe_split) whatever split_stages says. ctx: the CostContext."""
    from solver.cost.step import (
        compose_memory, memory_aware_split, split_memory_terms, stage_layer_limits, time_terms,
        usable_memory_bytes,
    )

    from solver.search import moe_split

    if moe_split.applies(ctx.model, ctx.training, moe_split.allowed(options), layout.pp, layout.vpp):
        m = accumulation(ctx.training, layout.dp, layout.micro_batch)  # a MoE first/last split
        first_last = moe_split.first_last_split(time_terms(ctx, layout, m), layers=ctx.model.layers,
                                                pp=layout.pp, vpp=layout.vpp, grad_accum=m)
        return layout.model_copy(update={"pipeline_layers": first_last})
    if not options.split_stages or layout.pp == 1 or ctx.model.moe is not None:
        return layout
    m = accumulation(ctx.training, layout.dp, layout.micro_batch)
    usable = usable_memory_bytes(ctx)

    def fits(split: tuple[int, ...]) -> bool:
        lo = layout.model_copy(update={"pipeline_layers": split})
        return compose_memory(split_memory_terms(ctx, lo, m))["total"] <= usable

    split = memory_aware_split(time_terms(ctx, layout, m), layers=ctx.model.layers, pp=layout.pp,
                               vpp=layout.vpp, grad_accum=m, uneven=options.allow_uneven_pipeline,
                               fits=fits, limits=lambda: stage_layer_limits(ctx, layout, m, usable))
    return layout.model_copy(update={"pipeline_layers": split})


def evaluator(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, options: SearchOptions,
              cost_options: Any = None) -> Callable[[LayoutSpec], Evaluated | None]:
    """`evaluate` for one problem: one cost context (placement options.rank_orders[0]) shared
    by every layout, so the cost terms' caches, keyed on the context, hit across layouts."""
    from solver.cost.estimate import estimate_with_context, make_context
    from solver.cost.terms import with_rank_order

    from solver.search.objective import wall_factor_of

    order = options.rank_orders[0]
    ctx = with_rank_order(make_context(model, cluster, training, cost_options), order)
    factor = wall_factor_of(model, cluster, training) if options.objective == "min_cost" else None

    def verdict(layout: LayoutSpec) -> Evaluated | None:
        if layout.rank_order != order:
            layout = layout.model_copy(update={"rank_order": order})
        layout = with_search_split(ctx, options, layout)
        est = estimate_with_context(ctx, layout)
        if not est.fits or not meets_deadline(options, training, layout, est.step_time_s):
            return None
        return Evaluated(layout, est, objective_units(options, training, layout, est.step_time_s,
                                                      factor(layout) if factor else 1.0))

    return verdict


def evaluate(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, options: SearchOptions,
             layout: LayoutSpec, cost_options: Any = None) -> Evaluated | None:
    """The cost model's verdict on one layout; None when it does not fit or misses the deadline."""
    return evaluator(model, cluster, training, options, cost_options)(layout)


def exhaustive_search(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                      options: SearchOptions | None = None, cost_options: Any = None) -> list[Evaluated]:
    """Every feasible layout, best first (all of them; slice for a top-K).

    As search_layouts: when no layout uses all the GPUs (and the count is fixed), the
    layouts of the largest usable counts (solver.search.fallback.usable_gpu_counts).
    """
    options = options or SearchOptions()
    if len(options.rank_orders) > 1:  # each placement separately, merged
        from solver.search.ties import first_per_placement

        out = [e for o in options.rank_orders
               for e in exhaustive_search(model, cluster, training,
                                          options.model_copy(update={"rank_orders": (o,)}), cost_options)]
        return _ranked(first_per_placement(out), options)  # a pp-1 layout once, as merge_ranked
    layouts = list(enumerate_layouts(model, cluster, training, options))
    if not layouts and not options.gpus_may_vary:
        from solver.search.fallback import usable_gpu_counts

        out = [e for g in usable_gpu_counts(model, cluster, training, options)
               for e in exhaustive_search(model, cluster, training,
                                          options.model_copy(update={"gpus": g}), cost_options)]
    else:
        verdict = evaluator(model, cluster, training, options, cost_options)
        out = [ev for ev in map(verdict, layouts) if ev is not None]
    return _ranked(out, options)


def _ranked(out: list[Evaluated], options: SearchOptions) -> list[Evaluated]:
    """Objective order with the layouts tied with the best first, simplest first
    (solver.search.ties.rank_with_ties, the rule the CP-SAT search applies)."""
    from solver.search.ties import rank_with_ties

    return rank_with_ties(out, options.objective)[0]
