"""Why nothing fits, and the smallest change that makes it fit, each found by the solver.

1. Structure: the layout model alone (no cost terms) with one assumption literal per rule
   family; an infeasible core names the families that clash, and each option that would
   relax one (fewer GPUs, batch tolerance, TP across nodes, uneven stages) is re-solved.
2. Memory: the memory limit is dropped and the per-GPU memory minimized; the lightest
   layout, re-evaluated by the cost model, gives the reason (needs X of Y usable bytes).
3. Fixes, each a CP-SAT solve on the changed problem (fitting is a memory question, so the
   tables are built without time columns) whose layout the cost model then accepts: the
   lightest excluded ZeRO stage / recompute level that fits, when the options excluded some; the fewest GPUs (GPU count
   minimized on a cluster of the same nodes, up to 64x larger); the longest sequence
   (halving seq_len, same tokens per step); the smallest catalog GPU with more memory.
"""
from __future__ import annotations

import math
import time
from typing import Any

from solver.search.cpsat import LayoutModel, make_solver
from solver.search.options import SearchOptions
from solver.search.rules import gpu_target
from solver.search.scaling import memory_floor
from solver.specs import ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

# How far the "more GPUs" fix looks: up to this many times the available GPUs.
MORE_GPUS_FACTOR = 64
# Shortest sequence the "shorter sequence" fix tries.
MIN_SEQ_LEN = 256
# Time budget of the fix search when nothing fits: at least this long, or the request's
# time limit; the fixes not reached by then are listed under not_tried_time_limit.
EXPLAIN_MIN_S = 20.0
STRUCTURAL_RELAXATIONS = {
    "gpus": {"allow_fewer_gpus": True},
    "batch": {"batch_tolerance": 0.25},
    "tensor": {"allow_tp_outside_node": True},
    "pipeline": {"allow_uneven_pipeline": True},
}


def structural_core(model, cluster, training, options: SearchOptions) -> list[str] | None:
    """Rule families that clash (None when some layout satisfies every structural rule)."""
    lm = LayoutModel(model, cluster, training, options, explain=True)
    solver = make_solver(options, time.perf_counter() + options.time_limit_s)
    name = solver.status_name(solver.solve(lm.cp))
    if name != "INFEASIBLE":
        return None
    by_index = {lit.index: fam for fam, lit in lm.literals.items()}
    return sorted(by_index[i] for i in solver.sufficient_assumptions_for_infeasibility() if i in by_index)


def _structural(model, cluster, training, options) -> dict[str, Any] | None:
    core = structural_core(model, cluster, training, options)
    if core is None:
        return None
    fixes = []
    for family in core:
        change = STRUCTURAL_RELAXATIONS.get(family)
        if change and any(getattr(options, k) != v for k, v in change.items()):
            relaxed = options.model_copy(update=change)
            if structural_core(model, cluster, training, relaxed) is None:
                fixes.append({"change": "options", "set": change})
    return {"reason": f"no layout satisfies the {', '.join(core)} rules together "
                      f"({_family_text(model, cluster, training, core, options)})",
            "kind": "structure", "families": core, "fixes": fixes}


def _family_text(model, cluster, training, core: list[str], options: SearchOptions) -> str:
    text = {
        "tensor": f"TP must divide {model.heads} heads / {model.kv_heads} kv heads and fit "
                  f"{cluster.gpus_per_node} GPUs per node",
        "pipeline": f"pp x vpp chunks over {model.layers} layers",
        "context": f"CP must split seq_len {training.seq_len} into 2 x cp chunks",
        "gpus": f"tp x pp x cp x dp must equal {gpu_target(cluster, options)} GPUs",
        "batch": f"dp x micro_batch x accum x {training.seq_len} must hit "
                 f"{training.global_batch_tokens} tokens per step",
    }
    return "; ".join(text[f] for f in core)


