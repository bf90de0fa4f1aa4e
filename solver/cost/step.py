"""Step time and per-GPU memory, composed from terms that each depend on a few scalars.

This module is the contract between the cost model and the CP-SAT search: a search may
tabulate every term below over only the variables it depends on, then combine the tables
with the SAME composition functions (compose_step_time, compose_memory); estimate_layout
calls exactly these functions, so both agree exactly.

Variables: tp, cp, dp, pp, vpp (ints); sp (bool, sequence parallelism); zero (0-3);
mb (micro-batch, sequences); rc (recompute: none | selective | full);
m = grad_accum (micro-batches per step, from solver.cost.accounting.batch_plan(training,
dp, mb): it depends on dp and mb only); layers = layers_on_rank(L, pp, vpp).
All terms also take the fixed CostContext (model, cluster, training, options).

Time terms (seconds; solver.cost.terms)                       depends on
  layer_compute_s     one layer, one micro-batch: fwd + bwd + recompute   tp, cp, sp, rc, mb
  layer_tp_comm_s     exposed TP collectives, one layer, one micro-batch  tp, cp, sp, rc, mb
  layer_cp_comm_s     exposed CP ring K/V exchange, one layer, one mb     tp, cp, rc, mb
  p2p_per_microbatch_s  PP send/recv per micro-batch on one rank          tp, cp, dp, pp, vpp, mb
  head_extra_s        LM head + loss (+ embedding if pp = 1) per mb       tp, cp, sp, mb, pp
  dp_exposed_s        exposed DP gradient/parameter sync per step         tp, cp, dp, pp, zero, m
  optimizer_s         optimizer step on the local shard                   tp, cp, dp, pp, zero

Composition (compose_step_time; Narayanan et al. 2021, Sec. 2.2: the pipeline runs
m + (p-1)/v micro-batch slots of the slowest stage, bubble fraction (p-1)/(v m)):
  layer_s  = layer_compute_s + layer_tp_comm_s + layer_cp_comm_s
  stage_s  = layers x layer_s + p2p_per_microbatch_s
  step_s   = (m + (pp - 1) / vpp) x stage_s + m x head_extra_s + dp_exposed_s + optimizer_s
The LM-head stage is slower by head_extra_s per micro-batch; the steady state runs at the
slowest stage's pace (m x head_extra_s) while warm-up and cool-down pass through the
other stages ((pp - 1) / vpp slots of stage_s).

Memory terms (bytes per GPU; solver.cost.memory)              depends on
  model_state         weights + gradients + optimizer (ZeRO)             tp, pp, dp, cp, zero
  activation_bytes    first stage, in-flight micro-batches               tp, cp, sp, rc, mb, pp, vpp, m
  logits_bytes        LM-head input + loss buffers, one micro-batch      tp, cp, mb
  comm_buffer_bytes   DP buckets, SP gather, PP send/recv, ZeRO-3        tp, cp, dp, pp, sp, zero, mb
  framework overhead  options.framework_overhead_bytes (constant)
Composition (compose_memory): total = sum of the above; fits iff
  total <= (1 - options.memory_margin_fraction) x GPU memory.
"""
from __future__ import annotations

from dataclasses import dataclass

from solver.cost import memory as M
from solver.cost import terms as T
from solver.cost.terms import CostContext, layers_on_rank
from solver.specs import LayoutSpec


@dataclass(frozen=True)
class TimeTerms:
    """Values of the time terms for one layout (seconds)."""

    layer_compute_s: float
    layer_tp_comm_s: float
    layer_cp_comm_s: float
    p2p_per_microbatch_s: float
    head_extra_s: float
    dp_exposed_s: float
    optimizer_s: float


@dataclass(frozen=True)
class StepTime:
    """Composed step time with its breakdown by component (seconds; sums to step_time_s)."""

    step_time_s: float
    stage_time_s: float    # one micro-batch through the layers of the most loaded rank, with p2p
    breakdown_s: dict[str, float]


