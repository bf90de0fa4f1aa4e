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

The whole explanation has one time budget (EXPLAIN_MIN_S or the request's time limit, from
its start). Every step gets its deadline: each CP-SAT solve stops at it, and building a
step's cost tables (solver.search.terms.term_rows) stops at it with SolverTimeoutError. A fix
not started by then is listed under not_tried_time_limit, one cut off under timed_out.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from solver.errors import SolverTimeoutError, SpecError
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
# Time budget of the explanation when nothing fits: at least this long, or the request's
# time limit; fixes not started by then are listed under not_tried_time_limit, fixes cut
# off by it under timed_out.
EXPLAIN_MIN_S = 20.0
# Option values the allow_* fixes offer when the options exclude them, lightest change
# first (each one lowers the memory of the one before; ZeRO-0 and no recompute never do).
LIGHTER_VALUES = {"zero_stages": (1, 2, 3), "recompute": ("selective", "full")}
STRUCTURAL_RELAXATIONS: dict[str, dict[str, Any]] = {
    "gpus": {"allow_fewer_gpus": True},
    "batch": {"batch_tolerance": 0.25},
    "tensor": {"allow_tp_outside_node": True},
    "pipeline": {"allow_uneven_pipeline": True},
}


def _until(options: SearchOptions, deadline: float | None) -> float:
    """A solve's deadline (time.perf_counter() seconds): options.time_limit_s from now, and
    never past the explanation's deadline."""
    own = time.perf_counter() + options.time_limit_s
    return own if deadline is None else min(own, deadline)


def _solve(options: SearchOptions, cp, deadline: float | None):
    """(solver, status name) of one CP-SAT solve bounded by _until(options, deadline).

    Raises: SolverTimeoutError when the deadline has passed before the solve or the solve
    ends undecided (UNKNOWN).
    """
    if deadline is not None and time.perf_counter() > deadline:
        raise SolverTimeoutError("explanation time budget spent")
    solver = make_solver(options, _until(options, deadline))
    name = solver.status_name(solver.solve(cp))
    if name == "UNKNOWN":
        raise SolverTimeoutError("solve not decided within the time limit")
    return solver, name


def structural_core(model, cluster, training, options: SearchOptions,
                    deadline: float | None = None) -> list[str] | None:
    """Rule families that clash (None when some layout satisfies every structural rule).

    deadline (time.perf_counter() seconds) bounds the solve with options.time_limit_s.
    Raises: SolverTimeoutError when the solve is not decided by then.
    """
    lm = LayoutModel(model, cluster, training, options, explain=True)
    solver, name = _solve(options, lm.cp, deadline)
    if name != "INFEASIBLE":
        return None
    by_index = {lit.index: fam for fam, lit in lm.literals.items()}
    return sorted(by_index[i] for i in solver.sufficient_assumptions_for_infeasibility() if i in by_index)


def _structural(model, cluster, training, options, deadline: float) -> dict[str, Any] | None:
    """The structure explanation, or None when the rules admit a layout (or that is undecided)."""
    try:
        core = structural_core(model, cluster, training, options, deadline)
    except SolverTimeoutError:
        return None  # undecided: explain as a memory problem, the search's own verdict
    if core is None:
        return None
    fixes, timed_out = [], []
    for family in core:
        change = STRUCTURAL_RELAXATIONS.get(family)
        if change and any(getattr(options, k) != v for k, v in change.items()):
            relaxed = options.model_copy(update=change)
            try:
                if structural_core(model, cluster, training, relaxed, deadline) is None:
                    fixes.append({"change": "options", "set": change})
            except SolverTimeoutError:
                timed_out.append(family)
    out = {"reason": f"no layout satisfies the {', '.join(core)} rules together "
                     f"({_family_text(model, cluster, training, core, options)})",
           "kind": "structure", "families": core, "fixes": fixes}
    if timed_out:
        out["timed_out"] = timed_out
    return out