def lightest_layout(model, cluster, training, options, cost_options=None) -> dict[str, Any] | None:
    """The layout with the least per-GPU memory (memory limit dropped), re-evaluated.

    CP-SAT minimizes the rows' memory parts (rounded down to MEMORY_UNIT_BYTES) over the
    same two-table model without the fit constraints.
    """
    from solver.cost.estimate import estimate_layout
    from solver.search.model import SearchModel, coefficients
    from solver.search.terms import term_rows

    rows = term_rows(LayoutModel(model, cluster, training, options), cost_options)
    if not rows.pipe_keys:
        return None
    sm = SearchModel(rows, coefficients(rows, options.model_copy(update={"objective": "step_time"}),
                                        training),
                     range(len(rows.pipe_keys)), range(len(rows.shard_keys)), memory_limit=False)
    sm.cp.minimize(sm.expr([memory_floor(b) for b in rows.pipe_memory],
                           [memory_floor(b) for b in rows.shard_memory]))
    solver = make_solver(options, time.perf_counter() + options.time_limit_s)
    if solver.status_name(solver.solve(sm.cp)) not in ("OPTIMAL", "FEASIBLE"):
        return None
    layout = sm.layout(*sm.chosen(solver.value))
    est = estimate_layout(model, cluster, training, layout, cost_options)
    return {"layout": layout.model_dump(), "memory_per_gpu_bytes": est.memory_per_gpu_bytes,
            "usable_bytes": _usable_bytes(cluster, cost_options)}


def _usable_bytes(cluster: ClusterSpec, cost_options) -> float:
    from solver.cost.options import DEFAULT_OPTIONS

    margin = (cost_options or DEFAULT_OPTIONS).memory_margin_fraction
    return cluster.gpu.memory_bytes * (1 - margin)


def fitting_layout(model, cluster, training, options: SearchOptions, cost_options=None,
                   fewest_gpus: bool = False) -> dict[str, Any] | None:
    """A layout that fits in memory (the fewest GPUs when asked), or None when none does.

    Fitting is a memory question only, so the cost tables are built without their time
    columns (no communication terms, no topology queries). CP-SAT answers it on the same
    two-table model; the layout found is re-evaluated by the cost model.
    """
    from solver.cost.estimate import estimate_layout
    from solver.search.model import Coefficients, SearchModel, useful_rows
    from solver.search.terms import term_rows

    rows = term_rows(LayoutModel(model, cluster, training, options), cost_options, with_time=False)
    if not rows.pipe_keys:
        return None
    gpus = [k[0] * k[1] * k[2] * k[3] if fewest_gpus else 0 for k in rows.shard_keys]
    coef = Coefficients([0] * len(rows.pipe_keys), gpus, 0.0, lambda lo, t: 0.0)
    sm = SearchModel(rows, coef, *useful_rows(rows, coef))
    sm.cp.minimize(sm.objective)
    solver = make_solver(options, time.perf_counter() + options.time_limit_s)
    if solver.status_name(solver.solve(sm.cp)) not in ("OPTIMAL", "FEASIBLE"):
        return None
    layout = sm.layout(*sm.chosen(solver.value))
    est = estimate_layout(model, cluster, training, layout, cost_options)
    if not est.fits:  # cannot happen: the fit test is the evaluator's own; kept as a guard
        return None
    return {**layout.model_dump(), "gpus": layout.gpus, "step_time_s": est.step_time_s,
            "memory_per_gpu_bytes": {"total": est.memory_per_gpu_bytes["total"]}}


