"""`search --framework megatron-core` on NVIDIA's DGXC H100 recipes: per problem (the row's model,
cluster, training and GPU count), the search's best layout and predicted step time, NVIDIA's
own layout's predicted step time, its rank among the fitting layouts and its gap to the best,
whether every returned layout passes Megatron-Core's capability rules
(solver.frameworks.capability.violations), whether NVIDIA's virtual-stage count is inside the
search space (solver.search.space.domains plus the pipeline rules), and the search time.

Problems: the DGXC rows (id prefix `dgxc_`, source NVIDIA DGX Cloud benchmarking recipes) of
../shared/calibration/runs.jsonl (8) and benchmarks/data/heldout_runs.jsonl (24).
Run: `python -m benchmarks.dgxc_search [--limit N] [--top-k K] [--time-limit-s S]`; prints JSON.
Not part of the test gate.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from solver.cost.estimate import estimate_layout
from solver.errors import PlannerError
from solver.frameworks import load_framework
from solver.frameworks.capability import violations
from solver.presets import load_layout, load_model, load_training
from solver.search import rules, search_layouts
from solver.search.api import layout_rank
from solver.search.options import SearchOptions
from solver.search.space import domains
from topology.catalog import load_cluster

HERE = Path(__file__).resolve().parent
FILES = (HERE.parents[1] / "shared" / "calibration" / "runs.jsonl", HERE / "data" / "heldout_runs.jsonl")


def dgxc_rows(files=FILES) -> list[dict[str, Any]]:
    """The DGXC rows of the calibration and held-out files (id prefix dgxc_)."""
    out = []
    for f in files:
        out += [json.loads(t) for t in Path(f).read_text().splitlines() if t.strip()]
    return [r for r in out if r["id"].startswith("dgxc_")]


def problem(row: dict[str, Any]):
    """(model, cluster, training with framework megatron-core, NVIDIA's layout, search options)."""
    training = load_training({**row["training"], "framework": "megatron-core"})
    layout = load_layout(row["layout"])
    return load_model(row["model"]), load_cluster(row["cluster"]), training, layout, {"gpus": layout.gpus}


def vpp_in_space(model, cluster, training, options: dict, pp: int, vpp: int) -> bool:
    """NVIDIA's (pp, vpp) is a value of the search's domains and passes its pipeline rules."""
    opts = SearchOptions.model_validate(options)
    d = domains(model, cluster, training, opts)
    return (pp in d.pp and vpp in d.vpp and rules.pipeline_ok(model, opts, pp, vpp, training)
            and rules.framework_pipeline_ok(training, pp, vpp))


def returned_violations(training, layouts) -> list[dict]:
    """Megatron-Core capability rules any returned layout breaks (empty: all run)."""
    fw = load_framework("megatron-core")
    bad = []
    for r in layouts:
        lo = r.layout
        found = violations(fw, kernel=training.attention_kernel, tp=lo.tp, pp=lo.pp, cp=lo.cp, vpp=lo.vpp,
                           sp=lo.sequence_parallel, zero=lo.zero_stage, accum=r.grad_accum)
        bad += [{"rank": r.rank, "rule": v.rule} for v in found]
    return bad


def short(lo) -> str:
    return (f"TP{lo.tp} PP{lo.pp} VPP{lo.vpp} CP{lo.cp} DP{lo.dp} ZeRO-{lo.zero_stage} mb{lo.micro_batch} "
            f"{lo.recompute}{' SP' if lo.sequence_parallel else ''}")


def run_problem(row: dict[str, Any], top_k: int, time_limit_s: float | None) -> dict[str, Any]:
    model, cluster, training, nvidia, options = problem(row)
    opts = {**options, "top_k": top_k, **({"time_limit_s": time_limit_s} if time_limit_s else {})}
    out: dict[str, Any] = {"id": row["id"], "gpus": nvidia.gpus, "nvidia_layout": short(nvidia),
                           "nvidia_vpp_in_space": vpp_in_space(model, cluster, training, options,
                                                               nvidia.pp, nvidia.vpp)}
    nv = estimate_layout(model, cluster, training, nvidia)
    out["nvidia_step_time_s"] = nv.step_time_s
    out["nvidia_fits"] = nv.fits
    t0 = time.perf_counter()
    try:
        res = search_layouts(model, cluster, training, opts)
    except PlannerError as exc:
        out.update(search_s=time.perf_counter() - t0, error=exc.message)
        return out
    out["search_s"] = time.perf_counter() - t0
    best = res.layouts[0]
    out.update(best_layout=short(best.layout), best_step_time_s=best.estimate.step_time_s,
               returned=len(res.layouts), violations=returned_violations(training, res.layouts),
               nvidia_gap=nv.step_time_s / best.estimate.step_time_s - 1.0)
    t1 = time.perf_counter()
    rank = layout_rank(model, cluster, training, nvidia, options, best_step_time_s=best.estimate.step_time_s,
                       estimate=nv)
    out["rank_s"] = time.perf_counter() - t1
    out["nvidia_rank"] = [rank.get("rank_min"), rank.get("rank_max")]
    out["fitting_layouts"] = rank.get("fitting_layouts")
    return out


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over the problems; NVIDIA's gap to the search's best only where NVIDIA's layout
    fits the planning capacity (a layout above it is not a candidate, so its gap is negative
    and its rank is where it would stand)."""
    ok = [r for r in results if "error" not in r]
    gaps = [r["nvidia_gap"] for r in ok if r["nvidia_fits"]]
    return {
        "problems": len(results), "searched": len(ok), "errors": len(results) - len(ok),
        "returned_layouts_with_violations": sum(bool(r["violations"]) for r in ok),
        "nvidia_vpp_in_space": sum(r["nvidia_vpp_in_space"] for r in results),
        "nvidia_layout_fits_planning": sum(r["nvidia_fits"] for r in results),
        "nvidia_gap_median_when_fits": statistics.median(gaps) if gaps else None,
        "nvidia_gap_max_when_fits": max(gaps) if gaps else None,
        "nvidia_within_2pct_when_fits": sum(g <= 0.02 for g in gaps),
        "nvidia_rank_max_when_fits": max((r["nvidia_rank"][0] for r in ok if r["nvidia_fits"]), default=None),
        "search_s_median": statistics.median(r["search_s"] for r in results),
        "search_s_max": max(r["search_s"] for r in results),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="first N problems only")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--time-limit-s", type=float, default=None, help="search time limit per problem")
    args = ap.parse_args()
    rows = dgxc_rows()[: args.limit]
    results = [run_problem(r, args.top_k, args.time_limit_s) for r in rows]
    print(json.dumps({"summary": summary(results), "problems": results}, indent=2, default=str))


if __name__ == "__main__":
    main()