def _family_text(model, cluster, training, core: list[str], options: SearchOptions) -> str:
    text = {
        "tensor": f"TP must divide {model.heads} heads / {model.kv_heads} kv heads and fit "
                  f"{cluster.gpus_per_node} GPUs per node",
        "pipeline": f"pp x vpp chunks over {model.layers} layers",
        "context": f"CP must split seq_len {training.seq_len} into 2 x cp chunks",
        "gpus": f"tp x pp x cp x dp must equal {gpu_target(cluster, options)} GPUs",
        "batch": f"dp x micro_batch x accum x {training.seq_len} must hit "
                 f"{training.global_batch_tokens} tokens per step",
        "framework": f"{training.framework} must run the ZeRO stage at that PP, TP and CP "
                     f"(solver/data/frameworks/{training.framework}.json)",
    }
    return "; ".join(text[f] for f in core)


def memory_question_options(options: SearchOptions) -> SearchOptions:
    """The options of a memory-only question (does anything fit; the lightest layout; the
    fewest GPUs that fit), narrowed without changing its answer:
    - vpp = 1: interleaving holds min(p, m) (1 + (p-1)/(p v)) >= min(p, m) stage activations
      on the first rank (memory.in_flight_microbatches; with a split every rank's bound), on
      the same L/p layers (vpp > 1 needs pp x vpp | L), and no other memory term reads vpp;
      vpp = 1 is valid wherever vpp > 1 is (rules.pipeline_ok, interleave_batch_ok).
    - micro_batch = 1 when the batch is exact: then dp x mb x m = B/s gives dp x 1 x (mb m)
      too, and every memory term is nondecreasing in mb at fixed mb x m: activations hold
      mb x min(p, m) = min(mb p, mb m) >= min(p, mb m) sequences, and the logits, SP/PP
      buffers and full recompute's extra layer grow with mb. (With a batch tolerance the
      rounded accumulations break the identity, so the micro-batches stay.)
    tests/search/test_space_defaults.py checks both against the unnarrowed space."""
    update: dict[str, Any] = {"max_vpp": 1}
    if options.batch_tolerance == 0:
        update["max_micro_batch"] = 1
    return options.model_copy(update=update)


def lightest_layout(model, cluster, training, options, cost_options=None,
                    deadline: float | None = None) -> dict[str, Any] | None:
    """The layout with the least per-GPU memory (memory limit dropped), re-evaluated.

    CP-SAT minimizes the rows' memory parts (rounded down to MEMORY_UNIT_BYTES) over the
    same two-table model without the fit constraints (a memory question: the tables are
    built without time columns). Raises: SolverTimeoutError when the tables or the solve
    are not done by `deadline` (time.perf_counter() seconds).
    """
    from solver.cost.estimate import estimate_layout
    from solver.search.model import SearchModel, coefficients
    from solver.search.terms import term_rows

    options = memory_question_options(options)
    rows = term_rows(LayoutModel(model, cluster, training, options), cost_options, with_time=False,
                     deadline=deadline)
    if not rows.pipe_keys:
        return None
    sm = SearchModel(rows, coefficients(rows, options.model_copy(update={"objective": "step_time"}),
                                        training),
                     range(len(rows.pipe_keys)), range(len(rows.shard_keys)), memory_limit=False)
    sm.cp.minimize(sm.expr([memory_floor(b) for b in rows.pipe_memory],
                           [memory_floor(b) for b in rows.shard_memory]))
    solver, name = _solve(options, sm.cp, deadline)
    if name not in ("OPTIMAL", "FEASIBLE"):
        return None
    layout = sm.layout(*sm.chosen(solver.value))
    est = estimate_layout(model, cluster, training, layout, cost_options)
    return {"layout": layout.model_dump(), "memory_per_gpu_bytes": est.memory_per_gpu_bytes,
            "usable_bytes": est.memory_margin.usable_bytes}


