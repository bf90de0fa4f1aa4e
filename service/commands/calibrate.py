"""`trainplan calibrate RUNS.jsonl -o profile.json`: fit the cost model's constants to measured
steps (solver.cost.calibrate) and write a profile that plan / search / estimate / validate take
with --profile. `trainplan calibrate --measure --model M --cluster C --training T [--layout L]`
measures them with microbenchmarks instead (service/measure.py) and writes the same profile.
Exit codes: 0 written, 2 bad input (unreadable file, bad line, no measured run)."""
from __future__ import annotations

import argparse
import hashlib
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any, get_args

from service.cli import emit
from solver.cost.calibrate import (
    BOUNDS, FRAMEWORK_TRAITS, PRIOR_SD, SIGMA_RUN, check_framework, errors, fit_constants, leave_one_out,
    measured_runs, median_abs, run_frameworks,
)
from solver.cost.options import DEFAULT_OPTIONS
from solver.cost.profile import PROFILE_SCHEMA
from solver.cost.version import MODEL_VERSION
from solver.errors import SpecError
from solver.frameworks.profile import FrameworkName


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="fit the cost model's constants to measured runs; write a profile")
    p.add_argument("runs", nargs="?", help="JSON-lines file of measured runs (schema of calibration/runs.jsonl)")
    p.add_argument("--framework", choices=get_args(FrameworkName), default=None,
                   help="use only the runs of this training.framework and record it in the profile")
    p.add_argument("-o", "--output", required=True, help="where to write the profile (JSON)")
    p.add_argument("--format", choices=("json", "md"), default="md",
                   help="output format: json, md (default: md); a report, as for plan")
    m = p.add_argument_group("--measure: microbenchmarks on this machine (torch if installed, else numpy)")
    m.add_argument("--measure", action="store_true", help="measure GEMM, attention, HBM copy and collectives")
    m.add_argument("--model", help="model preset or JSON path (the GEMM shapes)")
    m.add_argument("--cluster", help="cluster preset or JSON path (the peaks the fractions divide by)")
    m.add_argument("--training", help="training preset or JSON path (sequence length)")
    m.add_argument("--layout", default='{"tp": 1, "pp": 1, "dp": 1}', help="layout (TP splits the GEMMs)")
    m.add_argument("--max-dim", type=int, default=None, help="cap every GEMM/attention dimension (quick runs)")
    m.add_argument("--repeats", type=int, default=5, help="timed repeats per kernel (median counts)")
    p.set_defaults(run=run)


def _read(path: str) -> tuple[list[dict[str, Any]], str]:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SpecError(f"runs: cannot read '{path}': {exc.strerror}") from None
    try:
        text_lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise SpecError(f"runs: '{path}' is not UTF-8 text") from None
    cases = []
    for number, text in enumerate(text_lines, start=1):
        if not text.strip():
            continue
        try:
            case = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"runs: line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(case, dict):
            raise SpecError(f"runs: line {number}: expected a JSON object")
        cases.append(case)
    return cases, hashlib.sha256(raw).hexdigest()


def build_profile(cases: list[dict[str, Any]], framework: str | None, source: str, sha: str) -> dict[str, Any]:
    """The profile dict (solver.cost.profile) fitted on the measured runs among `cases`."""
    runs = measured_runs(check_framework(cases, framework))
    fit = fit_constants(runs)
    before, after = errors(runs, DEFAULT_OPTIONS), errors(runs, fit.options_for)
    loo = leave_one_out(runs)
    frameworks = run_frameworks(runs)
    return {
        "schema_version": PROFILE_SCHEMA, "model_version": MODEL_VERSION,
        "framework": framework,
        "method": "runs", "constants": fit.constants, "framework_constants": fit.framework_constants,
        "shipped_constants": {k: getattr(DEFAULT_OPTIONS, k) for k in BOUNDS},
        "fitted_on": {"file": source, "sha256": sha, "frameworks": dict(Counter(frameworks)),
                      "runs": [{"id": r.get("id", f"run {i + 1}"), "framework": f,
                                "measured_step_time_s": r["measured"]["step_time_s"]}
                               for i, (r, f) in enumerate(zip(runs, frameworks, strict=True))]},
        "fit": {"prior": "ln(c / shipped) ~ N(0, sd^2) per constant: " + ", ".join(
                    f"{k} sd {v:.3f}" for k, v in PRIOR_SD.items()) + f"; bounds {BOUNDS}",
                "run_sd": SIGMA_RUN, "iterations": fit.iterations,
                "per_framework": list(FRAMEWORK_TRAITS) if fit.framework_constants else [],
                "posterior_sd_ratio": fit.posterior_sd_ratio, "sensitivity": fit.sensitivity,
                "pinned": fit.pinned, "not_pinned": fit.not_pinned, "not_pinned_reasons": fit.not_pinned_reasons},
        "errors": {"before": before, "after": after, "leave_one_out": loo,
                   "median_abs_before": median_abs(before), "median_abs_after": median_abs(after),
                   "median_abs_leave_one_out": None if loo is None else median_abs(loo)},
        "step_log_residuals": None if loo is None else [-math.log1p(e) for e in loo],
    }


