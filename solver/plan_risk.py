"""The plan's run-risk section and failure checks, computed for the recommended layout.

`run_risk_section` prices checkpoints, interruptions and restarts into the run's wall time,
GPU-hours and cost (solver.cost.checkpoint, solver.cost.risk); `failure_checks` turns the
plan's predictions into numbers and thresholds an operator can watch. Every check says
which layout it refers to ("recommended": the ranked layouts' first).

Unit legend: `_s` seconds; `_bytes` bytes; `_gb_s` 1e9 bytes/s; fractions plain ratios.
"""
from __future__ import annotations

import math
from typing import Any

from solver.cost.accounting import Flops, attention_convention, parameter_counts, run_time
from solver.cost.checkpoint import checkpoint_cost
from solver.cost.risk import failure_model, run_risk
from solver.frameworks.profile import FrameworkName
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

# MFU values the failure checks quote wall time at (sensitivity of the plan to MFU).
MFU_SENSITIVITY = (0.4, 0.3)
# A step-time rise the cost model does not explain: its calibration error on 26 published
# runs is at most 9.2% (README, "Cost model and validation"), so a sustained +10% is a
# slow node, link or storage, not the model.
STEP_TOLERANCE = 0.10
# Poisson tail for "too many interruptions in a day": the count a Poisson variable of the
# planned daily mean exceeds with probability below this.
INTERRUPTION_TAIL = 0.001


def framework_of(training: TrainingSpec) -> FrameworkName:
    """The training framework (training.framework, solver.frameworks)."""
    return training.framework


def run_risk_section(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                     plan: dict[str, Any], best: LayoutSpec) -> dict[str, Any]:
    """Checkpoint, interruptions, interval, goodput, and wall time / GPU-hours / cost with
    failures for the recommended layout `best`, at its predicted step time (the assumed
    MFU when the plan has no prediction)."""
    n = parameter_counts(model, training.seq_len).total
    ckpt = checkpoint_cost(n, training.precision, cluster, best, framework_of(training),
                           training.async_checkpoint)
    fm = failure_model(cluster, ckpt, best.gpus)
    pred = plan.get("prediction") or {}
    work_s, basis = ((pred["wall_s"], "predicted step time") if "wall_s" in pred
                     else (plan["time"]["wall_s"], f"assumed {training.assumed_mfu:.0%} MFU"))
    step_s = pred.get("step_time_s")
    risk = run_risk(fm, work_s)
    gpu_hours = risk.wall_s * best.gpus / 3600
    f = cluster.failures
    return {
        "layout": "recommended", "gpus": best.gpus, "work_basis": basis,
        "checkpoint": ckpt.as_dict(),
        "failures": {"interruptions_per_gpu_hour": f.interruptions_per_gpu_hour,
                     "mtbi_s": fm.mtbi_s, "detect_s": f.detect_s, "relaunch_s": f.relaunch_s,
                     "load_s": ckpt.load_s, "restart_s": fm.restart_s,
                     "source": "Llama 3 405B: 419 unexpected interruptions in 54 days on 16,384 "
                               "H100 (Dubey et al. 2024, Sec. 3.3.4) unless the cluster spec sets it"},
        "interval_s": risk.interval_s,
        "interval_steps": None if step_s is None or not math.isfinite(risk.interval_s)
        else max(1, round(risk.interval_s / step_s)),
        "interval_formula": "tau* = sqrt(delta^2 + 2 a delta M) - delta, a = 1 - (R + delta/2 + lag)/M; "
                            "Young 1974 sqrt(2 delta M) when delta, R << M (Daly 2006)",
        "expected": {"interruptions": risk.interruptions, "lost_work_s": risk.lost_work_s,
                     "restart_total_s": risk.restart_total_s, "checkpoints": risk.checkpoints,
                     "checkpoint_overhead_s": risk.checkpoint_overhead_s},
        "goodput": risk.goodput,
        "work_s": work_s, "wall_s": risk.wall_s, "days": risk.wall_s / 86_400,
        "gpu_hours": gpu_hours,
        "price_per_gpu_hour": training.price_per_gpu_hour, "currency": training.currency,
        "cost": None if training.price_per_gpu_hour is None else gpu_hours * training.price_per_gpu_hour,
        "wall_formula": "wall = work (1 + delta/tau) / (1 - (R + (tau + delta)/2 + lag)/M) (Daly 2006)",
        "thresholds": _thresholds(risk, fm, ckpt, step_s),
    }


def poisson_tail(mean: float, tail: float = INTERRUPTION_TAIL) -> int:
    """Smallest k with P(X > k) < tail for X ~ Poisson(mean)."""
    k, term = 0, math.exp(-mean)
    cdf = term
    while 1.0 - cdf >= tail:
        k += 1
        term *= mean / k
        cdf += term
    return k


