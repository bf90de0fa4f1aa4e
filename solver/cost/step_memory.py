"""Per-GPU memory of a layout, composed from terms (bytes per GPU): the memory half of
solver.cost.step's contract (see its docstring: terms, composition, explicit splits).

memory_terms evaluates every term of a layout; compose_memory is the one composition the
cost model and the CP-SAT search share; with an explicit split (LayoutSpec.pipeline_layers)
the busiest rank's terms (split_memory_terms: stage_profile per rank, stage_memory_terms).
solver.cost.step re-exports every name here.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from solver.cost import memory as M
from solver.cost.state import framework_state_bytes
from solver.cost.moe_layer import busiest_moe_layers, moe_layer_mask
from solver.cost.moe_memory import (
    dispatch_working_set_bytes, moe_layer_activation_extra_bytes, moe_recomputed_layer_bytes,
)
from solver.cost.moe_stages import moe_stage_terms, rank_buffers, rank_flight
from solver.cost.terms import CostContext
from solver.specs import LayoutSpec, Recompute, ZeroStage


def rank_layers(split: tuple[int, ...], pp: int) -> list[int]:
    """Layers per pipeline rank: chunk c runs on rank c mod pp (interleaved placement)."""
    out = [0] * pp
    for c, n in enumerate(split):
        out[c % pp] += n
    return out


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
    if lo.pipeline_layers is not None:
        return split_memory_terms(ctx, lo, grad_accum)
    state = M.model_state(ctx, tp=lo.tp, pp=lo.pp, dp=lo.dp, cp=lo.cp, zero=lo.zero_stage, ep=lo.ep, etp=lo.expert_tp)
    act = M.activation_bytes(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel, recompute=lo.recompute,
                             micro_batch=lo.micro_batch, pp=lo.pp, vpp=lo.vpp, grad_accum=grad_accum)
    if ctx.model.moe is not None:
        act += moe_activation_extra_bytes(ctx, lo, grad_accum)
    act += mtp_activation_bytes(ctx, lo)
    return MemoryTerms(
        weights=state.weights, gradients=state.gradients, optimizer=state.optimizer, activations=act,
        **buffer_terms(ctx, lo), framework_overhead=ctx.options.framework_overhead_bytes)


def mtp_activation_bytes(ctx: CostContext, layout: LayoutSpec) -> float:
    """The multi-token-prediction modules on the last stage (solver.cost.mtp): per module one
    micro-batch of one layer's activations (a MoE layer's when the model has them) and its
    own LM-head input and logits (memory.mtp_logits_bytes); 0 without MTP. Added to the charged
    stage's activations, an upper bound like the logits term for pp > 1."""
    n, lo = ctx.model.mtp_layers, layout
    if not n:
        return 0.0
    layer, logits = _mtp_dense_parts(ctx, lo.tp, lo.cp, lo.sequence_parallel, lo.recompute, lo.micro_batch)
    if ctx.model.moe is not None:
        layer += moe_layer_activation_extra_bytes(ctx, tp=lo.tp, cp=lo.cp, recompute=lo.recompute,
                                                  micro_batch=lo.micro_batch, ep=lo.ep, etp=lo.expert_tp)
    return n * (layer + logits)


@lru_cache(maxsize=65536)
def _mtp_dense_parts(ctx: CostContext, tp: int, cp: int, sp: bool, recompute: Recompute,
                     micro_batch: int) -> tuple[float, float]:
    """mtp_activation_bytes' parts that do not read the expert degrees (memoized: a search asks
    for every EP x ETP of each): one dense layer's activations and one depth's head."""
    return (M.layer_activation_bytes(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch),
            M.mtp_logits_bytes(ctx, tp=tp, cp=cp, micro_batch=micro_batch))


def moe_activation_extra_bytes(ctx: CostContext, layout: LayoutSpec, grad_accum: int) -> float:
    """What the MoE layers of the first stage keep beyond dense layers (solver.cost.moe_memory):
    the busiest rank's MoE layers x in-flight micro-batches x the per-layer extra, plus, under
    full recompute, the extra of the one MoE layer being recomputed, plus the token
    dispatcher's working set of the one MoE layer running (moe_activation_extra_of)."""
    lo = layout
    return moe_activation_extra_of(ctx, tp=lo.tp, cp=lo.cp, micro_batch=lo.micro_batch, ep=lo.ep,
                                   etp=lo.expert_tp, pp=lo.pp, vpp=lo.vpp, recompute=lo.recompute,
                                   grad_accum=grad_accum, mask=moe_layer_mask(ctx.model))


