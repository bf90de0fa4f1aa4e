"""The plan's layout section: the CP-SAT ranking, the seed ladder's choice measured against
it, and the full estimate of one layout (accounting + cost-model prediction).

`build_plan` calls `searched_layouts` by default; `ladder_versus_best` answers the seed's
question "why not start with the lightest layout that fits?" with the cost model's numbers;
`estimate` is what `trainplan estimate` and POST /v1/estimate return.

Unit legend: `_s` seconds; `_bytes` bytes; fractions are plain ratios.
"""
from __future__ import annotations

from typing import Any, get_args

from solver.cost.bands import with_bands
from solver.cost.estimate import MFU_KEYS, estimate_layout
from solver.frameworks.profile import DEFAULT_FRAMEWORK
from solver.errors import InfeasibleError
from solver.plan import estimate_accounting, ladder_layouts, layout_fields
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

# Time components differing by less than this (s) are left out when explaining why one
# layout is slower than another.
_WHY_MIN_S = 0.005


def searched_layouts(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                     options: Any = None, cost_options: Any = None,
                     step_band: Any = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(search summary, ranked layouts best first) from the CP-SAT search.

    Each layout carries the layout fields, step_time_s, mfu, hfu, tokens_per_s, fits,
    time_breakdown_s, memory_per_gpu_bytes by component and memory_free_bytes (the search's
    own cost-model estimates; nothing is evaluated twice). Without
    options, clusters with an explicit topology are searched under both rank orders.
    Raises: InfeasibleError (with the solver's explanation and smallest fix).
    """
    from solver.search.api import plan_layouts

    if options is None:
        options = default_plan_options(cluster)
    return plan_layouts(model, cluster, training, options, cost_options, step_band)


def default_plan_options(cluster: ClusterSpec, **stated: Any) -> dict[str, Any]:
    """The search options of a plan whose caller gives none, plus `stated`: on an explicit
    fabric (fat tree, NVLink domains) placement changes group bandwidths, so both Megatron
    rank orders are searched, each exactly."""
    from solver.specs import RankOrder

    orders = {"rank_orders": list(get_args(RankOrder))} if cluster.topology is not None else {}
    return {**orders, **stated}


def slower_because(slow: dict[str, float], fast: dict[str, float]) -> list[dict[str, float]]:
    """Time components where `slow` spends more than `fast`, largest difference first (s)."""
    diffs: list[dict[str, Any]] = [{"component": k, "seconds": slow.get(k, 0.0) - fast.get(k, 0.0)}
             for k in sorted(set(slow) | set(fast))]
    return sorted((d for d in diffs if abs(d["seconds"]) >= _WHY_MIN_S),
                  key=lambda d: -d["seconds"])


def ladder_versus_best(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                       ladder_layout: dict[str, Any], best: dict[str, Any],
                       cost_options: Any = None) -> dict[str, Any]:
    """The seed-style ladder choice, predicted by the cost model and ranked by the search.

    `rank_min`/`rank_max` place it among all fitting layouts (1 = best); `why` lists the
    time components where it loses to the best.
    """
    from solver.search.api import layout_rank

    fields = layout_fields(ladder_layout)
    layout = LayoutSpec(**fields)
    est = estimate_layout(model, cluster, training, layout, cost_options)
    out: dict[str, Any] = {"layout": {**fields, "framework": est.framework}, "step_time_s": est.step_time_s,
                           "mfu": est.mfu, **est.mfu_fields(), "fits": est.fits,
                           "memory_per_gpu_bytes": dict(est.memory_per_gpu_bytes),
                           "time_breakdown_s": dict(est.time_breakdown_s),
                           "slower_than_best": est.step_time_s / best["step_time_s"] - 1.0,
                           "why": slower_because(est.time_breakdown_s, best["time_breakdown_s"]),
                           "memory_headroom_bytes": est.memory_margin.headroom_bytes,
                           "memory_margin_reserved_fraction": est.memory_margin.margin_fraction_reserved,
                           "memory_recipe": est.memory_recipe["mode"],
                           "framework_violations": list(est.framework_violations)}
    if est.fits:
        rank = layout_rank(model, cluster, training, layout, best_step_time_s=best["step_time_s"], estimate=est,
                           cost_options=cost_options)
        if rank["fitting_layouts"] > 0:  # else there is nothing to rank it among
            out.update({k: rank[k] for k in ("rank_min", "rank_max", "fitting_layouts")})
        else:
            out["rank_note"] = ("not ranked: no layout of the searched space (all GPUs, this global "
                                "batch) fits to rank it among")
    return out


def prediction(best: dict[str, Any], steps: int | None, gpus: int, step_band: Any = None) -> dict[str, Any]:
    """Run time at the best layout's predicted step time (instead of the assumed MFU), each
    figure with its 80% error band (`*_low`/`*_high`, solver.cost.bands)."""
    out = {"step_time_s": best["step_time_s"], "mfu": best["mfu"], "hfu": best["hfu"],
           **{k: best[k] for k in MFU_KEYS if k in best},
           "tokens_per_s": best["tokens_per_s"], "time_breakdown_s": best["time_breakdown_s"],
           "memory_per_gpu_bytes": best["memory_per_gpu_bytes"]}
    if steps is not None:
        wall = steps * best["step_time_s"]
        out.update({"steps": steps, "wall_s": wall, "days": wall / 86_400,
                    "gpu_hours": wall * gpus / 3600})
    return with_bands(out, best.get("framework", DEFAULT_FRAMEWORK), step_band)


def estimate(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
             layout: LayoutSpec, cost_options: Any = None, step_band: Any = None) -> dict[str, Any]:
    """One layout: the accounting (model state, grad-sync bound, batch) and the cost model's
    prediction (step_time_s, mfu, hfu, tokens_per_s, time_breakdown_s, memory by component
    including activations, fits). `memory_per_gpu_bytes` and `fits` are the cost model's;
    the accounting's even-split model state stays under `accounting`.
    Raises: SpecError when the layout does not fit the model's shapes or the cluster.
    """
    acc = estimate_accounting(model, cluster, training, layout)
    pred = estimate_layout(model, cluster, training, layout, cost_options).as_dict()
    pred.pop("layout", None)
    out = {**acc, **pred, "accounting": {"memory_per_gpu_bytes": acc["memory_per_gpu_bytes"],
                                         "fits_model_state_only": acc["fits"]}}
    out["memory_free_bytes"] = acc["memory_capacity_bytes"] - pred["memory_per_gpu_bytes"]["total"]
    from solver.sanity import batch_warnings, scale_warnings

    out["warnings"] = (batch_warnings(training, out["batch"])
                       + scale_warnings(training, cluster, pred.get("mfu"), "this layout"))
    return with_bands(out, training.framework, step_band)


def ladder_or_none(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec):
    """The seed ladder's (story, fitting rungs), or (its infeasibility story, []) when no rung fits."""
    try:
        return ladder_layouts(model, cluster, training)
    except InfeasibleError as exc:
        return {"infeasible": exc.message, **exc.explanation}, []
