"""Plan assembly: the seed plan's eight estimates for any model, cluster and training spec.

`build_plan` returns the plan JSON contract (issue 2, item 7); `estimate_accounting` the
accounting for one fixed layout. Every number comes from solver.cost.accounting; this
module only arranges them. The layout section lives in ONE function, `ladder_layouts`,
which walks the seed's ladder (reference/seed-70b-plan.md, "Choose a first layout") and
which the cost model + CP-SAT search will replace.

Unit legend: `_bytes` bytes; `_flops` FLOPs; `_s` seconds; `_gb_s` 1e9 bytes/s.
"""
from __future__ import annotations

from typing import Any
from collections.abc import Callable

from solver.cost.accounting import (
    FLOP_CONVENTION, Flops, StateBytes, attention_convention, batch_plan, model_state_bytes, parameter_counts,
    per_gpu_model_state_bytes, ffn_params, ring_allreduce_lower_bound_s, run_time, training_flops,
)
from solver.cost.communication import achieved_link
from solver.cost.options import DEFAULT_OPTIONS
from solver.errors import InfeasibleError, Problem, SpecError
from solver.specs import (
    LayoutSpec, ModelSpec, TrainingSpec, ZeroStage, check_layout_fits_model, tp_splits_heads,
)
from topology.groups import group_links
from topology.spec import ClusterSpec

# Planning assumption (not a measurement): the ladder accepts a layout when its model
# state leaves at least this fraction of GPU memory for activations, temporary buffers,
# communication buffers and allocator margin. The seed's TP8 + ZeRO-1 layout leaves 55%.
MIN_FREE_FRACTION = 0.25
RankLayouts = Callable[[ModelSpec, ClusterSpec, TrainingSpec],
                       tuple[dict[str, Any], list[dict[str, Any]]]]
LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "vpp", "sequence_parallel", "zero_stage",
                 "micro_batch", "recompute")


def layout_dict(layout: LayoutSpec) -> dict[str, Any]:
    """The layout fields of the public contract, in contract order."""
    return {k: getattr(layout, k) for k in LAYOUT_FIELDS}


def layout_fields(entry: dict[str, Any]) -> dict[str, Any]:
    """Every LayoutSpec field a layout entry (ranked layout, ladder rung) carries, placement
    (rank_order) and pipeline split (pipeline_layers) included."""
    return {k: entry[k] for k in LayoutSpec.model_fields if k in entry}


def _state_dict(state: StateBytes) -> dict[str, float]:
    """Per-GPU model state by component (bytes); `model_state` repeats the total."""
    return {"model_state": state.total, **state.as_dict()}


def _grad_sync(model_params: int, training: TrainingSpec, cluster: ClusterSpec,
               layout: LayoutSpec, options: Any = None) -> dict[str, Any]:
    """DP gradient-sync ring lower bound for one layout (seed, "Check communication").

    The message is each rank's unsharded local gradient (params / (TP x PP) x grad bytes):
    all-reduce and reduce-scatter + all-gather move the same ring traffic. The bandwidth is the
    DP link's achieved one under `options` (a calibrated profile's network efficiency; the
    stated busbw without one).
    """
    local = per_gpu_model_state_bytes(model_params, training.precision,
                                      layout.model_copy(update={"zero_stage": 0}))
    ranks = layout.dp * layout.cp  # the distributed-optimizer group (Megatron-LM)
    link = achieved_link(group_links(cluster, layout.tp, layout.cp, layout.dp, layout.pp)["dp"],
                         options or DEFAULT_OPTIONS)
    return {
        "dp_grad_sync_lower_bound_s": ring_allreduce_lower_bound_s(local.gradients, ranks,
                                                                   link.bandwidth_gb_s),
        "gradient_bytes_per_rank": local.gradients,
        "dp_ranks": ranks,
        "dp_bandwidth_gb_s": link.bandwidth_gb_s,
        "dp_crosses_nodes": link.crosses_nodes,
        "formula": "2 (d-1)/d x gradient_bytes_per_rank / dp_bandwidth (ring all-reduce, "
                   "Patarasuk & Yuan 2009)",
    }


