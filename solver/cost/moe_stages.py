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
torchtitan places the same way (pytorch/torchtitan b5bcd76c: the export's module_fqns_per_model_part
puts tok_embeddings in the first chunk and norm + lm_head in the last, chunk s on rank s mod pp,
distributed/pipeline_parallel.py L532-569); its MTP and tied embeddings, which it would place
otherwise, never run at pp > 1 (solver.frameworks.models).
Activations: rank r keeps its layers' for min(pp - r, m) micro-batches under 1F1B (interleaved:
memory.in_flight_microbatches on every rank, an upper bound; step_memory.stage_profile), each
layer memory.layer_activation_bytes plus moe_memory's extra for the MoE ones; the first rank
the embedding's stored values; the last rank the logits and the MTP modules
(step_memory.mtp_activation_bytes); full recompute one layer's full activations (torchtitan's
SelectiveAC what that layer did not store, memory.recomputed_layer_bytes); a rank
running a MoE layer (its own or an MTP module's) the token dispatcher's working set once
(moe_memory.dispatch_working_set_bytes).
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import TYPE_CHECKING

from solver.cost import memory as M
from solver.cost.accounting import ffn_params
from solver.cost.fp8 import FP8_BYTES
from solver.cost.moe_comm import expert_dp_ranks
from solver.cost.moe_layer import moe_layer_mask, moe_layers_per_rank
from solver.cost.moe_memory import (
    dispatch_working_set_bytes, moe_gathered_bytes, moe_layer_activation_extra_bytes, moe_recomputed_layer_bytes,
)
from solver.cost.state import framework_state_bytes
from solver.cost.terms import CostContext

if TYPE_CHECKING:
    from solver.cost.step_memory import MemoryTerms
    from solver.specs import LayoutSpec, Recompute


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


def linear_parts(ctx: CostContext, *, tp: int, ep: int, etp: int) -> tuple[float, float, float]:
    """(attention + dense FFN, dense FFN, MoE block) linear weight elements of one layer on a
    rank (moe_fp8.moe_linear_weights_on_rank's parts): a dense layer uses the first, a MoE
    layer the first less the second plus the third."""
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
    return both, ffn, block


def rank_linear_weights(ctx: CostContext, *, tp: int, ep: int, etp: int, n: int, k: int, last: bool) -> float:
    """Linear weight elements the FP8 GEMMs of a rank with n layers (k MoE) use: as
    moe_fp8.moe_linear_weights_on_rank, for this rank's layers (and the MTP layers on the last)."""
    m = ctx.model
    both, ffn, block = linear_parts(ctx, tp=tp, ep=ep, etp=etp)
    k_all = k + (m.mtp_layers if last else 0)
    return (n + (m.mtp_layers if last else 0)) * (both - ffn) + (n - k) * ffn + k_all * block


def layer_parts(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute, micro_batch: int, ep: int,
                etp: int) -> tuple[float, float, float, float, float, float]:
    """(a layer's, a MoE layer's extra, the embedding's stored values, the recomputed layer's
    (memory.recomputed_layer_bytes: full recompute, torchtitan's SelectiveAC), its MoE extra
    (moe_memory.moe_recomputed_layer_bytes), the token dispatcher's working set) activation
    bytes of one micro-batch (module docstring)."""
    kw = {"tp": tp, "cp": cp, "micro_batch": micro_batch}
    per_layer = M.layer_activation_bytes(ctx, sp=sp, recompute=recompute, **kw)
    per_moe = moe_layer_activation_extra_bytes(ctx, recompute=recompute, **kw, ep=ep, etp=etp)
    embed = M.embedding_stored_bytes(ctx, sp=sp, **kw)
    full = M.recomputed_layer_bytes(ctx, sp=sp, recompute=recompute, **kw)
    moe_full = moe_recomputed_layer_bytes(ctx, recompute=recompute, **kw, ep=ep, etp=etp)
    working = dispatch_working_set_bytes(ctx, **kw, ep=ep, etp=etp, recompute=recompute)
    return per_layer, per_moe, embed, full, moe_full, working


def rank_flight(pp: int, vpp: int, grad_accum: int) -> list[float]:
    """Micro-batches whose activations each rank holds: 1F1B min(pp - r, m); interleaved
    memory.in_flight_microbatches on every rank (module docstring)."""
    inter = M.in_flight_microbatches(pp, vpp, grad_accum)
    return [float(min(pp - r, grad_accum)) if vpp == 1 else inter for r in range(pp)]


def activation_parts(ctx: CostContext, layout: LayoutSpec, grad_accum: int) -> tuple:
    """layer_parts, the MTP modules' activations, rank_flight and rank_buffers of a layout (the
    split is not read)."""
    from solver.cost.step_memory import mtp_activation_bytes
    lo = layout
    parts = layer_parts(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel, recompute=lo.recompute,
                        micro_batch=lo.micro_batch, ep=lo.ep, etp=lo.expert_tp)
    flight = rank_flight(lo.pp, lo.vpp, grad_accum)
    return (*parts, mtp_activation_bytes(ctx, lo), flight,
            rank_buffers(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel, micro_batch=lo.micro_batch, pp=lo.pp,
                         vpp=lo.vpp, grad_accum=grad_accum, flight=flight))


def rank_buffers(ctx: CostContext, *, tp: int, cp: int, sp: bool, micro_batch: int, pp: int, vpp: int,
                 grad_accum: int, flight: list[float]) -> tuple[float, ...]:
    """The pipeline's own buffers on every rank, bytes, whatever layers it holds: the pipe
    buffers of each micro-batch in flight (memory.pipe_buffer_bytes, DeepSpeed) and the
    stage's per-step buffers (memory.stage_buffer_bytes, torchtitan's PipelineStage), as
    memory.activation_bytes charges them on even stages."""
    kw = {"tp": tp, "cp": cp, "micro_batch": micro_batch, "pp": pp}
    return tuple(flight[r] * M.pipe_buffer_bytes(ctx, rank=r, **kw)
                 + M.stage_buffer_bytes(ctx, sp=sp, rank=r, vpp=vpp, grad_accum=grad_accum, **kw)
                 for r in range(pp))


def rank_activation_bytes(ctx: CostContext, layout: LayoutSpec, grad_accum: int,
                          ns: list[int], ks: list[int]) -> list[float]:
    """Activation bytes of every pipeline rank holding ns[r] layers, ks[r] of them MoE (module
    docstring)."""
    per_layer, per_moe, embed, full, moe_full, dispatch, mtp, flight, buffers = activation_parts(
        ctx, layout, grad_accum)
    out = []
    for r, (n, k) in enumerate(zip(ns, ks, strict=True)):
        last = r == layout.pp - 1
        act = flight[r] * (n * per_layer + k * per_moe + (embed if r == 0 else 0.0)) + buffers[r] + full
        if full and k:
            act += moe_full
        if last:
            act += mtp
        if k or (last and ctx.model.mtp_layers):
            act += dispatch
        out.append(act)
    return out


def moe_stage_terms(ctx: CostContext, layout: LayoutSpec, grad_accum: int, *, logits: float,
                    comm_buffers: float) -> list[MemoryTerms]:
    """MemoryTerms of every pipeline rank of layout.pipeline_layers (module docstring)."""
    from solver.cost.step_memory import MemoryTerms, rank_layers
    lo, split = layout, layout.pipeline_layers
    assert split is not None
    edp = expert_dp_ranks(tp=lo.tp, cp=lo.cp, dp=lo.dp, ep=lo.ep, etp=lo.expert_tp)
    w = ctx.fp8_work
    ns, ks = rank_layers(split, lo.pp), moe_layers_per_rank(moe_layer_mask(ctx.model), split, lo.pp)
    acts = rank_activation_bytes(ctx, lo, grad_accum, ns, ks)
    gathered = moe_gathered_bytes(ctx, tp=lo.tp, pp=lo.pp, zero=lo.zero_stage, ep=lo.ep, etp=lo.expert_tp,
                                  shards=lo.dp * lo.cp)
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
        out.append(MemoryTerms(d.weights + x.weights + copies + gathered, d.gradients + x.gradients,
                               d.optimizer + x.optimizer, acts[r], logits if last else 0.0, comm_buffers,
                               ctx.options.framework_overhead_bytes))
    return out


@dataclass(frozen=True)
class RankLines:
    """Memory per GPU of every pipeline rank of a MoE layout as a function of the layers it
    holds: rank r with n layers, k of them MoE, needs base[r] + n x per_layer[r] + k x per_moe[r]
    bytes, plus once_moe[r] when k > 0 (full recompute's MoE layer, the dispatcher's working
    set), else once_dense[r] (the last rank's MTP modules still dispatch). The terms of
    moe_stage_terms' total regrouped (model state linear in the rank's parameters,
    state.framework_state_bytes; FP8 copies linear in its layers, rank_linear_weights;
    activations rank_activation_bytes), so equal to it up to float summation order (~1e-15
    relative): the search uses it for bounds with a margin, never as the memory verdict."""

    base: tuple[float, ...]
    per_layer: tuple[float, ...]
    per_moe: tuple[float, ...]
    once_moe: tuple[float, ...]
    once_dense: tuple[float, ...]

    def busiest_bytes(self, ns: list[int], ks: list[int]) -> float:
        """The largest rank's memory with ns[r] layers, ks[r] MoE, on rank r."""
        return max(b + n * a + k * c + (om if k else od) for b, a, c, om, od, n, k in zip(
            self.base, self.per_layer, self.per_moe, self.once_moe, self.once_dense, ns, ks, strict=True))


def state_bytes_per_param(ctx: CostContext, *, tp: int, pp: int, dp: int, cp: int, zero: int, ep: int,
                          etp: int, whole: Callable[[int], float] | None = None) -> tuple[float, float]:
    """(bytes per GPU of one parameter outside the routed experts, of one routed-expert
    parameter) of a layout's model state: moe_stage_terms' framework_state_bytes per whole
    parameter (split over TP, sharded over DP x CP; over EP x ETP, sharded over expert DP).
    whole(d): the state bytes of one parameter sharded over d ranks at this pp and ZeRO stage
    (framework_state_bytes reads only d = dp x cp), when the caller memoizes it."""
    edp = expert_dp_ranks(tp=tp, cp=cp, dp=dp, ep=ep, etp=etp)
    if whole is None:
        def whole(d: int) -> float:
            return framework_state_bytes(ctx.training, 1.0, pp=pp, dp=d, cp=1, zero=zero).total
    return whole(dp * cp) / tp, whole(edp) / (ep * etp)


def rank_memory_lines(ctx: CostContext, *, tp: int, pp: int, ep: int, etp: int, zero: int, shards: int,
                      state: tuple[float, float], acts: tuple, logits: float, comm_buffers: float) -> RankLines:
    """RankLines of a MoE layout with these degrees. state: its state_bytes_per_param; acts: its
    activation_parts; zero: its ZeRO stage and shards its DP x CP (the gathered MoE blocks and
    reduce-scatter copy, moe_memory.moe_gathered_bytes)."""
    m, pc, e = ctx.model, ctx.params, ctx.model.moe
    assert e is not None  # callers pass MoE models only
    routed = e.experts * ffn_params(m, e.expert_ffn_hidden)
    mtp_routed = m.mtp_layers * routed
    sd, sx = state
    copy, (both, ffn, block) = fp8_copy_parts(ctx, tp=tp, ep=ep, etp=etp)
    per_layer, per_moe, embed, full, moe_full, dispatch, mtp, flight, buffers = acts
    gathered = moe_gathered_bytes(ctx, tp=tp, pp=pp, zero=zero, ep=ep, etp=etp, shards=shards)  # type: ignore[arg-type]
    fixed_other = ctx.options.framework_overhead_bytes + comm_buffers + gathered + full
    base, a, c = [], [], []
    once_moe = (moe_full + dispatch,) * pp
    once_dense = tuple(dispatch if r == pp - 1 and m.mtp_layers else 0.0 for r in range(pp))
    for r in range(pp):
        dense, experts, extra = 0.0, 0.0, fixed_other + buffers[r]
        if r == 0:
            dense += pc.embedding + pc.position_embedding
            extra += flight[r] * embed
        if r == pp - 1:
            dense += pc.final_norm + pc.lm_head + pc.mtp - mtp_routed + (pc.embedding if m.mtp_layers and pp > 1
                                                                          else 0)
            experts += mtp_routed
            extra += copy * m.mtp_layers * (both - ffn + block) + mtp + logits
        base.append(dense * sd + experts * sx + extra)
        a.append((pc.attention_per_layer + pc.norms_per_layer + pc.ffn_per_layer) * sd + copy * both
                 + flight[r] * per_layer)
        c.append((pc.moe_ffn_per_layer - routed - pc.ffn_per_layer) * sd + routed * sx + copy * (block - ffn)
                 + flight[r] * per_moe)
    return RankLines(tuple(base), tuple(a), tuple(c), once_moe, once_dense)


def fp8_copy_parts(ctx: CostContext, *, tp: int, ep: int, etp: int) -> tuple[float, tuple[float, float, float]]:
    """(bytes per linear weight element of the FP8 copies the framework caches, 0 without them;
    linear_parts, zeros without them): moe_stage_terms' copies."""
    w = ctx.fp8_work
    if w is None or w.weight_cast_per_use:
        return 0.0, (0.0, 0.0, 0.0)
    return 2.0 * FP8_BYTES, linear_parts(ctx, tp=tp, ep=ep, etp=etp)


def mean_floor_parts(ctx: CostContext, *, pp: int, n_moe: int) -> tuple:
    """A lower bound on the busiest rank's memory of every placement of the model's layers over pp
    ranks (any split: sum n_r = L, sum k_r = N MoE layers), as the coefficients of three additive
    parts (floor_state_bytes, floor_activation_bytes, floor_rest_bytes) so that a caller can bound
    a group by each part's least. The busiest rank needs at least the mean of RankLines over the
    ranks, (sum_r base_r + (L - N) min_r per_layer_r + N min_r (per_layer_r + per_moe_r)) / pp,
    since a rank's layers cost (n - k) per_layer + k (per_layer + per_moe), both >= 0 (the
    once-per-rank terms >= 0 left out); the least coefficients are those of the rank with the fewest micro-batches in
    flight. The state summed over the ranks is the whole model's (linear in parameters). The
    communication buffers with the gathered MoE blocks' difference (comm_buffer_bytes charges
    the gathered dense-layer units that moe_gathered_bytes may take back, so their sum is >= 0)
    and the last rank's logits (>= 0) are left out.
    Returns (pp, parameters outside the routed experts, routed-expert parameters, L, N, MTP
    modules, FP8 copy elements' three counts), all summed over the ranks."""
    m, pc, e = ctx.model, ctx.params, ctx.model.moe
    assert e is not None
    routed = e.experts * ffn_params(m, e.expert_ffn_hidden)
    body = pc.attention_per_layer + pc.norms_per_layer
    dense = (m.layers * body + (m.layers - n_moe) * pc.ffn_per_layer + n_moe * (pc.moe_ffn_per_layer - routed)
             + pc.embedding + pc.position_embedding + pc.final_norm + pc.lm_head + pc.mtp - m.mtp_layers * routed
             + (pc.embedding if m.mtp_layers and pp > 1 else 0))
    return pp, dense, (n_moe + m.mtp_layers) * routed, m.layers, n_moe, m.mtp_layers


def floor_state_bytes(parts: tuple, state: tuple[float, float]) -> float:
    """mean_floor_parts' state part (bytes): the model state of every rank, over pp."""
    pp, dense, experts = parts[:3]
    return (dense * state[0] + experts * state[1]) / pp


def floor_activation_bytes(parts: tuple, acts: tuple) -> float:
    """mean_floor_parts' activation part (bytes; acts: activation_parts)."""
    pp, _, _, layers, n_moe, _ = parts
    per_layer, per_moe, embed, full, _moe_full, _dispatch, mtp, flight, _buffers = acts
    return (pp * full + flight[0] * embed + mtp + min(flight) * (layers * per_layer + n_moe * per_moe)) / pp


def floor_rest_bytes(ctx: CostContext, parts: tuple, copies: tuple) -> float:
    """mean_floor_parts' rest (bytes): the framework overhead and the FP8 copies (copies:
    fp8_copy_parts), over pp."""
    pp, _, _, layers, n_moe, mtp_layers = parts
    copy, (both, ffn, block) = copies
    elements = layers * both + (n_moe + mtp_layers) * (block - ffn) + mtp_layers * both
    return (pp * ctx.options.framework_overhead_bytes + copy * elements) / pp