def moe_activation_extra_of(ctx: CostContext, *, tp: int, cp: int, micro_batch: int, ep: int, etp: int, pp: int,
                            vpp: int, recompute: Recompute, grad_accum: int, mask: tuple[bool, ...]) -> float:
    """moe_activation_extra_bytes from the layout's scalars (mask: moe_layer.moe_layer_mask of
    the model; the search holds it once per problem)."""
    kw: dict[str, Any] = {"tp": tp, "cp": cp, "micro_batch": micro_batch, "ep": ep, "etp": etp}
    n = busiest_moe_layers(mask, pp, vpp)
    flight = M.in_flight_microbatches(pp, vpp, grad_accum)
    out = n * flight * moe_layer_activation_extra_bytes(ctx, recompute=recompute, **kw)
    if n:  # one MoE layer runs at a time: its dispatcher's buffers (moe_memory)
        out += dispatch_working_set_bytes(ctx, recompute=recompute, **kw)
    return out + moe_recomputed_layer_bytes(ctx, recompute=recompute, **kw)


def buffer_terms(ctx: CostContext, layout: LayoutSpec) -> dict[str, float]:
    """The logits and communication-buffer terms of a layout (bytes per GPU)."""
    lo = layout
    return {"logits": M.logits_bytes(ctx, tp=lo.tp, cp=lo.cp, micro_batch=lo.micro_batch),
                "comm_buffers": M.comm_buffer_bytes(ctx, tp=lo.tp, cp=lo.cp, dp=lo.dp, pp=lo.pp,
                                                 sp=lo.sequence_parallel, zero=lo.zero_stage,
                                                 micro_batch=lo.micro_batch)}


def split_memory_terms(ctx: CostContext, layout: LayoutSpec, grad_accum: int) -> MemoryTerms:
    """Memory terms of the busiest rank of layout.pipeline_layers (stage by stage)."""
    lo = layout
    assert lo.pipeline_layers is not None  # callers route only explicit splits here
    if ctx.model.moe is not None:  # dense and MoE layers per rank (solver.cost.moe_stages)
        terms = moe_stage_terms(ctx, lo, grad_accum, **buffer_terms(ctx, lo))
        totals = [compose_memory(t)["total"] for t in terms]
        return terms[totals.index(max(totals))]
    profile = stage_profile(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel, recompute=lo.recompute,
                            micro_batch=lo.micro_batch, pp=lo.pp, vpp=lo.vpp, grad_accum=grad_accum,
                            split=lo.pipeline_layers)
    return busiest_stage_terms(ctx, profile, tp=lo.tp, pp=lo.pp, dp=lo.dp, cp=lo.cp, zero=lo.zero_stage,
                               **buffer_terms(ctx, lo))


def stage_profile(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute, micro_batch: int,
                  pp: int, vpp: int, grad_accum: int, split: tuple[int, ...]) -> list[tuple[int, float, bool]]:
    """(parameters, activation bytes, runs the LM head) per pipeline rank of an explicit split.

    Parameters: the rank's layers, the embedding (first rank), final norm and LM head (last).
    Activations as memory.activation_bytes, rank by rank: rank r holds its n_r layers for
    min(pp - r, m) micro-batches under 1F1B (Narayanan et al. 2021, Sec. 2.2.1; interleaved:
    the first rank's in_flight_microbatches for every rank, an upper bound); the first rank
    also keeps the embedding's stored values (8 s b bytes + the dropout mask s b h / t, as
    memory.activation_bytes), every rank the pipeline's own buffers (pipe buffers per
    micro-batch in flight, the stage's per-step buffers); full recompute adds one layer's full
    activations. Micro-batches in flight and buffers per rank are moe_stages.rank_flight and
    moe_stages.rank_buffers, the composition MoE splits read (moe_stages.rank_activation_bytes).
    """
    per_layer = M.layer_activation_bytes(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute,
                                         micro_batch=micro_batch)
    embed = M.embedding_stored_bytes(ctx, tp=tp, cp=cp, sp=sp, micro_batch=micro_batch)
    extra = M.recomputed_layer_bytes(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch)
    flight = rank_flight(pp, vpp, grad_accum)
    buffers = rank_buffers(ctx, tp=tp, cp=cp, sp=sp, micro_batch=micro_batch, pp=pp, vpp=vpp,
                           grad_accum=grad_accum, flight=flight)
    pc = ctx.params
    out = []
    for r, n in enumerate(rank_layers(split, pp)):
        params = (n * pc.per_layer + (pc.embedding + pc.position_embedding if r == 0 else 0)
                  + (pc.final_norm + pc.lm_head if r == pp - 1 else 0))
        act = flight[r] * (n * per_layer + (embed if r == 0 else 0.0)) + buffers[r] + extra
        out.append((params, act, r == pp - 1))
    return out