def _rank_share_params(model: ModelSpec, training: TrainingSpec, layout: LayoutSpec) -> int:
    """Parameters whose TP x PP share is one rank's: all of a dense model's; for a MoE model
    the routed experts count tp / (ep x etp) times, as EP x ETP splits them instead of TP
    (solver.cost.moe_memory)."""
    pc = parameter_counts(model, training.seq_len)
    if model.moe is None:
        return pc.total
    routed = pc.moe_layers * model.moe.experts * ffn_params(model, model.moe.expert_ffn_hidden)
    return pc.total - routed + round(routed * layout.tp / (layout.ep * layout.expert_tp))


def estimate_accounting(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                        layout: LayoutSpec) -> dict[str, Any]:
    """Accounting for one fixed layout: per-GPU model state, fit, grad-sync bound, batch.

    `fits` compares model state alone with GPU memory (activations are added by the cost
    model later). Raises: SpecError (one Problem per reason) when the layout does not fit
    the model's shapes or needs more GPUs than the cluster has available.
    """
    validate_layout(model, cluster, training, layout)
    n = _rank_share_params(model, training, layout)
    state = per_gpu_model_state_bytes(n, training.precision, layout)
    capacity = cluster.gpu.memory_bytes
    batch = batch_plan(training, layout.dp, layout.micro_batch)
    expert = {"ep": layout.ep, "etp": layout.expert_tp} if model.moe is not None else {}
    return {
        "layout": {**layout_dict(layout), **expert},
        "gpus": layout.gpus,
        "memory_per_gpu_bytes": _state_dict(state),
        "memory_capacity_bytes": capacity,
        "memory_free_bytes": capacity - state.total,
        "fits": state.total <= capacity,
        "communication": _grad_sync(n, training, cluster, layout),
        "batch": _batch_dict(batch, training),
    }


def validate_layout(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                    layout: LayoutSpec) -> None:
    """Shape checks of a layout against the model and the cluster. Raises: SpecError."""
    problems = [Problem(*p.split(": ", 1)) for p in check_layout_fits_model(model, training, layout)]
    if layout.gpus > cluster.available_gpus:
        problems.append(Problem("layout", f"tp*pp*dp*cp = {layout.gpus} GPUs exceeds the "
                                f"cluster's {cluster.available_gpus} available GPUs"))
    if problems:
        raise SpecError("layout does not fit: " + "; ".join(map(str, problems)), problems)


def _batch_dict(batch, training: TrainingSpec) -> dict[str, Any]:
    return {
        "tokens_per_step": batch.tokens_per_step, "steps": batch.steps,
        "grad_accum": batch.grad_accum, "micro_batch": batch.micro_batch,
        "dp": batch.data_parallel, "sequences_per_step": batch.sequences_per_step,
        "seq_len": training.seq_len, "target_tokens_per_step": batch.target_tokens_per_step,
        "formula": "dp x micro_batch x grad_accum x seq_len (TP and CP ranks share sequences)",
    }


# ---------------------------------------------------------------- the layout ladder
def largest_tp(model: ModelSpec, gpus_per_node: int) -> int:
    """Largest TP inside one node that divides the heads and obeys the KV-head rule.

    TP must divide the node (group stays on NVLink), divide the query heads, and either
    divide the KV heads or be a multiple of them (KV heads replicated), as in Megatron-LM.
    """
    ok = [t for t in range(1, gpus_per_node + 1)
          if gpus_per_node % t == 0 and tp_splits_heads(model, t)]
    return max(ok)


def _rung(n: int, training: TrainingSpec, cluster: ClusterSpec, layout: LayoutSpec,
          headroom_fraction: float) -> dict[str, Any]:
    state = per_gpu_model_state_bytes(n, training.precision, layout)
    capacity = cluster.gpu.memory_bytes
    free = capacity - state.total
    return {
        **layout_dict(layout),
        "gpus": layout.gpus,
        "memory_per_gpu_bytes": _state_dict(state),
        "memory_free_bytes": free,
        "free_fraction": free / capacity,
        "fits": free >= headroom_fraction * capacity,
        "framework": training.framework,  # the rung's memory is the seed's capacity recipe, not the framework's
        "memory_recipe": "seed capacity recipe (training.precision)",
    }