def time_terms(ctx: CostContext, layout: LayoutSpec, grad_accum: int) -> TimeTerms:
    """Evaluate every time term for a layout (the scalars are read off the layout)."""
    lo = layout
    per_layer = dict(tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel, recompute=lo.recompute,
                     micro_batch=lo.micro_batch)
    dp_args = dict(tp=lo.tp, cp=lo.cp, dp=lo.dp, pp=lo.pp, zero=lo.zero_stage)
    return TimeTerms(
        layer_compute_s=T.layer_compute_s(ctx, **per_layer),
        layer_tp_comm_s=T.layer_tp_comm_s(ctx, **per_layer),
        layer_cp_comm_s=T.layer_cp_comm_s(ctx, tp=lo.tp, cp=lo.cp, recompute=lo.recompute,
                                          micro_batch=lo.micro_batch),
        p2p_per_microbatch_s=T.p2p_per_microbatch_s(ctx, tp=lo.tp, cp=lo.cp, dp=lo.dp, pp=lo.pp,
                                                    vpp=lo.vpp, micro_batch=lo.micro_batch),
        head_extra_s=T.head_extra_s(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel,
                                    micro_batch=lo.micro_batch, pp=lo.pp),
        dp_exposed_s=T.dp_exposed_s(ctx, **dp_args, grad_accum=grad_accum),
        optimizer_s=T.optimizer_s(ctx, **dp_args),
    )


def compose_step_time(terms: TimeTerms, *, layers: int, pp: int, vpp: int, grad_accum: int) -> StepTime:
    """The one composition: step = (m + (p-1)/v) x stage + m x head + dp_exposed + optimizer.

    The breakdown splits the m steady-state slots by term and puts all (p-1)/v bubble
    slots under pp_bubble.
    """
    m = grad_accum
    stage = (layers * (terms.layer_compute_s + terms.layer_tp_comm_s + terms.layer_cp_comm_s)
             + terms.p2p_per_microbatch_s)
    bubble_slots = (pp - 1) / vpp
    breakdown = {
        "compute": m * layers * terms.layer_compute_s,
        "embedding_lm_head": m * terms.head_extra_s,
        "tp_comm": m * layers * terms.layer_tp_comm_s,
        "cp_comm": m * layers * terms.layer_cp_comm_s,
        "pp_p2p": m * terms.p2p_per_microbatch_s,
        "pp_bubble": bubble_slots * stage,
        "dp_exposed": terms.dp_exposed_s,
        "optimizer": terms.optimizer_s,
    }
    step = ((m + bubble_slots) * stage + m * terms.head_extra_s + terms.dp_exposed_s
            + terms.optimizer_s)
    return StepTime(step_time_s=step, stage_time_s=stage, breakdown_s=breakdown)


def step_time(ctx: CostContext, layout: LayoutSpec, grad_accum: int) -> StepTime:
    """Step time of a layout: time_terms then compose_step_time."""
    return compose_step_time(time_terms(ctx, layout, grad_accum),
                             layers=layers_on_rank(ctx.model.layers, layout.pp, layout.vpp),
                             pp=layout.pp, vpp=layout.vpp, grad_accum=grad_accum)


@dataclass(frozen=True)
class MemoryTerms:
    """Values of the memory terms for one layout (bytes per GPU)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    comm_buffers: float
    framework_overhead: float


def memory_terms(ctx: CostContext, layout: LayoutSpec, grad_accum: int) -> MemoryTerms:
    """Evaluate every memory term for a layout."""
    lo = layout
    state = M.model_state(ctx, tp=lo.tp, pp=lo.pp, dp=lo.dp, cp=lo.cp, zero=lo.zero_stage)
    return MemoryTerms(
        weights=state.weights, gradients=state.gradients, optimizer=state.optimizer,
        activations=M.activation_bytes(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel,
                                       recompute=lo.recompute, micro_batch=lo.micro_batch,
                                       pp=lo.pp, vpp=lo.vpp, grad_accum=grad_accum),
        logits=M.logits_bytes(ctx, tp=lo.tp, cp=lo.cp, micro_batch=lo.micro_batch),
        comm_buffers=M.comm_buffer_bytes(ctx, tp=lo.tp, cp=lo.cp, dp=lo.dp, pp=lo.pp,
                                         sp=lo.sequence_parallel, zero=lo.zero_stage,
                                         micro_batch=lo.micro_batch),
        framework_overhead=ctx.options.framework_overhead_bytes,
    )


def compose_memory(terms: MemoryTerms) -> dict[str, float]:
    """The one memory composition: components, model_state and total (bytes per GPU)."""
    out = {
        "weights": terms.weights, "gradients": terms.gradients, "optimizer": terms.optimizer,
        "model_state": terms.weights + terms.gradients + terms.optimizer,
        "activations": terms.activations, "logits": terms.logits,
        "comm_buffers": terms.comm_buffers, "framework_overhead": terms.framework_overhead,
    }
    out["total"] = (out["model_state"] + terms.activations + terms.logits + terms.comm_buffers
                    + terms.framework_overhead)
    return out


def usable_memory_bytes(ctx: CostContext) -> float:
    """GPU memory a plan may fill: (1 - margin) x capacity (options.memory_margin_fraction)."""
    return ctx.cluster.gpu.memory_bytes * (1.0 - ctx.options.memory_margin_fraction)
