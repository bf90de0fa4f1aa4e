"""Fit the cost model's physical constants to a user's measured steps (`trainplan calibrate`).

Fitted constants (solver/cost/options.py): gemm_peak_fraction, attention_peak_fraction,
hbm_fraction, dp_overlap_fraction. Network efficiency per tier is not a constant of the model:
the links' bandwidth_gb_s in the cluster spec is the effective per-GPU figure (set it from
nccl-tests; `trainplan topology`), so calibrate leaves it to the spec and says so.

Method: maximum a posteriori in log space. With theta_j = ln(c_j / c0_j) (c0 the shipped
constant) and r_i = ln(predicted_i / measured_i) of run i,

    minimize  sum_i (r_i / SIGMA_RUN)^2 + sum_j (theta_j / SIGMA_PRIOR)^2,  c_j inside BOUNDS,

by Levenberg-Marquardt with forward-difference Jacobians (Nocedal & Wright 2006, Sec. 10.3;
the prior term is Tikhonov regularisation, i.e. a Gaussian prior on theta). One run moves the
constants only as far as the prior allows, so 1-3 runs cannot produce nonsense; the Laplace
approximation (posterior covariance = inverse Gauss-Newton Hessian) says which constants the runs
pinned down: those whose posterior s.d. is below half the prior's.

Unit legend: constants are fractions; `_s` seconds; errors are signed fractions pred/meas - 1.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from solver.cost.options import DEFAULT_OPTIONS, CostOptions
from solver.cost.validation import validate_case
from solver.errors import PlannerError, SpecError

BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_peak_fraction": (0.20, 0.95),       # options.py: cuBLAS reaches 70-90% of peak
    "attention_peak_fraction": (0.10, 0.90),  # FA-2 35-73% of peak (Dao 2023)
    "hbm_fraction": (0.20, 0.95),             # STREAM copies 75-90% of nominal HBM
    "dp_overlap_fraction": (0.05, 1.0),       # share of the window; 1 = full overlap
}
SIGMA_PRIOR = math.log(1.5)
"""Prior s.d. of ln(c / c0): a constant within 1.5x of the shipped value at one s.d."""
SIGMA_RUN = 0.03
"""S.d. of ln(predicted / measured) on a run the constants fit: about the model's median error
on the mature Megatron-Core recipes it is best at (README, DGXC 1.7%; 80% band +-3-5%)."""
PINNED_RATIO = 0.5
"""A constant is pinned down when the runs shrink its s.d. below this share of the prior's."""


@dataclass(frozen=True)
class Fit:
    """A fitted set of constants and what the runs said about each."""

    options: CostOptions
    constants: dict[str, float]
    posterior_sd_ratio: dict[str, float]  # posterior s.d. / prior s.d. of ln(c / c0)
    pinned: list[str]
    not_pinned: list[str]
    iterations: int


def _with(theta: np.ndarray, base: CostOptions) -> CostOptions:
    values = {}
    for t, (name, (lo, hi)) in zip(theta, BOUNDS.items(), strict=True):
        values[name] = min(hi, max(lo, getattr(DEFAULT_OPTIONS, name) * math.exp(t)))
    return dataclasses.replace(base, **values)


def _theta_bounds() -> tuple[np.ndarray, np.ndarray]:
    lo = [math.log(b[0] / getattr(DEFAULT_OPTIONS, n)) for n, b in BOUNDS.items()]
    hi = [math.log(b[1] / getattr(DEFAULT_OPTIONS, n)) for n, b in BOUNDS.items()]
    return np.array(lo), np.array(hi)