def _thresholds(risk, fm, ckpt, step_s: float | None) -> list[dict[str, Any]]:
    """What an operator watches on the recommended layout, with the number that means the
    plan's assumption has failed."""
    out = []
    if step_s is not None:
        slow = step_s * (1 + STEP_TOLERANCE)
        # A sustained +10% costs 0.1 x step per step; checkpointing and restarting without
        # the slow node costs delta + R. Past this many steps the restart is cheaper.
        steps = math.ceil((ckpt.blocking_s + fm.restart_s) / (STEP_TOLERANCE * step_s))
        out.append({"check": "slow step", "layout": "recommended", "threshold_s": slow, "steps": steps,
                    "signal": f"a straggler (slow GPU, node or link): past {steps:,} steps the slowdown "
                              f"costs more than checkpointing and restarting without the node "
                              f"({ckpt.blocking_s + fm.restart_s:,.0f} s)"})
    per_day = 86_400 / fm.mtbi_s if math.isfinite(fm.mtbi_s) else 0.0
    out.append({"check": "interruptions per day", "layout": "recommended", "expected": per_day,
                "threshold": poisson_tail(per_day),
                "signal": "the cluster fails more often than planned (Poisson 99.9th percentile of "
                          "the planned rate): find repeat offenders, re-derive the interval"})
    out.append({"check": "checkpoint blocking time", "layout": "recommended",
                "threshold_s": 2 * ckpt.blocking_s,
                "signal": "storage is slower than planned; the optimal interval grows as sqrt(delta) "
                          f"(x1.41 at twice delta: {risk.interval_s * math.sqrt(2):,.0f} s)"})
    out.append({"check": "restart time", "layout": "recommended", "threshold_s": 2 * fm.restart_s,
                "signal": "relaunch, NCCL init or checkpoint load is slower than planned"})
    out.append({"check": "goodput", "layout": "recommended", "threshold": risk.goodput - 0.05,
                "signal": "lost work, restarts or checkpoint stalls exceed the model (measure the "
                          "effective training time over a week)"})
    return out


def failure_checks(flops: Flops, cluster: ClusterSpec, training: TrainingSpec,
                   plan: dict[str, Any]) -> list[dict[str, Any]]:
    """What to watch and the threshold that says the plan's assumption has failed; each
    check names the layout it refers to."""
    best, batch = plan["layouts"][0], plan["batch"]
    slower = [run_time(flops.total, cluster.available_gpus, cluster.gpu.peak_flops, training, m)
              for m in MFU_SENSITIVITY]
    out = list(plan.get("run_risk", {}).get("thresholds", []))
    pred = plan.get("prediction")
    if pred:
        exposed = pred["time_breakdown_s"].get("dp_exposed", 0.0)
        out.append({"check": "exposed gradient sync", "layout": "recommended",
                    "threshold_s": exposed * (1 + STEP_TOLERANCE) + 0.01,
                    "predicted_s": exposed,
                    "unoverlapped_s": plan["communication"]["dp_grad_sync_lower_bound_s"],
                    "signal": "the reduction tail after backward is longer than predicted; trace "
                              "the last gradient buckets (the unoverlapped ring bound is the worst case)"})
        total = pred["memory_per_gpu_bytes"]["total"]
        out.append({"check": "peak memory", "layout": "recommended", "threshold_bytes": total,
                    "capacity_bytes": cluster.gpu.memory_bytes,
                    "headroom_bytes": cluster.gpu.memory_bytes - total,
                    "signal": "activations or buffers exceed the prediction; walk the ladder's "
                              "next steps before the headroom is gone"})
    out.append({"check": "MFU below assumption", "layout": "cluster", "assumed_mfu": training.assumed_mfu,
                "predicted_mfu": best.get("mfu"), "mfu_attention_convention": attention_convention(flops.causal),
                "predicted_mfu_causal": best.get("mfu_causal"), "predicted_mfu_noncausal": best.get("mfu_noncausal"),
                "if_lower": [{"mfu": r.assumed_mfu, "days": r.days, "gpu_hours": r.gpu_hours}
                             for r in slower]})
    out.append({"check": "batch drift", "layout": "recommended", "tokens_per_step": batch["tokens_per_step"],
                "target_tokens_per_step": batch["target_tokens_per_step"],
                "signal": "a change from the validated batch needs learning rate and warmup retuned"})
    out.append({"check": "rank health", "layout": "recommended",
                "signal": "loss spikes, NaNs, stalled ranks, slow nodes, per-rank step-time imbalance"})
    return out