def fix_more_gpus(model, cluster, training, options, cost_options=None) -> dict[str, Any] | None:
    """The fewest GPUs (same GPU and nodes, up to MORE_GPUS_FACTOR x) with a fitting layout."""
    nodes = min(cluster.nodes * MORE_GPUS_FACTOR, 10_000_000 // cluster.gpus_per_node)
    bigger = cluster.model_copy(update={"nodes": nodes, "unavailable_nodes": ()})
    opts = options.model_copy(update={"allow_fewer_gpus": True, "gpus": None})
    best = fitting_layout(model, bigger, training, opts, cost_options, fewest_gpus=True)
    if best is None:
        return None
    return {"change": "more_gpus", "gpus": best["gpus"],
            "nodes": math.ceil(best["gpus"] / cluster.gpus_per_node), "layout": best}


def fix_shorter_sequence(model, cluster, training, options, cost_options=None) -> dict[str, Any] | None:
    """The longest halved seq_len (same tokens per step) with a fitting layout."""
    seq = training.seq_len // 2
    while seq >= MIN_SEQ_LEN and training.seq_len % seq == 0:
        shorter = training.model_copy(update={"seq_len": seq})
        best = fitting_layout(model, cluster, shorter, options, cost_options)
        if best is not None:
            return {"change": "shorter_sequence", "seq_len": seq, "layout": best}
        seq //= 2
    return None


def fix_bigger_gpu(model, cluster, training, options, cost_options=None) -> dict[str, Any] | None:
    """The catalog GPU with the least memory above the current one that makes a layout fit."""
    from topology.catalog import load_gpu, preset_names

    gpus = sorted((load_gpu(n) for n in preset_names("gpus")), key=lambda g: g.memory_gb)
    for gpu in gpus:
        if gpu.memory_gb <= cluster.gpu.memory_gb:
            continue
        best = fitting_layout(model, cluster.model_copy(update={"gpu": gpu}), training, options,
                              cost_options)
        if best is not None:
            return {"change": "bigger_gpu", "gpu": gpu.name, "memory_gb": gpu.memory_gb, "layout": best}
    return None


def fix_allow(model, cluster, training, options, cost_options, field: str, order: tuple) -> dict | None:
    """The first excluded ZeRO stage / recompute level (lightest change first) that fits."""
    current = getattr(options, field)
    for value in order:
        if value in current:
            continue
        best = fitting_layout(model, cluster, training,
                              options.model_copy(update={field: current + (value,)}), cost_options)
        if best is not None:
            return {"change": f"allow_{field}", "value": value, "layout": best}
    return None


def explain_infeasible(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                       options: SearchOptions, cost_options: Any = None) -> dict[str, Any]:
    """The reason nothing fits and the smallest fix of each kind the solver could find."""
    structural = _structural(model, cluster, training, options)
    if structural is not None:
        return structural
    if options.objective == "min_gpus_deadline" and fitting_layout(model, cluster, training, options,
                                                                   cost_options) is not None:
        return _deadline(model, cluster, training, options, cost_options)
    light = lightest_layout(model, cluster, training, options, cost_options)
    reason = "no layout fits in GPU memory"
    if light is not None:
        need = light["memory_per_gpu_bytes"]["total"]
        reason = (f"no layout fits in GPU memory: the lightest layout needs {need / 1e9:.1f} GB per "
                  f"GPU, {light['usable_bytes'] / 1e9:.1f} GB usable of {cluster.gpu.memory_gb:g} GB")
    args = (model, cluster, training, options, cost_options)
    tried = {"allow_zero_stages": lambda: fix_allow(*args, "zero_stages", (1, 2, 3)),
             "allow_recompute": lambda: fix_allow(*args, "recompute", ("selective", "full")),
             "more_gpus": lambda: fix_more_gpus(*args),
             "shorter_sequence": lambda: fix_shorter_sequence(*args),
             "bigger_gpu": lambda: fix_bigger_gpu(*args)}
    fixes, none_found, not_tried = [], [], []
    deadline = time.perf_counter() + max(options.time_limit_s, EXPLAIN_MIN_S)
    for kind, attempt in tried.items():
        if kind.startswith("allow_") and _already_allowed(options, kind):
            continue
        if time.perf_counter() > deadline:  # the explanation has a time budget too
            not_tried.append(kind)
            continue
        found = attempt()
        (fixes.append(found) if found is not None else none_found.append(kind))
    out = {"reason": reason, "kind": "memory", "lightest_layout": light, "fixes": fixes,
           "no_fix_found": none_found}
    if not_tried:
        out["not_tried_time_limit"] = not_tried
    return out


def _deadline(model, cluster, training, options: SearchOptions, cost_options) -> dict[str, Any]:
    """Layouts fit but none ends by the deadline: the fastest run, found by the search itself."""
    from solver.search.api import search_layouts
    from solver.search.objective import run_steps

    fast = search_layouts(model, cluster, training, options.model_copy(
        update={"objective": "step_time", "deadline_s": None, "top_k": 1}),
        cost_options=cost_options, explain=False).layouts[0]
    run_s = run_steps(training, fast.layout) * fast.estimate.step_time_s
    return {"reason": f"layouts fit, but the fastest run takes {run_s / 86400:.2f} days, past the "
                      f"deadline of {options.deadline_s / 86400:.2f} days",
            "kind": "deadline", "fastest_run_s": run_s,
            "fixes": [{"change": "deadline_s", "value": run_s, "layout": fast.as_dict()}]}


def _already_allowed(options: SearchOptions, kind: str) -> bool:
    if kind == "allow_zero_stages":
        return set(options.zero_stages) == {0, 1, 2, 3}
    return set(options.recompute) == {"none", "selective", "full"}