def fitting_layout(model, cluster, training, options: SearchOptions, cost_options=None,
                   fewest_gpus: bool = False, deadline: float | None = None) -> dict[str, Any] | None:
    """A layout that fits in memory (the fewest GPUs when asked), or None when none does.

    Fitting is a memory question only, so the cost tables are built without their time
    columns (no communication terms, no topology queries). CP-SAT answers it on the same
    two-table model; the layout found is re-evaluated by the cost model. Raises:
    SolverTimeoutError when the tables or the solve are not done by `deadline`
    (time.perf_counter() seconds) or the solve ends undecided.
    """
    from solver.cost.estimate import estimate_layout
    from solver.search.model import Coefficients, SearchModel, useful_rows
    from solver.search.terms import term_rows

    options = memory_question_options(options)
    rows = term_rows(LayoutModel(model, cluster, training, options), cost_options, with_time=False,
                     deadline=deadline)
    if not rows.pipe_keys:
        return None
    gpus = [k[0] * k[1] * k[2] * k[3] if fewest_gpus else 0 for k in rows.shard_keys]
    coef = Coefficients([0] * len(rows.pipe_keys), gpus, 0.0, lambda lo, t: 0.0)
    sm = SearchModel(rows, coef, *useful_rows(rows, coef))
    sm.cp.minimize(sm.objective)
    solver, name = _solve(options, sm.cp, deadline)
    if name not in ("OPTIMAL", "FEASIBLE"):
        return None
    layout = sm.layout(*sm.chosen(solver.value))
    est = estimate_layout(model, cluster, training, layout, cost_options)
    if not est.fits:  # cannot happen: the fit test is the evaluator's own; kept as a guard
        return None
    return {**layout.model_dump(), "gpus": layout.gpus, "step_time_s": est.step_time_s,
            "memory_per_gpu_bytes": {"total": est.memory_per_gpu_bytes["total"]}}


