"""Run risk: interruptions, the optimal checkpoint interval, lost work and goodput.

Unit legend: `_s` seconds; `_per_gpu_hour` events per GPU-hour; fractions are plain ratios.

The model is the first-order checkpoint/restart model of Daly 2006 ("A higher order
estimate of the optimum checkpoint interval for restart dumps", Future Generation Computer
Systems 22(3), eq. 3 and Sec. 3): a run needing `work_s` of failure-free compute saves a
checkpoint every `tau` seconds of compute, each blocking training for `delta` seconds;
interruptions arrive as a Poisson process of mean time between interruptions M; each costs
a restart R (detection + relaunch + checkpoint load) plus the work since the last durable
checkpoint, on average (tau + delta)/2, plus the background write time `lag` when the save
is asynchronous (the newest checkpoint is durable only `lag` after it starts). Then

    wall = work (1 + delta/tau) + (wall / M) (R + (tau + delta)/2 + lag)
  =>  wall = work (1 + delta/tau) / (1 - (R + (tau + delta)/2 + lag) / M)

The interval that minimises it (d wall / d tau = 0) is, with a = 1 - (R + delta/2 + lag)/M,

    tau* = sqrt(delta^2 + 2 a delta M) - delta

which is Young's sqrt(2 delta M) (Young 1974, "A first order approximation to the optimum
checkpoint interval", CACM 17(9)) when delta, R << M, and Daly's first-order
sqrt(2 delta M) - delta when R << M. An asynchronous save cannot start before the previous
one is durable (Megatron waits on its async queue, torchtitan on the previous future), so
tau >= lag.

Interruptions over the run: wall / M. Goodput (effective training time rate, the fraction
of wall time spent on work that is kept): work / wall.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# When (R + lost work) reaches the mean time between interruptions the run never finishes
# (the denominator of `wall` reaches 0). Below this fraction of useful time the model
# reports the run as not making progress and the search charges MAX_WALL_FACTOR.
MIN_PROGRESS = 1e-3
MAX_WALL_FACTOR = 1.0 / MIN_PROGRESS


@dataclass(frozen=True)
class FailureModel:
    """The inputs of one run's failure model (seconds; rate per GPU-hour)."""

    gpus: int
    interruptions_per_gpu_hour: float
    blocking_s: float  # delta: training waits this long per checkpoint
    lag_s: float  # background write after the blocking part (0 when synchronous)
    restart_s: float  # R: detect + relaunch + load

    @property
    def mtbi_s(self) -> float:
        """Mean time between interruptions of the whole job, s (inf when the rate is 0)."""
        rate = self.interruptions_per_gpu_hour * self.gpus / 3600.0
        return math.inf if rate == 0 else 1.0 / rate


def optimal_interval_s(m: FailureModel) -> float:
    """tau* = sqrt(delta^2 + 2 a delta M) - delta, at least the async lag (module docstring)."""
    M, d = m.mtbi_s, m.blocking_s
    if math.isinf(M):
        return math.inf
    a = 1.0 - (m.restart_s + d / 2 + m.lag_s) / M
    if a <= 0 or d <= 0:
        return max(m.lag_s, 0.0) if a > 0 else math.nan
    return max(math.sqrt(d * d + 2 * a * d * M) - d, m.lag_s)


def wall_factor(m: FailureModel, interval_s: float) -> float:
    """wall / work at checkpoint interval `interval_s` (Daly 2006, first order); inf when
    the run makes no progress."""
    M = m.mtbi_s
    save = 1.0 + (m.blocking_s / interval_s if interval_s > 0 and not math.isinf(interval_s) else 0.0)
    if math.isinf(M):
        return save
    useful = 1.0 - (m.restart_s + (interval_s + m.blocking_s) / 2 + m.lag_s) / M
    return math.inf if useful < MIN_PROGRESS else save / useful


def optimal_wall_factor(m: FailureModel) -> float:
    """wall / work at the optimal interval, capped at MAX_WALL_FACTOR (the search's charge
    for a run that cannot make progress)."""
    tau = optimal_interval_s(m)
    if math.isnan(tau):
        return MAX_WALL_FACTOR
    return min(wall_factor(m, tau), MAX_WALL_FACTOR)


@dataclass(frozen=True)
class RunRisk:
    """Expected outcome of a run of `work_s` failure-free seconds under FailureModel `m`."""

    work_s: float
    interval_s: float
    wall_s: float
    interruptions: float
    checkpoints: float
    checkpoint_overhead_s: float
    lost_work_s: float
    restart_total_s: float

    @property
    def goodput(self) -> float:
        return 0.0 if math.isinf(self.wall_s) else self.work_s / self.wall_s


def run_risk(m: FailureModel, work_s: float, interval_s: float | None = None) -> RunRisk:
    """Expected interruptions, lost work, restart time and wall time for `work_s` seconds of
    failure-free training at the optimal interval (or `interval_s`).

    interruptions = wall / M; lost work = interruptions x ((tau + delta)/2 + lag);
    restarts = interruptions x R; checkpoints = work / tau, each blocking delta.
    """
    tau = optimal_interval_s(m) if interval_s is None else interval_s
    factor = math.inf if math.isnan(tau) else wall_factor(m, tau)
    wall = work_s * factor
    n = 0.0 if math.isinf(m.mtbi_s) else wall / m.mtbi_s
    ckpts = 0.0 if math.isinf(tau) or math.isnan(tau) else work_s / tau
    lost = n * ((tau + m.blocking_s) / 2 + m.lag_s) if n and not math.isinf(n) else 0.0
    return RunRisk(work_s, tau, wall, n, ckpts, ckpts * m.blocking_s, lost, n * m.restart_s)


def failure_model(cluster, checkpoint, gpus: int) -> FailureModel:
    """The FailureModel of a run on `gpus` GPUs of `cluster` (topology.spec.FailureSpec) that
    saves `checkpoint` (solver.cost.checkpoint.CheckpointCost): R = detect + relaunch + load."""
    f = cluster.failures
    return FailureModel(gpus=gpus, interruptions_per_gpu_hour=f.interruptions_per_gpu_hour,
                        blocking_s=checkpoint.blocking_s,
                        lag_s=checkpoint.write_s - checkpoint.blocking_s if checkpoint.asynchronous else 0.0,
                        restart_s=f.detect_s + f.relaunch_s + checkpoint.load_s)
