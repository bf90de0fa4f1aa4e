"""Search latency: the seed problem (top-10), a 16,384-GPU and two 100,000-GPU cases, the MoE
problems of issue 13 (Mixtral 8x22B on 512 H100, DeepSeek-V3 on 2048 H800, with EP/ETP), and
CP-SAT against the exhaustive oracle. Prints JSON (medians of repeats, cold first call too).

Run: `python -m benchmarks.search [--repeats N] [--skip-large] [--moe-only [--moe-splits]]`. Not part of the
test gate.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from solver.errors import PlannerError
from solver.presets import load_model, load_training
from solver.search import exhaustive_search, search_layouts
from solver.specs import TrainingSpec
from topology.catalog import load_cluster


def timed(fn, repeats: int) -> dict:
    """First (cold: empty topology and cost caches) and median of the warm repeats, seconds of
    wall time and of this process's CPU time (all its threads: CP-SAT's workers included).
    On a shared machine the CPU seconds are the steadier figure: the wall time also counts
    the time other processes hold the cores."""
    out, times, cpu = None, [], []
    for _ in range(repeats + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"cold_s": times[0], "warm_median_s": statistics.median(times[1:]), "warm_s": times[1:],
            "cold_cpu_s": cpu[0], "warm_cpu_median_s": statistics.median(cpu[1:]),
            "load_average_1min": os.getloadavg()[0], "result": out}


def case(model, cluster, training, repeats: int, top_k: int = 10, **options) -> dict:
    t = timed(lambda: search_layouts(model, cluster, training, {"top_k": top_k, **options}), repeats)
    res = t.pop("result")
    best = res.layouts[0]
    return {**t, "gpus": cluster.gpus, "gpus_used": res.gpus_used, "fallback": res.fallback,
            "status": res.status, "solves": res.solves,
            "evaluated": res.evaluated, "phases_last_s": res.phases,
            "best": {**best.layout.model_dump(), "pipeline_split": best.pipeline_split,
                     "step_time_s": best.estimate.step_time_s,
                     "mfu": best.estimate.mfu}}


HF = "tests/fixtures/hf"
# The MoE problems: (model config, cluster preset, nodes, training). Batches and tokens are
# assumptions stated here: Mixtral 8x22B 1,024 x 4,096-token sequences (4.2M tokens, 1T tokens;
# Mistral published neither); DeepSeek-V3 15,360 x 4,096 (its report, sec. 4.2: batch ramped to
# 15,360 sequences; 14.8T tokens on 2,048 H800).
MOE_PROBLEMS = {
    "mixtral_8x22b_512_h100": (f"{HF}/mixtral-8x22b/config.json", "dgx-h100-superpod", 64,
                               TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 1024, tokens=1e12)),
    "deepseek_v3_2048_h800": (f"{HF}/deepseek-v3/config.json", "h800-2048", 256,
                              TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 15360, tokens=14.8e12)),
}


def moe_case(name: str, repeats: int, **options) -> dict:
    """One MoE problem's top-10 timing and best layout (EP/ETP included), or why it is refused;
    options: search options (e.g. moe_splits, the plan default: solver.search.moe_split)."""
    path, preset, nodes, training = MOE_PROBLEMS[name]
    model, cluster = load_model(path), load_cluster(preset).model_copy(update={"nodes": nodes})
    try:
        out = case(model, cluster, training, repeats, **options)
    except PlannerError as exc:
        return {"refused": str(exc)}
    res = search_layouts(model, cluster, training, {"top_k": 10, **options})
    out["top10"] = [{**{k: r.layout.model_dump()[k] for k in ("tp", "pp", "vpp", "dp", "cp", "ep", "etp")},
                     "step_time_s": r.estimate.step_time_s} for r in res.layouts]
    return out


def seed_vs_exhaustive(model, cluster, training) -> dict:
    t0 = time.perf_counter()
    ex = exhaustive_search(model, cluster, training)
    ex_s = time.perf_counter() - t0
    res = search_layouts(model, cluster, training, {"top_k": 10})
    same = [round(e.objective_units) for e in ex[:10]] == [round(r.objective_units) for r in res.layouts]
    return {"exhaustive_s": ex_s, "exhaustive_layouts_fitting": len(ex), "cpsat_warm_s": res.seconds,
            "top10_objectives_equal": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-large", action="store_true", help="only the seed cases")
    ap.add_argument("--moe-only", action="store_true", help="only the MoE problems")
    ap.add_argument("--moe-splits", action="store_true",
                    help="the MoE problems with first/last pipeline splits (options.moe_splits, on in plans)")
    args = ap.parse_args()
    if args.moe_only:
        splits = {"moe_splits": True} if args.moe_splits else {}
        print(json.dumps({n: moe_case(n, args.repeats, **splits) for n in MOE_PROBLEMS}, indent=2, default=str))
        return
    model, cluster, training = load_model("seed-70b"), load_cluster("seed-512"), load_training("seed-300b")
    out = {"seed_top10": case(model, cluster, training, args.repeats)}
    out["seed_cpsat_vs_exhaustive"] = seed_vs_exhaustive(model, cluster, training)
    variants: dict[str, dict[str, Any]] = {"min_cost": {"objective": "min_cost"},
                                           "allow_fewer_gpus": {"allow_fewer_gpus": True},
                                           "min_gpus": {"objective": "min_gpus"}}
    for name, opts in variants.items():
        out[f"seed_{name}_top10"] = case(model, cluster, training, 2, **opts)
    for name in MOE_PROBLEMS:
        out[name] = moe_case(name, 2)
    if not args.skip_large:
        big_batch = TrainingSpec(seq_len=8192, global_batch_tokens=8192 * 2048, tokens=15e12)
        c16k = cluster.model_copy(update={"name": "seed-16384", "nodes": 2048})
        out["gpus_16384_top10"] = case(model, c16k, big_batch, 2)
        # 100,000 GPUs (12,500 nodes x 8). The seed model's 80 layers admit pp 5 | 100,000, and a
        # 2,500-sequence batch (20,480,000 tokens) a DP degree that divides it: all GPUs used.
        c100k = cluster.model_copy(update={"name": "seed-100000", "nodes": 12500})
        batch_2500 = TrainingSpec(seq_len=8192, global_batch_tokens=8192 * 2500, tokens=15e12)
        out["gpus_100000_top10"] = case(model, c100k, batch_2500, 2)
        # The same with every stage charged separately and the split chosen (pp 25 over 80 layers).
        out["gpus_100000_split_stages_top10"] = case(model, c100k, batch_2500, 2, split_stages=True)
        # Llama 3 405B with a power-of-two batch: 100,000 = 2^5 x 5^5 has no tp x pp x cp x dp
        # split, so the search falls back to the largest usable GPU counts (reported).
        out["gpus_100000_llama405b_fallback_top10"] = case(load_model("llama3-405b"), c100k, big_batch, 2)
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
