"""When no layout can use every GPU: search the largest GPU counts some layout can use.

tp x pp x cp x dp must equal the GPUs used, and each degree has its own rules (TP divides
the heads, PP at most the layers, CP halves the sequence, DP x micro-batch x accumulation
is the global batch). 100,000 = 2^5 x 5^5 GPUs with a power-of-two batch of sequences and
a 126-layer model have no such split, for example. A planner then leaves a few GPUs idle
(as spares) rather than giving up: `usable_gpu_counts` lists, largest first, the counts
below the target that some structurally valid layout reaches (exact: it is the set of
products of the per-degree domains of solver.search.space with vpp = 1, which every
pipeline degree admits), and solver.search.api searches the largest few of them.
"""
from __future__ import annotations

import time
from typing import NoReturn
from collections.abc import Callable

import numpy as np

from solver.errors import InfeasibleError, SolverTimeoutError

from solver.search import rules
from solver.search.options import SearchOptions
from solver.search.result import SearchResult, merge_ranked
from solver.search.space import domains
from solver.specs import ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

# Counts searched when all GPUs cannot be used: at most MAX_COUNTS, each within
# NEAR_FRACTION of the target (the largest usable count is always searched).
MAX_COUNTS = 4
NEAR_FRACTION = 0.05


def usable_gpu_counts(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                      options: SearchOptions, limit: int = MAX_COUNTS) -> list[int]:
    """Up to `limit` GPU counts below the target that a valid layout uses, largest first.

    Counts below (1 - NEAR_FRACTION) x target are returned only when none lies above it
    (then just the largest one).
    """
    target = rules.gpu_target(cluster, options)
    d = domains(model, cluster, training, options.model_copy(update={"allow_fewer_gpus": True}))
    pps = [p for p in d.pp if rules.pipeline_ok(model, options, p, 1, training)]
    if not (d.tp and pps and d.cp and d.dp):
        return []
    left = np.unique(np.multiply.outer(np.array(d.tp, dtype=np.int64), np.array(pps, dtype=np.int64)))
    right = np.unique(np.multiply.outer(np.array(d.cp, dtype=np.int64), np.array(d.dp, dtype=np.int64)))
    best: set[int] = set()
    floor = 0
    for a in left[::-1]:
        prods = a * right[(right <= (target - 1) // a) & (right * a > floor)]
        best.update(int(v) for v in prods)
        if len(best) > limit:
            best = set(sorted(best, reverse=True)[:limit])
            floor = min(best)
    counts = sorted(best, reverse=True)
    near = [c for c in counts if c >= (1 - NEAR_FRACTION) * target]
    return near or counts[:1]


def search_fewer_gpus(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                      options: SearchOptions, t0: float, search: Callable[[SearchOptions], SearchResult],
                      infeasible: Callable[[], NoReturn]) -> SearchResult:
    """The best layouts over the largest usable GPU counts (each searched exactly), merged.

    search(options) runs the exact search with options.gpus set to one count; the result
    ranks the union by the objective (the objective is step time here: a GPU-minimizing
    objective already varies the count). OPTIMAL means optimal over the counts listed in
    `fallback`. Raises: InfeasibleError via `infeasible()` when no count has a fitting layout.
    """
    target = rules.gpu_target(cluster, options)
    counts = usable_gpu_counts(model, cluster, training, options)
    results, unfinished = [], []
    for g in counts:
        left_s = options.time_limit_s - (time.perf_counter() - t0)
        if left_s <= 0:
            unfinished.append(g)
            continue
        try:
            results.append(search(options.model_copy(update={"gpus": g, "time_limit_s": left_s})))
        except InfeasibleError:
            continue  # nothing fits on g GPUs (proven)
        except SolverTimeoutError:
            unfinished.append(g)
    if not results:
        if unfinished:
            raise SolverTimeoutError(f"no layout found within {options.time_limit_s} s on "
                                     f"{unfinished} GPUs (no layout uses all {target})")
        infeasible()
    return _merge(results, options, target, counts, unfinished, time.perf_counter() - t0, cluster)


def _merge(results: list[SearchResult], options: SearchOptions, target: int, counts: list[int],
           unfinished: list[int], seconds: float, cluster: ClusterSpec) -> SearchResult:
    layouts, status, bound, gap = merge_ranked(results, options.top_k, complete=not unfinished)
    used = layouts[0].layout.gpus
    why = (f"no layout uses all {target} GPUs (tp x pp x cp x dp cannot equal {target} under the "
           f"head, layer, sequence and batch rules); searched the largest usable GPU counts "
           f"{counts}: the best layout uses {used} GPUs ({target - used} idle)")
    notes = [why] + results[0].notes[:1] + ([f"unfinished counts: {unfinished}"] if unfinished else [])
    phases = {"gpu_counts": {res.layouts[0].layout.gpus: res.phases for res in results}}
    return SearchResult(layouts, status, seconds, options.objective,
                        bound, gap, sum(res.solves for res in results),
                        sum(res.evaluated for res in results), None, notes, phases,
                        gpus_available=cluster.available_gpus, fallback=why,
                        candidates=[c for res in results for c in (res.candidates or res.layouts)])
