"""The plan's comparison with a published figure (training.reference).

A training spec may carry the GPU-hours a run was published with (its scope and source, and
the published layout if any). `plan` then prints its own GPU-hour estimates beside it, each
with the ratio estimate / published:
- the capacity plan's (the training FLOPs at the assumed MFU on every GPU of the cluster);
- the best searched layout's (its predicted step time x the plan's steps x its GPUs);
- the published layout's, predicted by the cost model at the same batch (when given).

Units: GPU-hours = GPUs x wall-clock hours; step times in seconds.
"""
from __future__ import annotations

from typing import Any

from solver.cost.estimate import estimate_layout
from solver.errors import Problem, SpecError
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

SECONDS_PER_HOUR = 3600


def gpu_hours(steps: int, step_time_s: float, gpus: int) -> float:
    """GPU-hours of `steps` steps of `step_time_s` seconds on `gpus` GPUs."""
    return steps * step_time_s * gpus / SECONDS_PER_HOUR


def _published_layout(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                      layout: LayoutSpec, steps: int, cost_options: Any) -> dict[str, Any]:
    """The published layout predicted by the cost model. Raises: SpecError naming
    training.reference.layout.* when the layout does not fit the model or the cluster."""
    try:
        est = estimate_layout(model, cluster, training, layout, cost_options)
    except SpecError as exc:  # the layout's own problems are the reference's; others (a model
        # part the cost model refuses) keep their field
        problems = [Problem(f"training.reference.{p.field}" if p.field.startswith("layout") else p.field,
                            p.reason) for p in exc.problems]
        if not any(p.field.startswith("training.reference") for p in problems):
            raise
        raise SpecError("training.reference.layout: " + exc.message, problems) from exc
    return {"estimate": "published layout (cost model)",
            "layout": layout.model_dump(mode="json"),
            "gpus": layout.gpus, "step_time_s": est.step_time_s, "mfu": est.mfu, "fits": est.fits,
            "gpu_hours": gpu_hours(steps, est.step_time_s, layout.gpus)}


def reference_section(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                      plan: dict[str, Any], cost_options: Any = None) -> dict[str, Any] | None:
    """The published figure and the plan's estimates beside it (None without a reference).

    `plan` is build_plan's dict so far (time, batch, layouts, prediction). Raises: SpecError
    (the published layout does not fit).
    """
    ref = training.reference
    if ref is None:
        return None
    steps = plan["batch"]["steps"]
    rows: list[dict[str, Any]] = [{
        "estimate": f"capacity plan (assumed MFU {plan['time']['assumed_mfu']:.0%})",
        "gpus": plan["time"]["gpus"], "gpu_hours": plan["time"]["gpu_hours"]}]
    best = plan.get("prediction")
    if best is not None and "gpu_hours" in best:
        lay = LayoutSpec(**{k: v for k, v in plan["layouts"][0].items() if k in LayoutSpec.model_fields})
        rows.append({"estimate": "best searched layout (cost model)",
                     "layout": lay.model_dump(mode="json"),
                     "gpus": lay.gpus, "step_time_s": best["step_time_s"], "mfu": best["mfu"],
                     "fits": True, "gpu_hours": best["gpu_hours"]})
    if ref.layout is not None:
        rows.append(_published_layout(model, cluster, training, ref.layout, steps, cost_options))
    for row in rows:
        row["ratio_to_published"] = row["gpu_hours"] / ref.gpu_hours
    return {"published_gpu_hours": ref.gpu_hours, "scope": ref.scope, "source": ref.source,
            "steps": steps, "tokens": training.tokens, "estimates": rows}
