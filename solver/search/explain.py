"""Why nothing fits, and the smallest change that makes it fit, each found by the solver.

1. Structure: the layout model alone (no cost terms) with one assumption literal per rule
   family; an infeasible core names the families that clash, and each option that would
   relax one (fewer GPUs, batch tolerance, TP across nodes, uneven stages) is re-solved.
2. Memory: the memory limit is dropped and the per-GPU memory minimized; the lightest
   layout, re-evaluated by the cost model, gives the reason (needs X of Y usable bytes).
3. Fixes, each a real search on the changed problem (so each is a layout the cost model
   accepts): allow ZeRO-3 / full recompute when the options had excluded them; the fewest
   GPUs (objective min_gpus on a larger cluster of the same nodes); the longest sequence
   (halving seq_len, same tokens per step); the smallest catalog GPU with more memory.
"""
from __future__ import annotations

import math
import time
from typing import Any

from solver.errors import InfeasibleError, SolverTimeoutError
from solver.search.cpsat import LayoutModel, make_solver
from solver.search.options import SearchOptions
from solver.specs import ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

# How far the "more GPUs" fix looks: up to this many times the available GPUs.
MORE_GPUS_FACTOR = 64
# Shortest sequence the "shorter sequence" fix tries.
MIN_SEQ_LEN = 256
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
                      f"({_family_text(model, cluster, training, core)})",
            "kind": "structure", "families": core, "fixes": fixes}


def _family_text(model, cluster, training, core: list[str]) -> str:
    text = {
        "tensor": f"TP must divide {model.heads} heads / {model.kv_heads} kv heads and fit "
                  f"{cluster.gpus_per_node} GPUs per node",
        "pipeline": f"pp x vpp chunks over {model.layers} layers",
        "context": f"CP must split seq_len {training.seq_len} into 2 x cp chunks",
        "gpus": f"tp x pp x cp x dp must equal {cluster.available_gpus} GPUs",
        "batch": f"dp x micro_batch x accum x {training.seq_len} must hit "
                 f"{training.global_batch_tokens} tokens per step",
    }
    return "; ".join(text[f] for f in core)


def lightest_layout(model, cluster, training, options, cost_options=None) -> dict[str, Any] | None:
    """The layout with the least per-GPU memory (memory limit dropped), re-evaluated."""
    from solver.cost.estimate import estimate_layout
    from solver.search.api import build, default_terms

    lm, st, _ = build(model, cluster, training, options, default_terms(cost_options), memory_limit=False)
    lm.cp.minimize(st.memory)
    solver = make_solver(options, time.perf_counter() + options.time_limit_s)
    if solver.status_name(solver.solve(lm.cp)) not in ("OPTIMAL", "FEASIBLE"):
        return None
    layout = lm.layout({f: solver.value(v) for f, v in lm.var.items()})
    est = estimate_layout(model, cluster, training, layout, cost_options)
    return {"layout": layout.model_dump(), "memory_per_gpu_bytes": est.memory_per_gpu_bytes,
            "usable_bytes": _usable_bytes(cluster, cost_options)}


def _usable_bytes(cluster: ClusterSpec, cost_options) -> float:
    from solver.cost.options import DEFAULT_OPTIONS

    margin = (cost_options or DEFAULT_OPTIONS).memory_margin_fraction
    return cluster.gpu.memory_bytes * (1 - margin)


def _try(model, cluster, training, options, cost_options) -> dict[str, Any] | None:
    """The best layout of a changed problem, or None when it has none."""
    from solver.search.api import search_layouts

    try:
        res = search_layouts(model, cluster, training, options.model_copy(update={"top_k": 1}),
                             cost_options=cost_options, explain=False)
    except (InfeasibleError, SolverTimeoutError):
        return None
    return res.layouts[0].as_dict()


def fix_more_gpus(model, cluster, training, options, cost_options=None) -> dict[str, Any] | None:
    """The fewest GPUs (same GPU and nodes, up to MORE_GPUS_FACTOR x) with a fitting layout."""
    nodes = min(cluster.nodes * MORE_GPUS_FACTOR, 10_000_000 // cluster.gpus_per_node)
    bigger = cluster.model_copy(update={"nodes": nodes, "unavailable_nodes": ()})
    opts = options.model_copy(update={"objective": "min_gpus", "allow_fewer_gpus": True})
    best = _try(model, bigger, training, opts, cost_options)
    if best is None:
        return None
    return {"change": "more_gpus", "gpus": best["gpus"],
            "nodes": math.ceil(best["gpus"] / cluster.gpus_per_node), "layout": best}


def fix_shorter_sequence(model, cluster, training, options, cost_options=None) -> dict[str, Any] | None:
    """The longest halved seq_len (same tokens per step) with a fitting layout."""
    seq = training.seq_len // 2
    while seq >= MIN_SEQ_LEN and training.seq_len % seq == 0:
        shorter = training.model_copy(update={"seq_len": seq})
        best = _try(model, cluster, shorter, options, cost_options)
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
        best = _try(model, cluster.model_copy(update={"gpu": gpu}), training, options, cost_options)
        if best is not None:
            return {"change": "bigger_gpu", "gpu": gpu.name, "memory_gb": gpu.memory_gb, "layout": best}
    return None


def fix_allow(model, cluster, training, options, cost_options, field: str, value) -> dict | None:
    """Allow an excluded ZeRO stage or recompute level, when the options had excluded it."""
    current = getattr(options, field)
    if value in current:
        return None
    best = _try(model, cluster, training, options.model_copy(update={field: current + (value,)}),
                cost_options)
    return None if best is None else {"change": f"allow_{field}", "value": value, "layout": best}


def explain_infeasible(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                       options: SearchOptions, cost_options: Any = None) -> dict[str, Any]:
    """The reason nothing fits and the smallest fix of each kind the solver could find."""
    structural = _structural(model, cluster, training, options)
    if structural is not None:
        return structural
    light = lightest_layout(model, cluster, training, options, cost_options)
    reason = "no layout fits in GPU memory"
    if light is not None:
        need = light["memory_per_gpu_bytes"]["total"]
        reason = (f"no layout fits in GPU memory: the lightest layout needs {need / 1e9:.1f} GB per "
                  f"GPU, {light['usable_bytes'] / 1e9:.1f} GB usable of {cluster.gpu.memory_gb:g} GB")
    args = (model, cluster, training, options, cost_options)
    fixes = [f for f in (fix_allow(*args, "zero_stages", 3), fix_allow(*args, "recompute", "full"),
                         fix_more_gpus(*args), fix_shorter_sequence(*args), fix_bigger_gpu(*args))
             if f is not None]
    return {"reason": reason, "kind": "memory", "lightest_layout": light, "fixes": fixes}