def measured_runs(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cases with measured.step_time_s (each checked now: bad runs raise PlannerError)."""
    runs = []
    for i, case in enumerate(cases, start=1):
        result = validate_case(case, f"run {i}")
        if result.measured_step_time_s is not None:
            runs.append(case)
    if not runs:
        raise SpecError("runs: no run has measured.step_time_s; calibrate needs at least one measured step")
    return runs


def log_errors(runs: list[dict[str, Any]], options: CostOptions) -> np.ndarray:
    """ln(predicted / measured) per run."""
    out = []
    for i, case in enumerate(runs):
        r = validate_case(case, f"run {i + 1}", options)
        out.append(math.log(r.predicted_step_time_s / (r.measured_step_time_s or math.nan)))
    return np.array(out)


def _jacobian(runs, theta, base, r0, h=1e-3):
    cols = []
    for j in range(len(theta)):
        step = theta.copy()
        step[j] += h
        cols.append((log_errors(runs, _with(step, base)) - r0) / h)
    return np.stack(cols, axis=1)


def _cost(r: np.ndarray, theta: np.ndarray) -> float:
    return float(np.sum((r / SIGMA_RUN) ** 2) + np.sum((theta / SIGMA_PRIOR) ** 2))


def fit_constants(runs: list[dict[str, Any]], base: CostOptions = DEFAULT_OPTIONS,
                  max_iterations: int = 25) -> Fit:
    """MAP fit of the BOUNDS constants to `runs` (module docstring). Raises: PlannerError."""
    lo, hi = _theta_bounds()
    theta = np.zeros(len(BOUNDS))
    r = log_errors(runs, _with(theta, base))
    lam, iterations = 1e-2, 0
    jac = _jacobian(runs, theta, base, r)
    for it in range(1, max_iterations + 1):
        iterations = it
        a = jac.T @ jac / SIGMA_RUN**2 + np.eye(len(theta)) / SIGMA_PRIOR**2
        g = jac.T @ r / SIGMA_RUN**2 + theta / SIGMA_PRIOR**2
        step = np.linalg.solve(a + lam * np.diag(np.diag(a)), -g)
        trial = np.clip(theta + step, lo, hi)
        r_trial = log_errors(runs, _with(trial, base))
        if _cost(r_trial, trial) < _cost(r, theta):
            theta, r, lam = trial, r_trial, lam / 3
            if np.max(np.abs(step)) < 1e-4:
                break
            jac = _jacobian(runs, theta, base, r)
        else:
            lam *= 4
            if lam > 1e6:
                break
    return _summarize(theta, jac, base, iterations)


def _summarize(theta: np.ndarray, jac: np.ndarray, base: CostOptions, iterations: int) -> Fit:
    hessian = jac.T @ jac / SIGMA_RUN**2 + np.eye(len(theta)) / SIGMA_PRIOR**2
    sd = np.sqrt(np.diag(np.linalg.inv(hessian)))
    ratio = {name: float(s / SIGMA_PRIOR) for name, s in zip(BOUNDS, sd, strict=True)}
    options = _with(theta, base)
    return Fit(options, {n: getattr(options, n) for n in BOUNDS}, ratio,
               [n for n, v in ratio.items() if v < PINNED_RATIO],
               [n for n, v in ratio.items() if v >= PINNED_RATIO], iterations)


def errors(runs: list[dict[str, Any]], options: CostOptions) -> list[float]:
    """Signed step-time errors predicted / measured - 1 per run."""
    return [math.expm1(x) for x in log_errors(runs, options)]


def leave_one_out(runs: list[dict[str, Any]], base: CostOptions = DEFAULT_OPTIONS) -> list[float] | None:
    """Each run's error predicted by a fit on the others (None for a single run)."""
    if len(runs) < 2:
        return None
    out = []
    for i in range(len(runs)):
        fit = fit_constants(runs[:i] + runs[i + 1:], base)
        out.append(errors([runs[i]], fit.options)[0])
    return out


def median_abs(values: list[float]) -> float:
    return statistics.median(abs(v) for v in values)


def check_framework(runs: list[dict[str, Any]], framework: str | None) -> list[dict[str, Any]]:
    """The runs of `framework` (all runs when None); raises SpecError when none is left."""
    if framework is None:
        return runs
    from solver.presets import load_training

    kept = [r for r in runs if load_training(r["training"]).framework == framework]
    if not kept:
        raise PlannerError(f"--framework: no run states training.framework {framework!r}")
    return kept