def _fitted_rows(p: dict[str, Any]) -> list[str]:
    f = p["fit"]

    def row(label: str, name: str, value: float) -> str:
        return (f"| {label} | {p['shipped_constants'][name]:.3f} | {value:.3f} | "
                f"{f['posterior_sd_ratio'][label]:.2f} | {f['sensitivity'][label]:.3f} | "
                f"{'yes' if label in f['pinned'] else 'no'} |")

    rows = [row(k, k, v) for k, v in p["constants"].items()]
    for fw, traits in p.get("framework_constants", {}).items():
        rows += [row(f"{k}[{fw}]", k, v) for k, v in traits.items()]
    return rows


def render_md(p: dict[str, Any]) -> str:
    e, f = p["errors"], p["fit"]
    loo = e["median_abs_leave_one_out"]
    counts = ", ".join(f"{n} {fw}" for fw, n in p["fitted_on"]["frameworks"].items())
    return "\n".join([
        f"# Calibrated profile ({len(p['fitted_on']['runs'])} runs: {counts}; framework {p['framework'] or 'any'})",
        "", "| constant | shipped | fitted | posterior s.d. / prior | max abs(d ln step / d ln c) | pinned down |",
        "|---|---:|---:|---:|---:|:---:|", *_fitted_rows(p), "",
        f"Median |step-time error| on these runs: {e['median_abs_before']:.1%} shipped -> "
        f"{e['median_abs_after']:.1%} fitted; leave-one-out "
        + ("not possible with one run" if loo is None else f"{loo:.1%}") + ".",
        (f"Fitted per framework: {', '.join(f['per_framework'])} (name[framework] rows)."
         if f["per_framework"] else "One framework: every constant is shared."),
        *(["Not pinned down by these runs (kept near the shipped value by the prior):"]
          + [f"- {k}: {why}" for k, why in f["not_pinned_reasons"].items()]
          if f["not_pinned"] else ["Every constant is pinned down."])])


def measured_profile(args: argparse.Namespace) -> dict[str, Any]:
    """The profile from microbenchmarks (service/measure.py)."""
    from service.measure import measure_profile
    from solver.presets import load_layout, load_model, load_training
    from topology.catalog import load_cluster

    missing = [f"--{n}" for n in ("model", "cluster", "training") if getattr(args, n) is None]
    if missing:
        raise SpecError(f"calibrate --measure: give {', '.join(missing)}")
    if (args.max_dim is not None and args.max_dim < 1) or args.repeats < 1:
        raise SpecError("calibrate --measure: --max-dim and --repeats must be positive")
    m = measure_profile(load_model(args.model), load_cluster(args.cluster), load_training(args.training),
                        load_layout(args.layout), args.max_dim, args.repeats)
    measured = m.pop("constants")
    constants = {k: v["value"] for k, v in measured.items()}
    return {"schema_version": PROFILE_SCHEMA, "model_version": MODEL_VERSION, "framework": args.framework,
            "method": "measure", "constants": constants,
            "shipped_constants": {k: getattr(DEFAULT_OPTIONS, k) for k in BOUNDS},
            "not_measured": [k for k in BOUNDS if k not in constants],
            "fitted_on": {"measurements": m, "backend": m["backend"], "device": m["device"],
                          "fractions": measured},
            "clipped": [k for k, v in measured.items() if v["clipped"]]}


def render_measure(p: dict[str, Any]) -> str:
    m = p["fitted_on"]["measurements"]
    rows = [f"| {k} | {p['shipped_constants'][k]:.3f} | {v:.3f} | {'yes' if k in p['clipped'] else 'no'} |"
            for k, v in p["constants"].items()]
    coll = m["collectives"]
    return "\n".join([f"# Measured profile (backend {m['backend']} on {m['device']})", "",
                      "| constant | shipped | measured | clipped to bounds |", "|---|---:|---:|:---:|", *rows, "",
                      f"GEMM {m['gemm']['achieved_flops_per_s'] / 1e12:.3f} TFLOP/s, attention "
                      f"{m['attention']['achieved_flops_per_s'] / 1e12:.3f} TFLOP/s, copy "
                      f"{m['hbm_copy']['achieved_gb_s']:.1f} GB/s (1 GB = 1e9 bytes).",
                      "Collectives: " + (coll["skipped"] if "skipped" in coll else
                                         f"all-reduce {coll['all_reduce_bus_gb_s']:.1f} GB/s, all-gather "
                                         f"{coll['all_gather_bus_gb_s']:.1f} GB/s bus bandwidth (plateau) over "
                                         f"{coll['ranks']} ranks, {coll['ranks_per_host']} per host: "
                                         f"{coll['per_gpu_gb_s']:.1f} GB/s per GPU, {coll['tier']} "
                                         f"{coll['efficiency']:.2f} of the cluster's stated busbw") + "."])


def run(args: argparse.Namespace) -> int:
    if args.measure:
        profile = measured_profile(args)
    elif args.runs is None:
        raise SpecError("runs: give a JSON-lines file of measured runs (or --measure)")
    else:
        cases, sha = _read(args.runs)
        profile = build_profile(cases, args.framework, args.runs, sha)
    try:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(profile, handle, indent=1)
    except OSError as exc:
        raise SpecError(f"output: cannot write '{args.output}': {exc.strerror}") from None
    emit(profile, args.format, render_measure if args.measure else render_md)
    return 0
