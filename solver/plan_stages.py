"""The plan's staged experiment plan: one-node correctness, the multi-node scaling grid,
reliability (checkpoint and restart) and convergence, with numbers from the plan.

Unit legend: `_bytes` bytes; `_s` seconds; `_flops` FLOPs.
"""
from __future__ import annotations

from typing import Any

from solver.cost.accounting import batch_plan
from solver.plan import layout_fields
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

# Fraction of the run's tokens the convergence stage spends before the full run (a
# planning choice, stated in the plan; the seed asks for "enough tokens to test the curve").
CONVERGENCE_FRACTION = 0.01


def scaling_grid(cluster: ClusterSpec, unit: int) -> list[int]:
    """The seed's small scaling grid generalised: one node, 8 nodes, a quarter, all.

    For 512 GPUs in 8-GPU nodes this is the seed's 8, 64, 128, 512. Sizes are multiples
    of `unit` (TP x PP GPUs, one model replica) and at most the available GPUs.
    """
    total, node = cluster.available_gpus, cluster.gpus_per_node
    sizes = {node, 8 * node, total // 4, total}
    return sorted(g for g in sizes if unit <= g <= total and g % unit == 0)


def _grid_point(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                best: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The best layout shrunk to `gpus` (DP scaled down, the global batch kept), with the
    lightest ZeRO stage from the best's upward that fits; predicted by the cost model.

    At the best layout's own size the search's estimate of it is reused, not evaluated again.
    """
    from solver.cost.estimate import estimate_layout

    replica = best["tp"] * best["pp"] * best["cp"]
    dp = gpus // replica
    b = batch_plan(training, dp, best["micro_batch"])
    point = {"gpus": gpus, "dp": dp, "grad_accum": b.grad_accum, "tokens_per_step": b.tokens_per_step,
             "zero_stage": None, "model_state_per_gpu_bytes": None, "memory_per_gpu_bytes": None,
             "step_time_s": None, "mfu": None,
             "note": "full model does not fit: use a reduced-depth proxy"}
    for z in range(best["zero_stage"], 4):
        if dp == best["dp"] and z == best["zero_stage"] and "time_breakdown_s" in best:
            fits, m, step_s, mfu = (best["fits"], best["memory_per_gpu_bytes"],
                                    best["step_time_s"], best["mfu"])
        else:
            layout = LayoutSpec(**{**layout_fields(best), "dp": dp, "zero_stage": z})
            est = estimate_layout(model, cluster, training, layout)
            fits, m, step_s, mfu = est.fits, est.memory_per_gpu_bytes, est.step_time_s, est.mfu
        if fits:
            point.update(zero_stage=z, model_state_per_gpu_bytes=m["model_state"],
                         memory_per_gpu_bytes=m["total"], step_time_s=step_s,
                         mfu=mfu, note="fits the full model")
            break
    return point


def validation_stages(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                      plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The seed's four stages (correctness, scaling, reliability, convergence) with numbers."""
    best, n = plan["layouts"][0], plan["parameters"]["total"]
    assert training.tokens is not None  # build_plan refuses a training without tokens
    step_flops = plan["flops"]["total"] * plan["batch"]["tokens_per_step"] / training.tokens
    grid = [_grid_point(model, cluster, training, best, g)
            for g in scaling_grid(cluster, best["tp"] * best["pp"] * best["cp"])]
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
