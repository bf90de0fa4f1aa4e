"""Fit the cost model's physical constants to a user's measured steps (`trainplan calibrate`).

Fitted constants (solver/cost/options.py): gemm_peak_fraction, attention_peak_fraction,
hbm_fraction, the network efficiency of each tier (intra_node_network_efficiency: inside an
NVLink domain; inter_node_network_efficiency: across domains; achieved / stated busbw) and
dp_overlap_fraction. The last is a framework trait (how much of the backward window a
framework's gradient buckets and streams hide, FRAMEWORK_TRAITS): when the runs come from
several frameworks it is fitted once per framework (theta holds one copy per framework, each
with its own prior), the others are shared.

Method: maximum a posteriori in log space. With theta_j = ln(c_j / c0_j) (c0 the shipped
constant) and r_i = ln(predicted_i / measured_i) of run i,

    minimize  sum_i (r_i / SIGMA_RUN)^2 + sum_j (theta_j / sigma_j)^2,  c_j inside BOUNDS,

by Levenberg-Marquardt with forward-difference Jacobians (Nocedal & Wright 2006, Sec. 10.3;
the prior term is Tikhonov regularisation, i.e. a Gaussian prior on theta). One run moves the
constants only as far as the prior allows, so 1-3 runs cannot produce nonsense; the Laplace
approximation (posterior covariance = inverse Gauss-Newton Hessian) says which constants the runs
pinned down: those whose posterior s.d. is below half the prior's AND whose sensitivity (the
Jacobian column J_ij = d ln step_i / d ln c_j, the elasticity of run i's predicted step) reaches
MIN_SENSITIVITY on some run; a network efficiency on compute-bound runs, or with its traffic
hidden under compute, has J ~ 0 and is reported as not pinned with that reason.

Unit legend: constants are fractions; `_s` seconds; errors are signed fractions pred/meas - 1.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
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
    # achieved / stated busbw: nccl-tests busbw exceeds a nominal NVLink figure by up to ~7%
    # (8x H100 460-480 vs 450 GB/s, options.py) and falls far below it on a misconfigured
    # fabric (PCIe fallback: 35-45 GB/s); 0.25-1.25 covers both without reaching absurdity
    "intra_node_network_efficiency": (0.25, 1.25),
    "inter_node_network_efficiency": (0.25, 1.25),
    "dp_overlap_fraction": (0.05, 1.0),       # share of the window; 1 = full overlap
}
FRAMEWORK_TRAITS = ("dp_overlap_fraction",)
"""Constants fitted per framework when the runs span several: DP overlap depends on how the
framework buckets and schedules its gradient reduction and parameter gathers (Megatron-Core
--overlap-grad-reduce buckets, PyTorch FSDP2's prefetch, DeepSpeed overlap_comm), not on the
hardware. The model has no other framework-dependent step-time constant (the pipeline bubble
is the schedule's (p - 1) / v slots, not a fitted share)."""
SIGMA_PRIOR = math.log(1.5)
"""Prior s.d. sigma_j of ln(c / c0): a constant within 1.5x of the shipped value at one s.d."""
NETWORK_SIGMA_PRIOR = math.log(1.2)
"""... the network efficiencies' (PRIOR_SD): the spec's busbw is meant to be measured
(`trainplan cluster from-nccl-tests`), so the ratio is 1 up to what a plateau misses at the
run's message sizes and concurrency, within 1.2x at one s.d.; a wider prior let two runs move
it to absorb errors that differ run to run (README, calibration gain)."""
PRIOR_SD = {n: NETWORK_SIGMA_PRIOR if n.endswith("network_efficiency") else SIGMA_PRIOR for n in BOUNDS}
SIGMA_RUN = 0.03
"""S.d. of ln(predicted / measured) on a run the constants fit: about the model's median error
on the mature Megatron-Core recipes it is best at (README, DGXC 1.7%; 80% band +-3-5%)."""
PINNED_RATIO = 0.5
"""A constant is pinned down when the runs shrink its s.d. below this share of the prior's."""
MIN_SENSITIVITY = 0.05
"""... and some run's predicted step moves by at least 0.5% when the constant moves by 10%
(|d ln step / d ln c| >= 0.05); below it the runs are compute-bound for that constant (or its
traffic is hidden), whatever the posterior says."""


@dataclass(frozen=True)
class Param:
    """One fitted coordinate: a constant, shared (framework None) or one framework's copy."""

    name: str
    framework: str | None = None

    @property
    def label(self) -> str:
        return self.name if self.framework is None else f"{self.name}[{self.framework}]"


@dataclass(frozen=True)
class Fit:
    """A fitted set of constants and what the runs said about each (keys: Param.label)."""

    options: CostOptions                         # shared constants (and the traits of one framework)
    framework_options: dict[str, CostOptions]    # per framework, when traits were fitted per framework
    constants: dict[str, float]                  # shared constants
    framework_constants: dict[str, dict[str, float]]  # framework -> its fitted traits
    posterior_sd_ratio: dict[str, float]  # posterior s.d. / prior s.d. of ln(c / c0)
    sensitivity: dict[str, float]         # max over runs of |d ln step / d ln c| at the fit
    pinned: list[str]
    not_pinned: list[str]
    not_pinned_reasons: dict[str, str]
    iterations: int

    def options_for(self, framework: str) -> CostOptions:
        """The constants a run of `framework` is predicted with."""
        return self.framework_options.get(framework, self.options)


def run_frameworks(runs: list[dict[str, Any]]) -> list[str]:
    """Each run's training.framework (its default when unstated)."""
    from solver.presets import load_training

    return [load_training(r["training"]).framework for r in runs]


def fit_params(frameworks: list[str]) -> list[Param]:
    """The shared constants, then each framework's traits when there are several frameworks."""
    names = sorted(set(frameworks))
    if len(names) < 2:
        return [Param(n) for n in BOUNDS]
    return ([Param(n) for n in BOUNDS if n not in FRAMEWORK_TRAITS]
            + [Param(n, f) for f in names for n in FRAMEWORK_TRAITS])


def _options(theta: np.ndarray, params: list[Param], framework: str, base: CostOptions) -> CostOptions:
    values = {}
    for t, p in zip(theta, params, strict=True):
        if p.framework in (None, framework):
            lo, hi = BOUNDS[p.name]
            values[p.name] = min(hi, max(lo, getattr(DEFAULT_OPTIONS, p.name) * math.exp(t)))
    return dataclasses.replace(base, **values)


def _theta_bounds(params: list[Param]) -> tuple[np.ndarray, np.ndarray]:
    lo = [math.log(BOUNDS[p.name][0] / getattr(DEFAULT_OPTIONS, p.name)) for p in params]
    hi = [math.log(BOUNDS[p.name][1] / getattr(DEFAULT_OPTIONS, p.name)) for p in params]
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


OptionsFor = Callable[[str], CostOptions]


def log_errors(runs: list[dict[str, Any]], options: CostOptions | OptionsFor,
               frameworks: list[str] | None = None) -> np.ndarray:
    """ln(predicted / measured) per run, under `options` or options_for(run's framework)."""
    if isinstance(options, CostOptions):
        fixed = options
        frameworks, options = [""] * len(runs), (lambda _f: fixed)
    frameworks = frameworks or run_frameworks(runs)
    out = []
    for i, (case, fw) in enumerate(zip(runs, frameworks, strict=True)):
        r = validate_case(case, f"run {i + 1}", options(fw))
        out.append(math.log(r.predicted_step_time_s / (r.measured_step_time_s or math.nan)))
    return np.array(out)


@dataclass(frozen=True)
class _Problem:
    runs: list[dict[str, Any]]
    frameworks: list[str]
    params: list[Param]
    base: CostOptions

    def residuals(self, theta: np.ndarray) -> np.ndarray:
        return log_errors(self.runs, lambda f: _options(theta, self.params, f, self.base), self.frameworks)

    def jacobian(self, theta: np.ndarray, r0: np.ndarray, h: float = 1e-3) -> np.ndarray:
        """Forward differences; backward ones at an upper bound (a forward step there would be
        clipped back and read as zero sensitivity: dp_overlap_fraction ships at its bound 1.0)."""
        upper = _theta_bounds(self.params)[1]
        cols = []
        for j in range(len(theta)):
            d = -h if theta[j] + h > upper[j] else h
            step = theta.copy()
            step[j] += d
            cols.append((self.residuals(step) - r0) / d)
        return np.stack(cols, axis=1)


def _prior_sd(params: list[Param]) -> np.ndarray:
    return np.array([PRIOR_SD[p.name] for p in params])


def _cost(r: np.ndarray, theta: np.ndarray, sd: np.ndarray) -> float:
    return float(np.sum((r / SIGMA_RUN) ** 2) + np.sum((theta / sd) ** 2))


def fit_constants(runs: list[dict[str, Any]], base: CostOptions = DEFAULT_OPTIONS,
                  max_iterations: int = 25) -> Fit:
    """MAP fit of the BOUNDS constants to `runs` (module docstring). Raises: PlannerError."""
    frameworks = run_frameworks(runs)
    prob = _Problem(runs, frameworks, fit_params(frameworks), base)
    lo, hi = _theta_bounds(prob.params)
    theta = np.zeros(len(prob.params))
    r = prob.residuals(theta)
    lam, iterations, sd = 1e-2, 0, _prior_sd(prob.params)
    jac = prob.jacobian(theta, r)
    for it in range(1, max_iterations + 1):
        iterations = it
        a = jac.T @ jac / SIGMA_RUN**2 + np.diag(1 / sd**2)
        g = jac.T @ r / SIGMA_RUN**2 + theta / sd**2
        step = np.linalg.solve(a + lam * np.diag(np.diag(a)), -g)
        trial = np.clip(theta + step, lo, hi)
        r_trial = prob.residuals(trial)
        if _cost(r_trial, trial, sd) < _cost(r, theta, sd):
            theta, r, lam = trial, r_trial, lam / 3
            if np.max(np.abs(step)) < 1e-4:
                break
            jac = prob.jacobian(theta, r)
        else:
            lam *= 4
            if lam > 1e6:
                break
    return _summarize(prob, theta, jac, iterations)


def _reason(sensitivity: float, ratio: float) -> str:
    if sensitivity < MIN_SENSITIVITY:
        return (f"the runs' predicted steps hardly depend on it (max |d ln step / d ln c| = "
                f"{sensitivity:.3f} < {MIN_SENSITIVITY}: compute-bound, or its traffic hidden)")
    return (f"the runs do not separate it from the other constants (posterior s.d. {ratio:.2f} "
            f"of the prior's)")


def _summarize(prob: _Problem, theta: np.ndarray, jac: np.ndarray, iterations: int) -> Fit:
    prior = _prior_sd(prob.params)
    hessian = jac.T @ jac / SIGMA_RUN**2 + np.diag(1 / prior**2)
    sd = np.sqrt(np.diag(np.linalg.inv(hessian)))
    labels = [p.label for p in prob.params]
    ratio = {k: float(s / p) for k, s, p in zip(labels, sd, prior, strict=True)}
    sens = {k: float(np.max(np.abs(jac[:, j]))) for j, k in enumerate(labels)}
    pinned = [k for k in labels if ratio[k] < PINNED_RATIO and sens[k] >= MIN_SENSITIVITY]
    reasons = {k: _reason(sens[k], ratio[k]) for k in labels if k not in pinned}
    shared = _options(theta, prob.params, "", prob.base)  # "": the shared coordinates only
    per_fw = {f: _options(theta, prob.params, f, prob.base)
              for f in sorted({p.framework for p in prob.params if p.framework})}
    return Fit(shared, per_fw,
               {p.name: getattr(shared, p.name) for p in prob.params if p.framework is None},
               {f: {n: getattr(o, n) for n in FRAMEWORK_TRAITS} for f, o in per_fw.items()},
               ratio, sens, pinned, [k for k in labels if k not in pinned], reasons, iterations)


def errors(runs: list[dict[str, Any]], options: CostOptions | OptionsFor) -> list[float]:
    """Signed step-time errors predicted / measured - 1 per run (options: one set, or a
    function of the run's training.framework such as Fit.options_for)."""
    return [math.expm1(x) for x in log_errors(runs, options)]


def leave_one_out(runs: list[dict[str, Any]], base: CostOptions = DEFAULT_OPTIONS) -> list[float] | None:
    """Each run's error predicted by a fit on the others (None for a single run)."""
    if len(runs) < 2:
        return None
    out = []
    for i in range(len(runs)):
        fit = fit_constants(runs[:i] + runs[i + 1:], base)
        out.append(errors([runs[i]], fit.options_for)[0])
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