def fix_more_gpus(model, cluster, training, options, cost_options=None,
                  deadline: float | None = None) -> dict[str, Any] | None:
    """The fewest GPUs (same GPU and nodes, up to MORE_GPUS_FACTOR x) with a fitting layout."""
    nodes = min(cluster.nodes * MORE_GPUS_FACTOR, 10_000_000 // cluster.gpus_per_node)
    bigger = cluster.model_copy(update={"nodes": nodes, "unavailable_nodes": ()})
    opts = options.model_copy(update={"allow_fewer_gpus": True, "gpus": None})
    best = fitting_layout(model, bigger, training, opts, cost_options, fewest_gpus=True, deadline=deadline)
    if best is None:
        return None
    return {"change": "more_gpus", "gpus": best["gpus"],
            "nodes": math.ceil(best["gpus"] / cluster.gpus_per_node), "layout": best}


def fix_shorter_sequence(model, cluster, training, options, cost_options=None,
                         deadline: float | None = None) -> dict[str, Any] | None:
    """The longest halved seq_len (same tokens per step) with a fitting layout."""
    seq = training.seq_len // 2
    while seq >= MIN_SEQ_LEN and training.seq_len % seq == 0:
        shorter = training.model_copy(update={"seq_len": seq})
        best = fitting_layout(model, cluster, shorter, options, cost_options, deadline=deadline)
        if best is not None:
            return {"change": "shorter_sequence", "seq_len": seq, "layout": best}
        seq //= 2
    return None


def fix_bigger_gpu(model, cluster, training, options, cost_options=None,
                   deadline: float | None = None) -> dict[str, Any] | None:
    """The catalog GPU with the least memory above the current one that makes a layout fit. A GPU
    the training cannot run on (its FP8 recipe needs a compute capability the GPU lacks or does
    not state, e.g. mxfp8 on an MI300X) is no fix and is passed over: its SpecError named a GPU
    the user never gave and replaced the whole explanation."""
    from topology.catalog import load_gpu, preset_names

    gpus = sorted((load_gpu(n) for n in preset_names("gpus")), key=lambda g: g.memory_gb)
    for gpu in gpus:
        if gpu.memory_gb <= cluster.gpu.memory_gb:
            continue
        try:
            best = fitting_layout(model, cluster.model_copy(update={"gpu": gpu}), training, options,
                                  cost_options, deadline=deadline)
        except SpecError:
            continue
        if best is not None:
            return {"change": "bigger_gpu", "gpu": gpu.name, "memory_gb": gpu.memory_gb, "layout": best}
    return None


def fix_allow(model, cluster, training, options, cost_options, field: str, order: tuple,
              deadline: float | None = None) -> dict | None:
    """The first excluded ZeRO stage / recompute level (lightest change first) that fits."""
    current = getattr(options, field)
    for value in order:
        if value in current:
            continue
        best = fitting_layout(model, cluster, training,
                              options.model_copy(update={field: current + (value,)}), cost_options,
                              deadline=deadline)
        if best is not None:
            return {"change": f"allow_{field}", "value": value, "layout": best}
    return None


def explain_infeasible(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                       options: SearchOptions, cost_options: Any = None,
                       budget_s: float | None = None) -> dict[str, Any]:
    """The reason nothing fits and the smallest fix of each kind the solver could find.

    budget_s: wall-clock budget of the whole explanation, seconds (default: the larger of
    options.time_limit_s and EXPLAIN_MIN_S). Every step is bounded by it (module docstring);
    a step it cuts off is listed under timed_out, a fix it leaves unstarted under
    not_tried_time_limit (each key present only when not empty).
    """
    budget_s = max(options.time_limit_s, EXPLAIN_MIN_S) if budget_s is None else budget_s
    deadline = time.perf_counter() + budget_s
    structural = _structural(model, cluster, training, options, deadline)
    if structural is not None:
        return structural
    timed_out: list[str] = []
    if options.objective == "min_gpus_deadline":
        try:
            if fitting_layout(model, cluster, training, options, cost_options, deadline=deadline) is not None:
                return _deadline(model, cluster, training, options, cost_options)
        except SolverTimeoutError:
            timed_out.append("fits_check")
    light = _or_timed_out(lambda: lightest_layout(model, cluster, training, options, cost_options,
                                                  deadline=deadline), "lightest_layout", timed_out)
    reason = "no layout fits in GPU memory"
    if light is not None:
        need = light["memory_per_gpu_bytes"]["total"]
        reason = (f"no layout fits in GPU memory: the lightest layout needs {need / 1e9:.1f} GB per "
                  f"GPU, {light['usable_bytes'] / 1e9:.1f} GB usable of {cluster.gpu.memory_gb:g} GB")
    args, kw = (model, cluster, training, options, cost_options), {"deadline": deadline}
    tried: dict[str, Callable[[], dict | None]] = {
        f"allow_{field}": partial(fix_allow, *args, field, order, **kw)
        for field, order in LIGHTER_VALUES.items()  # only when the options excluded one
        if not set(order) <= set(getattr(options, field))}
    tried |= {"more_gpus": lambda: fix_more_gpus(*args, **kw),
              "shorter_sequence": lambda: fix_shorter_sequence(*args, **kw),
              "bigger_gpu": lambda: fix_bigger_gpu(*args, **kw)}
    fixes, none_found, not_tried = [], [], []
    for kind, attempt in tried.items():
        if time.perf_counter() > deadline:  # the explanation has a time budget too
            not_tried.append(kind)
            continue
        try:
            found = attempt()
        except SolverTimeoutError:
            timed_out.append(kind)
            continue
        (fixes.append(found) if found is not None else none_found.append(kind))
    out = {"reason": reason, "kind": "memory", "lightest_layout": light, "fixes": fixes,
           "no_fix_found": none_found}
    if not_tried:
        out["not_tried_time_limit"] = not_tried
    if timed_out:
        out["timed_out"] = timed_out
    return out


def _or_timed_out(step, name: str, timed_out: list[str]):
    """step()'s result, or None with `name` added to timed_out when it runs out of time."""
    try:
        return step()
    except SolverTimeoutError:
        timed_out.append(name)
        return None


def _deadline(model, cluster, training, options: SearchOptions, cost_options) -> dict[str, Any]:
    """Layouts fit but none ends by the deadline: the fastest run, found by the search itself."""
    from solver.search.api import search_layouts
    from solver.search.objective import run_steps

    assert options.deadline_s is not None  # only the min_gpus_deadline objective gets here
    fast = search_layouts(model, cluster, training, options.model_copy(
        update={"objective": "step_time", "deadline_s": None, "top_k": 1}),
        cost_options=cost_options, explain=False).layouts[0]
    run_s = run_steps(training, fast.layout) * fast.estimate.step_time_s
    return {"reason": f"layouts fit, but the fastest run takes {run_s / 86400:.2f} days, past the "
                      f"deadline of {options.deadline_s / 86400:.2f} days",
            "kind": "deadline", "fastest_run_s": run_s,
            "fixes": [{"change": "deadline_s", "value": run_s, "layout": fast.as_dict()}]}