def _pp_candidates(model: ModelSpec, gpus_after_tp: int) -> list[int]:
    """Pipeline depths to try, lightest first: powers of two dividing layers and GPUs."""
    out, pp = [], 1
    while pp <= min(model.layers, gpus_after_tp):
        if model.layers % pp == 0 and gpus_after_tp % pp == 0:
            out.append(pp)
        pp *= 2
    return out


def ladder_layouts(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                   headroom_fraction: float = MIN_FREE_FRACTION) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Walk the seed's ladder; return (ladder explanation, layouts best first).

    TP = the largest in-node degree the heads allow; DP = the rest. For PP = 1 (then 2, 4,
    ... only if nothing fits) try ZeRO 0..3 and take the lightest stage whose model state
    leaves `headroom_fraction` of memory free. The layouts list starts with that choice,
    followed by the heavier stages that also fit (the seed's "measure both if close").
    Raises: InfeasibleError when no rung fits.
    """
    gpus = cluster.available_gpus
    n = parameter_counts(model, training.seq_len).total
    tp = largest_tp(model, cluster.gpus_per_node)
    tried: list[dict[str, Any]] = []
    for pp in _pp_candidates(model, gpus // tp):
        rungs = [_rung(n, training, cluster, _ladder_layout(tp, pp, ladder_dp(training, gpus // (tp * pp)), z),
                       headroom_fraction) for z in (0, 1, 2, 3)]
        tried.extend(rungs)
        fitting = [r for r in rungs if r["fits"]]
        if fitting:
            ladder = _ladder_story(model, cluster, tp, pp, tried, fitting[0], headroom_fraction)
            if fitting[0]["dp"] < gpus // (tp * pp):
                ladder["dp_reason"] = (
                    f"capped at the global batch's {batch_sequences(training):,} sequences per step "
                    f"({training.global_batch_tokens:,} tokens / seq_len {training.seq_len:,}); "
                    f"{gpus - fitting[0]['gpus']:,} of {gpus:,} GPUs stay idle (a larger batch or "
                    "more model parallelism would use them)")
            return ladder, fitting
    raise InfeasibleError(
        f"no ladder rung fits: model state does not leave {headroom_fraction:.0%} of "
        f"{cluster.gpu.memory_gb:g} GB free at any ZeRO stage or pipeline depth tried",
        {"tried": tried})


def batch_sequences(training: TrainingSpec) -> int:
    """Sequences in one global batch (at least one)."""
    return max(1, training.global_batch_tokens // training.seq_len)


def ladder_dp(training: TrainingSpec, replicas: int) -> int:
    """DP of a ladder rung: the GPUs left after TP x PP, but no more replicas than the
    global batch has sequences (each replica needs at least one sequence per step, micro-batch
    1); the GPUs beyond that stay idle rather than growing the batch."""
    return min(replicas, batch_sequences(training))


def _ladder_layout(tp: int, pp: int, dp: int, zero_stage: ZeroStage) -> LayoutSpec:
    """The seed's starting choices: SP with TP, selective recompute, one sequence per micro-batch."""
    return LayoutSpec(tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, micro_batch=1,
                      sequence_parallel=tp > 1, recompute="selective")


def _ladder_story(model: ModelSpec, cluster: ClusterSpec, tp: int, pp: int,
                  tried: list[dict[str, Any]], chosen: dict[str, Any],
                  headroom_fraction: float) -> dict[str, Any]:
    return {
        "tp": tp,
        "tp_reason": (f"largest degree <= {cluster.gpus_per_node} GPUs per node dividing "
                      f"{model.heads} heads and compatible with {model.kv_heads} KV heads; "
                      "keeps per-layer activation traffic on the in-node link"),
        "pp": pp, "dp": chosen["dp"],
        "dp_reason": "the remaining GPUs; tensor-parallel ranks are not data replicas",
        "min_free_fraction": headroom_fraction,
        "rungs": tried,
        "chosen_zero_stage": chosen["zero_stage"],
        "memory_left_bytes": chosen["memory_free_bytes"],
        "if_activations_do_not_fit": [
            "reduce the local micro-batch", "checkpoint activations (full recompute)",
            "use sequence or context parallelism for long sequences",
            "then parameter sharding (ZeRO-3) or pipeline parallelism",
        ],
    }


# ---------------------------------------------------------------- the whole plan


def build_plan(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
               rank_layouts: RankLayouts | None = None, cost_options: Any = None,
               step_band: Any = None, search_options: Any = None) -> dict[str, Any]:
    """_build_plan, its searches (rank orders, the ladder's ranking, the scaling grid's rows)
    sharing the terms that neither rank order nor GPU count changes (solver.search.term_share)."""
    from solver.search.term_share import shared_terms

    with shared_terms():
        return _build_plan(model, cluster, training, rank_layouts, cost_options, step_band, search_options)


def _build_plan(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                rank_layouts: RankLayouts | None = None, cost_options: Any = None,
                step_band: Any = None, search_options: Any = None) -> dict[str, Any]:
    """The plan JSON contract: the seed's eight estimates, ranked layouts, checks and stages.

    `rank_layouts(model, cluster, training) -> (summary, layouts best first)` produces the
    layout ranking; it defaults to the CP-SAT search over the cost model
    (solver.layouts.searched_layouts, with `search_options` when given). The seed's ladder
    (`ladder_layouts`) is always walked too, and its choice is predicted and ranked against
    the best layout (`ladder_choice`).
    Batch, communication check and validation stages follow the best layout.

    Keys pinned by the contract: parameters.total, memory.model_state_bytes,
    flops.{parameter_matmul,attention,total}, time.{assumed_mfu,wall_s,gpu_hours},
    batch.{tokens_per_step,steps}, layouts (best first), communication.dp_grad_sync_lower_bound_s;
    `reference` (solver.plan_reference) when the training states a published figure.
    `cost_options` / `step_band` (a calibrated profile's, solver.cost.profile) replace the shipped
    constants and step-time band in the default ranking, the ladder's choice and the prediction.
    Raises: SpecError (training.tokens missing), InfeasibleError (no layout fits).
    """
    from solver.cost.state import per_layout_recipe_note
    from solver.layouts import ladder_or_none, ladder_versus_best, prediction, searched_layouts
    from solver.plan_reference import reference_section
    from solver.plan_risk import failure_checks, run_risk_section
    from solver.plan_stages import validation_stages

    params = parameter_counts(model, training.seq_len)
    n = params.total
    state = model_state_bytes(n, training.precision)
    flops = training_flops(model, training, params.active)
    time = run_time(flops.total, cluster.available_gpus, cluster.gpu.peak_flops, training)
    search, layouts = (rank_layouts or (lambda m, c, t: searched_layouts(
        m, c, t, search_options, cost_options=cost_options, step_band=step_band)))(model, cluster, training)
    ladder, rungs = ladder_or_none(model, cluster, training)
    best = LayoutSpec(**layout_fields(layouts[0]))
    batch = batch_plan(training, best.dp, best.micro_batch)
    comm = _grad_sync(n, training, cluster, best, cost_options)
    plan = {
        "inputs": {"model": model.model_dump(mode="json"),
                   "cluster": cluster.model_dump(mode="json"),
                   "training": training.model_dump(mode="json")},
        "parameters": {"total": n, "active": params.active, "by_component": params.as_dict()},
        "memory": {
            "model_state_bytes": state.total,
            "by_component": {"weights": state.weights, "gradients": state.gradients,
                             "optimizer": state.optimizer},
            "bytes_per_parameter": _bytes_per_param(training),
            "excludes": "activations, temporary kernel buffers, communication buffers, allocator margin",
            "per_layout_recipe": per_layout_recipe_note(training)},
        "flops": _flops_dict(flops),
        "time": {
            "assumed_mfu": time.assumed_mfu, "mfu_attention_convention": attention_convention(flops.causal),
            "gpus": cluster.available_gpus,
            "cluster_peak_flops": time.cluster_peak_flops, "wall_s": time.wall_s,
            "days": time.days, "gpu_hours": time.gpu_hours,
            "price_per_gpu_hour": training.price_per_gpu_hour, "currency": training.currency,
            "cost": time.cost,
        },
        "batch": _batch_dict(batch, training),
        "search": search,
        "ladder": ladder,
        "layouts": layouts,
        "communication": comm,
        "assumptions": _assumptions(training, comm),
    }
    if "time_breakdown_s" in layouts[0]:
        plan["prediction"] = prediction(layouts[0], batch.steps, best.gpus, step_band)
        if rungs:
            chosen = rungs[0]
            plan["ladder_choice"] = {
                **ladder_versus_best(model, cluster, training, chosen, layouts[0], cost_options),
                "communication": _grad_sync(n, training, cluster, LayoutSpec(**layout_fields(chosen)),
                                            cost_options),
                "batch": _batch_dict(batch_plan(training, chosen["dp"], chosen["micro_batch"]),
                                     training)}
    plan["warnings"] = plan_warnings(training, cluster, plan)
    reference = reference_section(model, cluster, training, plan, cost_options)
    if reference is not None:
        plan["reference"] = reference
    plan["run_risk"] = run_risk_section(model, cluster, training, plan, best)
    plan["validation_stages"] = validation_stages(model, cluster, training, plan)
    plan["failure_checks"] = failure_checks(flops, cluster, training, plan)
    return plan


def plan_warnings(training: TrainingSpec, cluster: ClusterSpec, plan: dict[str, Any]) -> list[str]:
    """Sanity warnings (solver.sanity) for the recommended layout: its batch, the inputs, its
    predicted MFU and the cluster's size against the batch."""
    from solver.sanity import batch_warnings, scale_warnings

    mfu = (plan.get("prediction") or {}).get("mfu")
    return batch_warnings(training, plan["batch"]) + scale_warnings(training, cluster, mfu)


def _assumptions(training: TrainingSpec, comm: dict[str, Any]) -> list[str]:
    """What the plan assumed rather than measured (the seed: "report uncertainty")."""
    from solver.plan_stages import CONVERGENCE_FRACTION

    p = training.precision
    return [
        f"{training.assumed_mfu:.0%} MFU with {attention_convention(training.causal_attention_flops)} "
        "attention FLOPs (a planning assumption that traces must replace)",
        f"precision: {p.weight_bytes}-byte weights, {p.grad_bytes}-byte gradients, "
        f"{p.optimizer_moments} x {p.optimizer_moment_bytes}-byte optimizer moments, "
        f"FP32 master weights {'on' if p.master_weights else 'off'}",
        f"the seed ladder accepts a layout when model state leaves >= {MIN_FREE_FRACTION:.0%} "
        "of GPU memory free; the ranked layouts use the cost model's full memory estimate",
        f"gradient sync at {comm['dp_bandwidth_gb_s']:g} GB/s effective per-rank bandwidth, "
        "no overlap with backward (a lower bound, not a prediction)",
        f"convergence stage spends {CONVERGENCE_FRACTION:.0%} of the run's tokens",
    ]


def _bytes_per_param(training: TrainingSpec) -> dict[str, int]:
    one = model_state_bytes(1, training.precision)
    return {"weights": int(one.weights), "gradients": int(one.gradients),
            "optimizer": int(one.optimizer), "total": int(one.total)}


def _flops_dict(f: Flops) -> dict[str, Any]:
    return {
        "parameter_matmul": f.parameter_matmul, "attention": f.attention, "total": f.total,
        "attention_convention": attention_convention(f.causal),
        "attention_non_causal": f.attention_full, "attention_causal": f.attention_causal,
        "total_non_causal": f.parameter_matmul + f.attention_full,
        "total_causal": f.parameter_matmul + f.attention_causal,
        "formula": "6 N T (Kaplan et al. 2020) + 12 S T (H dh) L (seed; causal halves it); "
                   "N = parameters a token uses (all of a dense model; MoE: shared and top-k "
                   "routed experts); MLA: 6 S T H (d_qk + d_v) L",
        "convention": FLOP_CONVENTION,
    }
