"""The plan's staged experiment plan: one-node correctness, the multi-node scaling grid,
reliability (checkpoint and restart) and convergence, with numbers from the plan.

Unit legend: `_bytes` bytes; `_s` seconds; `_flops` FLOPs.
"""
from __future__ import annotations

from typing import Any, get_args

from solver.cost.accounting import batch_plan
from solver.cost.estimate import MFU_KEYS
from solver.specs import ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

# Fraction of the run's tokens the convergence stage spends before the full run (a
# planning choice, stated in the plan; the seed asks for "enough tokens to test the curve").
CONVERGENCE_FRACTION = 0.01


def scaling_grid(cluster: ClusterSpec, unit: int) -> list[int]:
    """The seed's small scaling grid generalised: one node, 8 nodes, a quarter, all.

    For 512 GPUs in 8-GPU nodes this is the seed's 8, 64, 128, 512. Sizes are multiples
    of `unit` and at most the available GPUs (each size is searched on its own).
    """
    total, node = cluster.available_gpus, cluster.gpus_per_node
    sizes = {node, 8 * node, total // 4, total}
    return sorted(g for g in sizes if unit <= g <= total and g % unit == 0)


def grid_options(cluster: ClusterSpec, gpus: int) -> dict[str, Any]:
    """The search options of the grid row on `gpus` GPUs: the best layout only, both rank
    orders on an explicit fabric (service.admission counts its tables from them)."""
    from solver.specs import RankOrder

    options: dict[str, Any] = {"gpus": gpus, "top_k": 1}
    if cluster.topology is not None:
        options["rank_orders"] = list(get_args(RankOrder))
    return options


def searched_grid_sizes(cluster: ClusterSpec) -> list[int]:
    """The grid's sizes that are searched: all but the cluster's own, whose row is the plan's
    rank 1 when that layout uses every GPU (_grid_point)."""
    return [g for g in scaling_grid(cluster, 1) if g != cluster.available_gpus]


def _grid_point(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                best: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The searched best layout on `gpus` GPUs (the same search as `trainplan search --gpus N`,
    so a grid row is never slower than it), with its whole layout; the global batch kept.

    At the best layout's own size the plan's ranking is reused, not searched again.
    """
    from solver.errors import InfeasibleError, SolverTimeoutError
    from solver.search import search_layouts

    point: dict[str, Any] = {"gpus": gpus, "zero_stage": None, "model_state_per_gpu_bytes": None,
                             "memory_per_gpu_bytes": None, "step_time_s": None, "mfu": None,
                             "note": "full model does not fit: use a reduced-depth proxy",
                             "framework": training.framework}
    if gpus == best.get("gpus") and "time_breakdown_s" in best:
        top = best
    else:
        try:
            res = search_layouts(model, cluster, training, grid_options(cluster, gpus), explain=False)
        except (InfeasibleError, SolverTimeoutError):
            return point
        r = res.layouts[0]
        top = {**r.layout.model_dump(), "gpus": r.layout.gpus, "step_time_s": r.estimate.step_time_s,
               "mfu": r.estimate.mfu, **r.estimate.mfu_fields(),
               "memory_per_gpu_bytes": dict(r.estimate.memory_per_gpu_bytes)}
    b = batch_plan(training, top["dp"], top["micro_batch"])
    # every LayoutSpec field, so a row can be exported as the layout it was costed as (a MoE row's
    # EP / ETP, the placement, an uneven split)
    point.update({k: top[k] for k in ("tp", "pp", "vpp", "dp", "cp", "zero_stage", "micro_batch",
                                      "recompute", "sequence_parallel", "ep", "etp", "rank_order",
                                      "pipeline_layers")})
    point.update(gpus=top["gpus"], grad_accum=b.grad_accum, tokens_per_step=b.tokens_per_step,
                 model_state_per_gpu_bytes=top["memory_per_gpu_bytes"].get("model_state"),
                 memory_per_gpu_bytes=top["memory_per_gpu_bytes"]["total"],
                 step_time_s=top["step_time_s"], mfu=top["mfu"], **{k: top[k] for k in MFU_KEYS if k in top},
                 note="fits the full model" + ("" if top["gpus"] == gpus else
                                               f" (no layout uses all {gpus} GPUs)"))
    return point


def validation_stages(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                      plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The seed's four stages (correctness, scaling, reliability, convergence) with numbers."""
    best, n = plan["layouts"][0], plan["parameters"]["total"]
    assert training.tokens is not None  # build_plan refuses a training without tokens
    step_flops = plan["flops"]["total"] * plan["batch"]["tokens_per_step"] / training.tokens
    grid = [_grid_point(model, cluster, training, best, g) for g in scaling_grid(cluster, 1)]
    conv_tokens = CONVERGENCE_FRACTION * training.tokens
    return [
        {"stage": 1, "name": "one-node correctness", "gpus": cluster.gpus_per_node,
         "expect": {"parameters": n, "flops_per_step": step_flops,
                    "model_state_per_gpu_bytes_full_scale": best["memory_per_gpu_bytes"]["model_state"],
                    "memory_per_gpu_bytes_full_scale": best["memory_per_gpu_bytes"]["total"]},
         "full_model_fits_one_node": bool(grid) and grid[0]["gpus"] == cluster.gpus_per_node
         and grid[0]["zero_stage"] is not None,
         "checks": ["confirm loss and gradient behaviour", "verify parameter count and FLOP estimate",
                    "record peak memory by component", "measure kernel shapes and numerical stability"]},
        {"stage": 2, "name": "multi-node scaling", "grid": grid,
         "keep": f"global batch {plan['batch']['tokens_per_step']:,} tokens (report any change)",
         "record": ["tokens per second", "MFU", "median and tail step time",
                    "exposed collective time", "per-rank imbalance", "peak memory"]},
        {"stage": 3, "name": "reliability",
         "checkpoint_bytes": plan["run_risk"]["checkpoint"]["bytes"],
         "checkpoint_write_s": plan["run_risk"]["checkpoint"]["write_s"],
         "checkpoint_interval_s": plan["run_risk"]["interval_s"],
         "checks": ["checkpoint model, optimizer, data position and random state",
                    "test restart before the full run", "measure checkpoint write time and storage load",
                    "health checks: loss spikes, NaNs, stalled ranks, slow nodes",
                    "keep a known-good checkpoint for rollback"]},
        {"stage": 4, "name": "convergence", "tokens": conv_tokens,
         "steps": round(conv_tokens / plan["batch"]["tokens_per_step"]),
         "gpu_hours": CONVERGENCE_FRACTION * plan.get("prediction", plan["time"]).get(
             "gpu_hours", plan["time"]["gpu_hours"]),
         "gpu_hours_basis": "predicted step time" if "gpu_hours" in plan.get("prediction", {})
         else f"assumed {training.assumed_mfu:.0%} MFU",
         "checks": ["test the learning curve, not only throughput",
                    "compare with smaller-scale predictions",
                    "monitor held-out loss by data source"]},
    ]
