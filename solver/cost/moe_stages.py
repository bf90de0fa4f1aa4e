"""Per-stage memory of a mixture-of-experts model under an explicit pipeline split
(LayoutSpec.pipeline_layers): the busiest rank's terms, rank by rank.

Unit legend: `_bytes` bytes per GPU; parameters are counts; n_r = layers on rank r, k_r = its
MoE layers (moe_layer.moe_layers_per_rank: chunk c of the split on rank c mod pp).

A rank holds (NVIDIA/Megatron-LM d98e8a64):
- its n_r layers' attention and norms, the dense FFN of its n_r - k_r dense layers and the
  shared experts and router of its k_r MoE layers, split over TP and sharded over DP x CP, and
  the routed experts of its k_r layers, split over EP x ETP and sharded over the expert-DP
  group (moe_memory.moe_model_state's two recipes, applied to the rank's own parameters);
- the first rank: the input embedding (gpt_model.py: pre_process);
- the last rank: the final norm and the LM head (post_process) and the multi-token-prediction
  modules (mtp_on_this_rank: the last stage unless a layout places them) with their own copy
  of the input embedding when pp > 1 (gpt_model.py L173-181 builds LanguageModelEmbedding on
  every rank with pre_process or mtp_process; DeepSeek's DualPipe instead puts the embedding
  and head of the main model and MTP on one rank, report sec. 3.2.3);
- FP8 weight copies of its linear weights where the framework caches them (moe_memory).
Activations: rank r keeps its layers' for min(pp - r, m) micro-batches under 1F1B (interleaved:
memory.in_flight_microbatches on every rank, an upper bound; step_memory.stage_profile), each
layer memory.layer_activation_bytes plus moe_memory's extra for the MoE ones; the first rank
the embedding's stored values; the last rank the logits and the MTP modules
(step_memory.mtp_activation_bytes); full recompute one layer's full activations; a rank
running a MoE layer (its own or an MTP module's) the token dispatcher's working set once
(moe_memory.dispatch_working_set_bytes).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from solver.cost import memory as M
from solver.cost.accounting import ffn_params
from solver.cost.fp8 import FP8_BYTES
from solver.cost.moe_comm import expert_dp_ranks
from solver.cost.moe_layer import moe_layer_mask, moe_layers_per_rank
from solver.cost.moe_memory import dispatch_working_set_bytes, moe_full_layer_bytes, moe_layer_activation_extra_bytes
from solver.cost.state import framework_state_bytes
from solver.cost.terms import CostContext

if TYPE_CHECKING:
    from solver.cost.step_memory import MemoryTerms
    from solver.specs import LayoutSpec


def rank_parameters(ctx: CostContext, pp: int, split: tuple[int, ...]) -> list[tuple[int, int]]:
    """(parameters outside the routed experts, routed-expert parameters) per pipeline rank, whole
    (before TP / EP splits); module docstring."""
    from solver.cost.step_memory import rank_layers
    m, pc, e = ctx.model, ctx.params, ctx.model.moe
    assert e is not None  # callers pass MoE models only
    routed = e.experts * ffn_params(m, e.expert_ffn_hidden)  # one MoE layer's routed experts
    body = pc.attention_per_layer + pc.norms_per_layer
    moe_rest = pc.moe_ffn_per_layer - routed  # shared experts, router, gates
    mtp_routed = m.mtp_layers * routed
    out = []
    ns, ks = rank_layers(split, pp), moe_layers_per_rank(moe_layer_mask(m), split, pp)
    for r, (n, k) in enumerate(zip(ns, ks, strict=True)):
        dense = n * body + (n - k) * pc.ffn_per_layer + k * moe_rest
        experts = k * routed
        if r == 0:
            dense += pc.embedding + pc.position_embedding
        if r == pp - 1:
            dense += pc.final_norm + pc.lm_head + pc.mtp - mtp_routed
            dense += pc.embedding if (m.mtp_layers and pp > 1) else 0
            experts += mtp_routed
        out.append((dense, experts))
    return out


def rank_linear_weights(ctx: CostContext, *, tp: int, ep: int, etp: int, n: int, k: int, last: bool) -> float:
    """Linear weight elements the FP8 GEMMs of a rank with n layers (k MoE) use: as
    moe_fp8.moe_linear_weights_on_rank, for this rank's layers (and the MTP layers on the last)."""
    from solver.cost.compute import layer_shape
    from solver.cost.fp8 import gemm_operand_elements
    m, e = ctx.model, ctx.model.moe
    assert e is not None
    sh = layer_shape(m, 1, tp, 1, 1)
    both = gemm_operand_elements(0, 0, sh.hidden, sh.q_width, sh.kv_width, sh.ffn_width, sh.gated)[3]
    ffn = gemm_operand_elements(0, 0, sh.hidden, 0, 0, sh.ffn_width, sh.gated)[3]
    g1 = 3 if m.ffn_gated else 2
    block = ((e.experts // ep) * m.hidden * -(-e.expert_ffn_hidden // etp) * g1
             + m.hidden * -(-e.shared_experts * e.shared_width // tp) * g1)
    k_all = k + (m.mtp_layers if last else 0)
    return (n + (m.mtp_layers if last else 0)) * (both - ffn) + (n - k) * ffn + k_all * block


def moe_stage_terms(ctx: CostContext, layout: LayoutSpec, grad_accum: int, *, logits: float,
                    comm_buffers: float) -> list[MemoryTerms]:
    """MemoryTerms of every pipeline rank of layout.pipeline_layers (module docstring)."""
    from solver.cost.step_memory import MemoryTerms, mtp_activation_bytes, rank_layers
    lo, split = layout, layout.pipeline_layers
    assert split is not None
    kw = {"tp": lo.tp, "cp": lo.cp, "micro_batch": lo.micro_batch}
    ex = {"ep": lo.ep, "etp": lo.expert_tp}
    per_layer = M.layer_activation_bytes(ctx, sp=lo.sequence_parallel, recompute=lo.recompute, **kw)
    per_moe = moe_layer_activation_extra_bytes(ctx, recompute=lo.recompute, **kw, **ex)
    embed = M.embedding_stored_bytes(ctx, sp=lo.sequence_parallel, **kw)
    full = 0.0
    if lo.recompute == "full":
        full = M.layer_activation_bytes(ctx, sp=lo.sequence_parallel, recompute="none", **kw)
    inter = M.in_flight_microbatches(lo.pp, lo.vpp, grad_accum)
    edp = expert_dp_ranks(tp=lo.tp, cp=lo.cp, dp=lo.dp, ep=lo.ep, etp=lo.expert_tp)
    w = ctx.fp8_work
    ns, ks = rank_layers(split, lo.pp), moe_layers_per_rank(moe_layer_mask(ctx.model), split, lo.pp)
    out = []
    for r, ((dense, routed), n, k) in enumerate(zip(rank_parameters(ctx, lo.pp, split), ns, ks, strict=True)):
        last = r == lo.pp - 1
        d = framework_state_bytes(ctx.training, dense / lo.tp, pp=lo.pp, dp=lo.dp, cp=lo.cp, zero=lo.zero_stage)
        x = framework_state_bytes(ctx.training, routed / (lo.ep * lo.expert_tp), pp=lo.pp, dp=edp, cp=1,
                                  zero=lo.zero_stage)
        copies = 0.0
        if w is not None and not w.weight_cast_per_use:  # moe_memory.fp8_copy_bytes, this rank's
            copies = 2.0 * FP8_BYTES * rank_linear_weights(ctx, tp=lo.tp, ep=lo.ep, etp=lo.expert_tp, n=n, k=k,
                                                           last=last)
        flight = float(min(lo.pp - r, grad_accum)) if lo.vpp == 1 else inter
        act = flight * (n * per_layer + k * per_moe + (embed if r == 0 else 0.0)) + full
        if full and k:
            act += moe_full_layer_bytes(ctx, **kw, **ex)
        if last:
            act += mtp_activation_bytes(ctx, lo)
        if k or (last and ctx.model.mtp_layers):
            act += dispatch_working_set_bytes(ctx, **kw, **ex)
        out.append(MemoryTerms(d.weights + x.weights + copies, d.gradients + x.gradients,
                               d.optimizer + x.optimizer, act, logits if last else 0.0, comm_buffers,
                               ctx.options.framework_overhead_bytes))
    return out
