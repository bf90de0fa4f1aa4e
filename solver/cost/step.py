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
                      (+ the multi-token-prediction modules, solver.cost.mtp.mtp_s: + rc, ep, etp, dp)
  dp_exposed_s        exposed DP gradient/parameter sync per step         tp, cp, dp, pp, zero, m
  optimizer_s         optimizer step on the local shard                   tp, cp, dp, pp, zero
  moe_layer_extra_s   a MoE layer beyond a dense one (compute, comm, TP)  tp, cp, sp, rc, mb, ep, etp, dp, pp
                      (solver.cost.moe_comm; dp/optimizer also take ep, etp for MoE models)

Composition (compose_step_time; Narayanan et al. 2021, Sec. 2.2: the pipeline runs
m + (p-1)/v micro-batch slots of the slowest stage, bubble fraction (p-1)/(v m)):
  layer_s  = layer_compute_s + layer_tp_comm_s + layer_cp_comm_s
  stage_s  = layers x layer_s + p2p_per_microbatch_s (+ n_moe x (moe compute + comm), n_moe =
             the busiest rank's MoE layers, moe_layer.busiest_moe_layers; 0 for a dense model)
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

Explicit splits (LayoutSpec.pipeline_layers): time stage by stage (compose_split_step_time,
the embedding on the first stage and the LM head on the last) and memory of the busiest rank
(split_memory_terms: each rank's own parameters and activations); balanced_split and
chosen_split give the split a search assigns. Without a split, the formulas above.
The memory terms and their composition live in solver.cost.step_memory (re-exported here).
"""
from __future__ import annotations

import math
from typing import Any
from dataclasses import dataclass
from collections.abc import Callable

from solver.cost import terms as T
from solver.cost.moe_comm import moe_a2a_unpaired_s, moe_layer_extra_s, overlap_applies, slot_comm_s
from solver.cost.mtp import mtp_s
from solver.cost.moe_layer import busiest_moe_layers, moe_layer_mask, moe_layers_per_rank
from solver.cost.terms import CostContext, layers_on_rank
from solver.cost.step_memory import (  # re-exported: callers import them from here
    MemoryTerms as MemoryTerms, buffer_terms as buffer_terms,
    busiest_stage_terms as busiest_stage_terms, compose_memory as compose_memory,
    dominant_stages as dominant_stages, memory_terms as memory_terms,
    rank_layers as rank_layers, split_memory_terms as split_memory_terms,
    stage_memory_terms as stage_memory_terms, stage_profile as stage_profile,
    stage_state as stage_state, usable_memory_bytes as usable_memory_bytes,
)
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
    embedding_s: float = 0.0  # token embedding per micro-batch (first stage; explicit splits only)
    moe_compute_s: float = 0.0  # a MoE layer's compute beyond a dense layer's, one micro-batch
    moe_comm_s: float = 0.0     # its all-to-all and expert-TP collectives, exposed (solver.cost.moe_comm)
    moe_tp_comm_s: float = 0.0  # its TP-collective change (<= 0: no dense FFN all-gather/reduce-scatter)
    moe_a2a_unpaired_s: float = 0.0  # all-to-all it exposes beyond moe_comm_s in an unpaired slot
    moe_overlap: bool = False   # Megatron's combined 1F1B pairs slots (moe_comm.overlap_applies)
    moe_mask: tuple[bool, ...] = ()  # per layer: MoE or not (model constant; () for a dense model)


@dataclass(frozen=True)
class StepTime:
    """Composed step time with its breakdown by component (seconds; sums to step_time_s)."""

    step_time_s: float
    stage_time_s: float    # one micro-batch through the layers of the most loaded rank, with p2p
    breakdown_s: dict[str, float]


def time_terms(ctx: CostContext, layout: LayoutSpec, grad_accum: int) -> TimeTerms:
    """Evaluate every time term for a layout (the scalars are read off the layout)."""
    lo = layout
    per_layer: dict[str, Any] = {"tp": lo.tp, "cp": lo.cp, "sp": lo.sequence_parallel, "recompute": lo.recompute,
                     "micro_batch": lo.micro_batch}
    dp_args: dict[str, Any] = {"tp": lo.tp, "cp": lo.cp, "dp": lo.dp, "pp": lo.pp, "zero": lo.zero_stage,
                               "ep": lo.ep, "etp": lo.expert_tp}
    moe_args = dict(per_layer, ep=lo.ep, etp=lo.expert_tp, dp=lo.dp, pp=lo.pp)
    moe_c, moe_x, moe_tp = moe_layer_extra_s(ctx, **moe_args)
    return TimeTerms(
        layer_compute_s=T.layer_compute_s(ctx, **per_layer),
        layer_tp_comm_s=T.layer_tp_comm_s(ctx, **per_layer),
        layer_cp_comm_s=T.layer_cp_comm_s(ctx, tp=lo.tp, cp=lo.cp, recompute=lo.recompute,
                                          micro_batch=lo.micro_batch),
        p2p_per_microbatch_s=T.p2p_per_microbatch_s(ctx, tp=lo.tp, cp=lo.cp, dp=lo.dp, pp=lo.pp,
                                                    vpp=lo.vpp, micro_batch=lo.micro_batch),
        head_extra_s=T.head_extra_s(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel,
                                    micro_batch=lo.micro_batch, pp=lo.pp)
        + mtp_s(ctx, **moe_args),  # MTP: last stage
        dp_exposed_s=T.dp_exposed_s(ctx, **dp_args, grad_accum=grad_accum),
        optimizer_s=T.optimizer_s(ctx, **dp_args),
        embedding_s=T.embedding_s(ctx, tp=lo.tp, cp=lo.cp, micro_batch=lo.micro_batch),
        moe_compute_s=moe_c, moe_comm_s=moe_x, moe_tp_comm_s=moe_tp, moe_mask=moe_layer_mask(ctx.model),
        moe_a2a_unpaired_s=moe_a2a_unpaired_s(ctx, **moe_args),
        moe_overlap=overlap_applies(ctx.training, ep=lo.ep, recompute=lo.recompute))


def compose_step_time(terms: TimeTerms, *, layers: int, pp: int, vpp: int, grad_accum: int) -> StepTime:
    """The one composition: step = (m + (p-1)/v) x stage + m x head + dp_exposed + optimizer.

    The breakdown splits the m steady-state slots by term and puts all (p-1)/v bubble
    slots under pp_bubble.
    """
    m = grad_accum
    n_moe = busiest_moe_layers(terms.moe_mask, pp, vpp)
    stage = (layers * (terms.layer_compute_s + terms.layer_tp_comm_s + terms.layer_cp_comm_s)
             + terms.p2p_per_microbatch_s)
    moe_comm = slot_comm_s(terms.moe_comm_s, terms.moe_a2a_unpaired_s, terms.moe_overlap, pp, vpp, m)
    if n_moe:  # MoE layers on the busiest rank add their extra time (dense: arithmetic unchanged)
        stage += n_moe * (terms.moe_compute_s + moe_comm + terms.moe_tp_comm_s)
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
    if terms.moe_mask:
        breakdown["compute"] += m * n_moe * terms.moe_compute_s
        breakdown["tp_comm"] += m * n_moe * terms.moe_tp_comm_s
        breakdown["moe_comm"] = m * n_moe * moe_comm
    step = ((m + bubble_slots) * stage + m * terms.head_extra_s + terms.dp_exposed_s
            + terms.optimizer_s)
    return StepTime(step_time_s=step, stage_time_s=stage, breakdown_s=breakdown)


def step_time(ctx: CostContext, layout: LayoutSpec, grad_accum: int) -> StepTime:
    """Step time of a layout: time_terms then compose_step_time (or, with an explicit
    layout.pipeline_layers, compose_split_step_time)."""
    terms = time_terms(ctx, layout, grad_accum)
    if layout.pipeline_layers is not None:
        return compose_split_step_time(terms, split=layout.pipeline_layers, pp=layout.pp,
                                       vpp=layout.vpp, grad_accum=grad_accum)
    return compose_step_time(terms, layers=layers_on_rank(ctx.model.layers, layout.pp, layout.vpp),
                             pp=layout.pp, vpp=layout.vpp, grad_accum=grad_accum)


# --- explicit pipeline splits (LayoutSpec.pipeline_layers) ----------------------------------
# Stage r runs n_r layers plus its extra work e_r per micro-batch (the token embedding on the
# first stage, the LM head and loss on the last; both on the one stage when pp = 1):
#   t_r = n_r x layer_s + p2p_per_microbatch_s + e_r
# Each micro-batch passes every stage once (interleaved: v times a chunk), so the steady state
# runs at the slowest stage's pace and warm-up/cool-down pass through the others:
#   step = m x t_max + (sum_r t_r - t_max) / v + dp_exposed_s + optimizer_s
# Equal stages give (m + (p - 1) / v) x t (Narayanan et al. 2021, Sec. 2.2). sum_r t_r does not
# depend on the split, so the fastest split minimizes the slowest stage (Llama 3 gives the
# first and last stages fewer layers for this reason; Dubey et al. 2024, Sec. 3.3.2).


def stage_extras_s(terms: TimeTerms, pp: int) -> list[float]:
    """Extra work per micro-batch on each rank: embedding first, LM head + loss last (seconds)."""
    extra = [0.0] * pp
    extra[-1] += terms.head_extra_s  # with pp = 1 head_extra_s already holds the embedding
    if pp > 1:
        extra[0] += terms.embedding_s
    return extra


def compose_split_step_time(terms: TimeTerms, *, split: tuple[int, ...], pp: int, vpp: int,
                            grad_accum: int) -> StepTime:
    """step = m x t_max + (sum t_r - t_max) / v + dp_exposed + optimizer (see above).

    The breakdown charges the slowest stage's m slots by term and the rest to pp_bubble.
    """
    m = grad_accum
    layer_s = terms.layer_compute_s + terms.layer_tp_comm_s + terms.layer_cp_comm_s
    n, extra = rank_layers(split, pp), stage_extras_s(terms, pp)
    moe = moe_layers_per_rank(terms.moe_mask, split, pp) if terms.moe_mask else [0] * pp
    moe_comm = slot_comm_s(terms.moe_comm_s, terms.moe_a2a_unpaired_s, terms.moe_overlap, pp, vpp, m)
    moe_s = terms.moe_compute_s + moe_comm + terms.moe_tp_comm_s
    times = [n_r * layer_s + terms.p2p_per_microbatch_s + e + (k * moe_s if k else 0.0)
             for n_r, e, k in zip(n, extra, moe, strict=True)]
    t_max = max(times)
    slow = times.index(t_max)
    fill = (sum(times) - t_max) / vpp
    breakdown = {
        "compute": m * n[slow] * terms.layer_compute_s,
        "embedding_lm_head": m * extra[slow],
        "tp_comm": m * n[slow] * terms.layer_tp_comm_s,
        "cp_comm": m * n[slow] * terms.layer_cp_comm_s,
        "pp_p2p": m * terms.p2p_per_microbatch_s,
        "pp_bubble": fill,
        "dp_exposed": terms.dp_exposed_s,
        "optimizer": terms.optimizer_s,
    }
    if terms.moe_mask:
        breakdown["compute"] += m * moe[slow] * terms.moe_compute_s
        breakdown["tp_comm"] += m * moe[slow] * terms.moe_tp_comm_s
        breakdown["moe_comm"] = m * moe[slow] * moe_comm
    step = m * t_max + fill + terms.dp_exposed_s + terms.optimizer_s
    return StepTime(step_time_s=step, stage_time_s=t_max, breakdown_s=breakdown)


def balanced_split(terms: TimeTerms, *, layers: int, pp: int, grad_accum: int,
                   max_layers: list[int] | None = None) -> tuple[int, ...]:
    """Layers per stage (vpp = 1): the slowest stage as fast as possible, then the least
    activation memory; every stage >= 1 layer (and <= max_layers[r] when given: the caller
    checks that they admit a split, stage_layer_limits and memory_aware_split).

    1. The smallest T with sum_r cap_r(T) >= layers, cap_r(T) = the most layers stage r runs
       within T (n x layer_s + e_r <= T), by bisection over the candidate stage times.
    2. Within those caps, the smallest level M of n_r x f_r (layers x micro-batches in flight,
       f_r = min(pp - r, m) under 1F1B) with sum_r min(cap_r, M // f_r) >= layers, by bisection;
       the surplus comes off the first stages that reach M. Neither step raises the other's
       maximum, so the split is time-optimal and, among those, lightest in held layers.
    """
    layer_s = terms.layer_compute_s + terms.layer_tp_comm_s + terms.layer_cp_comm_s
    if pp == 1:
        return (layers,)
    extra = stage_extras_s(terms, pp)
    if layer_s > 0.0:
        caps = _time_caps(layer_s, extra, layers, max_layers)
    else:
        caps = [layers - pp + 1] * pp
        caps = caps if max_layers is None else [min(c, k) for c, k in zip(caps, max_layers, strict=True)]
    flight = [min(pp - r, grad_accum) for r in range(pp)]

    def level(mem: int) -> list[int]:
        return [min(c, mem // f) for c, f in zip(caps, flight, strict=True)]

    lo, hi = max(flight), max(c * f for c, f in zip(caps, flight, strict=True))
    while lo < hi:
        mid = (lo + hi) // 2
        if sum(level(mid)) >= layers:
            hi = mid
        else:
            lo = mid + 1
    counts, below = level(lo), level(lo - 1)
    excess = sum(counts) - layers
    for floor in (below, [1] * pp):  # at M = max f_r (any split's floor) below may not cover it
        for r in range(pp):
            take = min(excess, counts[r] - max(1, floor[r]))
            counts[r] -= take
            excess -= take
    return tuple(counts)


def _time_caps(layer_s: float, extra: list[float], layers: int, max_layers: list[int] | None = None) -> list[int]:
    """Per-stage layer caps at the smallest feasible slowest-stage time (balanced_split, step 1),
    each at most max_layers[r] when given."""
    def cap(t: float, e: float) -> int:
        k = max(0, min(layers, int((t - e) // layer_s)))
        while k < layers and (k + 1) * layer_s + e <= t:
            k += 1
        while k > 0 and k * layer_s + e > t:
            k -= 1
        return k

    def caps(t: float) -> list[int]:
        by_e = {e: cap(t, e) for e in set(extra)}
        if max_layers is not None:
            return [min(by_e[e], k) for e, k in zip(extra, max_layers, strict=True)]
        return [by_e[e] for e in extra]

    if max_layers is not None:  # memory caps can push T anywhere: every stage time is a candidate
        cands = sorted({n * layer_s + e for e in set(extra) for n in range(1, layers + 1)})
        return caps(cands[_first(cands, caps, layers)])

    # The optimum T lies in [lo, hi], hi - lo <= layer_s: T >= the mean stage time and every
    # stage runs >= 1 layer; at T = max(mean + layer_s, layer_s + max e) the caps floor((T - e_r)
    # / layer_s) >= (T - e_r) / layer_s - 1 sum to >= layers. Only the stage times n x layer_s + e
    # within one layer of [lo, hi] are candidates (feasibility is still tested exactly below).
    mean = (layers * layer_s + sum(extra)) / len(extra)
    lo, hi = max(mean, layer_s + max(extra)), max(mean + layer_s, layer_s + max(extra))
    cands = sorted({n * layer_s + e for e in set(extra)
                    for n in range(max(1, int((lo - e) // layer_s) - 1),
                                   min(layers, int((hi - e) // layer_s) + 2) + 1)})
    return caps(cands[_first(cands, caps, layers)])


def _first(cands: list[float], caps, layers: int) -> int:
    """Index of the smallest candidate time whose caps give every stage >= 1 layer and hold
    all the layers (bisection: feasibility only grows with the time)."""
    lo, hi = 0, len(cands) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        c = caps(cands[mid])
        if min(c) >= 1 and sum(c) >= layers:
            hi = mid
        else:
            lo = mid + 1
    return lo


def chosen_split(terms: TimeTerms, *, layers: int, pp: int, vpp: int, grad_accum: int,
                 uneven: bool) -> tuple[int, ...] | None:
    """The split a search assigns: balanced (vpp = 1, uneven allowed), else even chunks;
    None for pp = 1 or when the layers do not divide evenly and uneven stages are not allowed."""
    if pp == 1:
        return None
    if vpp == 1 and uneven:
        return balanced_split(terms, layers=layers, pp=pp, grad_accum=grad_accum)
    chunks = pp * vpp
    return (layers // chunks,) * chunks if layers % chunks == 0 else None


def memory_aware_split(terms: TimeTerms, *, layers: int, pp: int, vpp: int, grad_accum: int, uneven: bool,
                       fits: Callable[[tuple[int, ...]], bool], limits: Callable[[], list[int]],
                       fastest: tuple[int, ...] | None = None) -> tuple[int, ...] | None:
    """The split a search assigns under per-stage memory: chosen_split when it fits
    (fits(split): the busiest stage within the limit), else (vpp = 1, uneven) the fastest split
    whose every stage fits, balanced_split under limits() (stage_layer_limits), else
    chosen_split (nothing fits). Stage memory grows with its layers only, so a split fits iff
    n_r <= limits()[r] for every stage; the slowest stage is minimized under those caps.
    fastest: chosen_split's result when the caller already has it."""
    split = fastest or chosen_split(terms, layers=layers, pp=pp, vpp=vpp, grad_accum=grad_accum, uneven=uneven)
    if split is None or vpp > 1 or not uneven or fits(split):
        return split
    caps = limits()
    if min(caps) < 1 or sum(caps) < layers:
        return split
    return balanced_split(terms, layers=layers, pp=pp, grad_accum=grad_accum, max_layers=caps)


def stage_layer_limits(ctx: CostContext, layout: LayoutSpec, grad_accum: int, limit_bytes: float,
                       state=None, profile=None) -> list[int]:
    """Per pipeline rank (vpp = 1), the most layers (0..L) for which that rank's memory
    (stage_memory_terms, composed by compose_memory as split_memory_terms does) stays within
    limit_bytes; 0 when not even one layer fits.

    A rank's memory is affine in its layers n (model state and activations are linear in n;
    stage_profile), a + b n: the cap is floor((limit - a) / b), checked with the exact
    composition at the cap and one above whenever it lies within 1e-6 layers of a boundary.
    state(params) -> model state per GPU (default stage_state); profile(n) -> stage_profile
    of n layers on every rank (default stage_profile): both only for memoization.
    """
    lo, layers = layout, ctx.model.layers
    kw: dict[str, Any] = {"tp": lo.tp, "pp": lo.pp, "dp": lo.dp, "cp": lo.cp, "zero": lo.zero_stage}
    shared: dict[str, Any] = buffer_terms(ctx, lo)
    if profile is None:
        def profile(n: int) -> list:
            return stage_profile(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel, recompute=lo.recompute,
                                 micro_batch=lo.micro_batch, pp=lo.pp, vpp=1, grad_accum=grad_accum,
                                 split=(n,) * lo.pp)

    def total(r: int, n: int) -> float:
        st = profile(n)[r]
        terms = stage_memory_terms(ctx, st, **kw, **shared, state=state(st[0]) if state else None)
        return compose_memory(terms)["total"]

    fixed = shared["comm_buffers"] + ctx.options.framework_overhead_bytes

    def approx(st: tuple) -> float:  # compose_memory's total in its order, for the estimate only
        s = state(st[0]) if state else stage_state(ctx, st[0], **kw)
        return s.weights + s.gradients + s.optimizer + st[1] + (shared["logits"] if st[2] else 0.0) + fixed

    out, seen = [], {}
    for r in range(lo.pp):
        sig = (profile(0)[r], profile(1)[r])  # ranks with equal profiles have equal limits
        if sig not in seen:
            a = approx(sig[0])
            b = approx(sig[1]) - a
            est = (limit_bytes - a) / b if b > 0 else float(layers)
            k = max(0, min(layers, math.floor(est)))
            if abs(est - round(est)) < 1e-6 or b <= 0:  # near a boundary: decide exactly
                while k < layers and total(r, k + 1) <= limit_bytes:
                    k += 1
                while k > 0 and total(r, k) > limit_bytes:
                    k -= 1
            seen[sig] = k
        out.append(seen[sig])
    return out