def dominant_stages(profile: list[tuple[int, float, bool]]) -> list[tuple[int, float, bool]]:
    """The ranks that can be the busiest: per (parameters, LM head) the most activations."""
    best: dict[tuple[int, bool], float] = {}
    for params, act, last in profile:
        best[(params, last)] = max(act, best.get((params, last), act))
    return [(p, a, last) for (p, last), a in best.items()]


def stage_state(ctx: CostContext, params: int, *, tp: int, pp: int, dp: int, cp: int, zero: ZeroStage):
    """Model state per GPU of a rank holding `params` parameters (split over TP) under
    training.framework's recipe (solver.cost.state.framework_state_bytes)."""
    return framework_state_bytes(ctx.training, params / tp, pp=pp, dp=dp, cp=cp, zero=zero)


def stage_memory_terms(ctx: CostContext, stage: tuple[int, float, bool], *, tp: int, pp: int, dp: int,
                       cp: int, zero: ZeroStage, logits: float, comm_buffers: float, state=None) -> MemoryTerms:
    """Memory terms of one rank of an explicit split: its own parameters' state (stage_state;
    pass it when already computed), its activations, the LM-head buffers on the last rank
    only, and the shared buffers."""
    params, act, last = stage
    if state is None:
        state = stage_state(ctx, params, tp=tp, pp=pp, dp=dp, cp=cp, zero=zero)
    return MemoryTerms(state.weights, state.gradients, state.optimizer, act, logits if last else 0.0,
                       comm_buffers, ctx.options.framework_overhead_bytes)


def busiest_stage_terms(ctx: CostContext, stages: list[tuple[int, float, bool]], **kw) -> MemoryTerms:
    """The MemoryTerms of the rank with the largest compose_memory total (first on ties)."""
    terms = [stage_memory_terms(ctx, st, **kw) for st in stages]
    totals = [compose_memory(t)["total"] for t in terms]
    return terms[totals.index(max(totals))]


def compose_memory(terms: MemoryTerms) -> dict[str, float]:
    """The one memory composition: components, model_state and total (bytes per GPU)."""
    out = {
        "weights": terms.weights, "gradients": terms.gradients, "optimizer": terms.optimizer,
        "model_state": terms.weights + terms.gradients + terms.optimizer,
        "activations": terms.activations, "logits": terms.logits,
        "comm_buffers": terms.comm_buffers, "framework_overhead": terms.framework_overhead,
    }
    out["total"] = total_bytes(terms.weights, terms.gradients, terms.optimizer, terms.activations, terms.logits,
                               terms.comm_buffers, terms.framework_overhead)
    return out


def total_bytes(weights: float, gradients: float, optimizer: float, activations: float, logits: float,
                comm_buffers: float, framework_overhead: float) -> float:
    """compose_memory's total from the terms' values, bytes per GPU: the model state
    (weights + gradients + optimizer) plus the rest, summed in this order (the search's fit
    test calls it without building the terms, solver.search.terms._Terms.memory_total)."""
    return weights + gradients + optimizer + activations + logits + comm_buffers + framework_overhead


def usable_memory_bytes(ctx: CostContext) -> float:
    """GPU memory a plan may fill: (1 - margin) x capacity (options.memory_margin_fraction)."""
    return ctx.cluster.gpu.memory_bytes * (1.0 - ctx.options.memory_margin_fraction)
