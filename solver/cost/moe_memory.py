"""Per-GPU memory of a mixture-of-experts model: expert state and MoE-layer activations.

Unit legend: `_bytes` bytes; t = tokens a rank routes (micro_batch x seq / (cp tp)); R = rows
the rank's local experts hold (busy rows per expert x E / ep); F' = expert width / etp;
s b = micro_batch x seq / cp; g = 2 for a gated FFN (two fc1 outputs), 1 otherwise.

Model state (NVIDIA/Megatron-LM d98e8a64): routed-expert weights are split over EP x ETP
(x PP: each stage holds its layers' experts; experts.py TEGroupedMLP builds E / ep local
experts of width F / etp) and their gradients and optimizer state are sharded by the
distributed optimizer over the expert-DP group (DistributedDataParallel puts expert-parallel
parameters, `allreduce = False`, in their own buffers reduced over intra_expt_dp_group:
megatron/core/distributed/distributed_data_parallel.py L191, L285-286, L711-714; the optimizer
groups them apart, megatron/core/optimizer/__init__.py L350-356). Everything else (attention,
norms, router, shared experts, embedding, LM head) is split over TP x PP and sharded over
DP x CP as for a dense model. Both parts use the framework's recipe (solver.cost.state).

Activations of one MoE layer beyond a dense layer's (Korthikanti et al. 2022 accounting,
2 bytes per BF16 value; Megatron-Core moe_layer.py / token_dispatcher.py / experts.py):
  + router logits and probabilities, FP32: 8 t E
  + the dispatched tokens the experts' fc1 keeps for its weight gradient: 2 R D
  + fc1 outputs and the activation output kept for fc2: 2 R F' (g + 1)
  + the routing probabilities applied per row: 4 R
  + shared experts (a TP-split MLP of width S_n F_s / tp): 2 s b (S_n F_s / tp)(g + 1)
  - the dense FFN's activation inputs and output it replaces: 2 s b (F / tp)(g + 1)
The MLP input (the norm output) is common to both and already counted. R uses the busiest
rank's rows (the load-imbalance factor, solver.cost.moe_layer.load_imbalance). Full
recompute keeps only each layer's input (the same for both kinds).
Where the framework's profile states memory.moe_combine_saved_bytes (torchtitan: pytorch/torchtitan
b5bcd76c torchtitan/models/common/token_dispatcher.py L616-619, L158-161 at EP 1, L720-723 for FP8
grouped experts at EP 1), without recompute also
  + the combine's saved copy of the combined expert outputs: bytes x t k etp x D
(torchtitan multiplies the scores onto them in FP32 and autograd keeps that FP32 operand for the
scores' gradient; t k etp rows: the rank's own t k with EP, the whole replicated micro-batch
sequence with EP off, where etp = tp). Not charged under "selective" (torchtitan's SelectiveAC
recomputes the cast and the multiply) and under "full" only in the one layer being recomputed
(moe_full_layer_bytes); under "selective" too the layer being recomputed holds it
(moe_recomputed_layer_bytes); the profile cites both.

The token dispatcher's working set (dispatch_working_set_bytes): buffers alive while one MoE
layer runs that are not kept for backward, charged once per rank that holds a MoE layer (one
layer runs at a time), on top of the stored activations. Megatron-Core's alltoall dispatcher,
the one the export writes (service/launchers/megatron_moe.py), NVIDIA/Megatron-LM d98e8a64:
- MoELayer.forward's custom_forward (megatron/core/transformer/moe/moe_layer.py L658-699)
  rebinds `hidden_states` to the permuted tokens (L663) and binds `dispatched_input` to the
  all-to-all output (L680); neither name is rebound before the function returns, so both stay
  alive through the expert compute and the combine: t k rows (permute with num_out_tokens =
  t k, moe_utils.py L344-494, index_select) and R / etp rows (the EP all-to-all output,
  token_dispatcher.py L705-724; the expert-TP all-gather and the sort by local expert,
  L728-794, make the R rows the experts' fc1 keeps). With one local expert and etp 1 the
  all-to-all output is that fc1 input itself (already charged); with ep 1 the all-to-all
  returns its input (tensor_parallel/mappings.py L433-436) and only the permuted tokens
  are held;
- routed_experts_compute (moe_layer.py L536-571) holds the experts' fc2 output (R rows)
  while combine_preprocess (token_dispatcher.py L796-835) makes the unsorted copy (R rows,
  sort_chunks_by_idxs, only with more than one local expert) and, with etp > 1, its
  reduce-scatter (R / etp rows): the first peak;
- token_combine's all-to-all (L837-874) then writes t k rows while its input (R / etp rows
  with etp > 1, else R) is alive: the second peak. The unpermute (L876-908, scatter_add into
  t rows) comes after and is smaller.
The working set is the larger peak, in BF16 (2 bytes x hidden per row; the alltoall
dispatcher sends BF16, FP8 dispatch is the flex dispatcher's only). Not charged: the
permute's int64 indices (8 t k bytes), the dispatcher's routing map and probabilities kept
between micro-batches (1 and 4 bytes x t E per layer, overwritten by the next micro-batch),
and the flex dispatcher's persistent DeepEP / HybridEP buffers (fused_a2a.py L47-68 sizes
them from DeepEP's buffer-size hints; the export never selects flex). Assumed, not read from
the source: the backward of the same layer passes its gradients through buffers of the same
shapes while it frees that layer's saved activations, so the forward peaks are the larger;
with --overlap-moe-expert-parallel-comm a forward and a backward layer can run at once
(not charged: that is the schedule's, not the dispatcher's).
"""
from __future__ import annotations

from functools import lru_cache

from solver.cost import moe_layer as ML
from solver.cost import moe_torchtitan as TT
from solver.cost.accounting import StateBytes
from solver.cost.compute import ACT_BYTES
from solver.cost.fp8 import FP8_BYTES
from solver.cost.moe_fp8 import ExpertRows, moe_linear_weights_on_rank, moe_saved_input_delta_bytes
from solver.cost.moe_comm import dense_and_expert_params, expert_dp_ranks, expert_shape
from solver.cost.recompute import dropped_moe_bytes, mlp_dropped_bytes
from solver.cost.state import framework_state_bytes, moe_gathered_delta_bytes, moe_reduce_scatter_delta_bytes
from solver.cost.terms import CostContext
from solver.specs import Recompute, ZeroStage


def moe_model_state(ctx: CostContext, *, tp: int, pp: int, dp: int, cp: int, zero: ZeroStage,
                    ep: int = 1, etp: int | None = None) -> StateBytes:
    """Weights, gradients and optimizer state per GPU of a MoE model (module docstring)."""
    e_tp = tp if etp is None else etp
    dense, routed = dense_and_expert_params(ctx)
    edp = expert_dp_ranks(tp=tp, cp=cp, dp=dp, ep=ep, etp=e_tp)
    d = framework_state_bytes(ctx.training, dense / (tp * pp), pp=pp, dp=dp, cp=cp, zero=zero)
    x = framework_state_bytes(ctx.training, routed / (ep * e_tp * pp), pp=pp, dp=edp, cp=1, zero=zero)
    gathered = moe_gathered_bytes(ctx, tp=tp, pp=pp, zero=zero, ep=ep, etp=e_tp, shards=dp * cp)
    return StateBytes(d.weights + x.weights + fp8_copy_bytes(ctx, tp=tp, pp=pp, ep=ep, etp=e_tp) + gathered,
                      d.gradients + x.gradients, d.optimizer + x.optimizer)


def moe_gathered_bytes(ctx: CostContext, *, tp: int, pp: int, zero: ZeroStage, ep: int, etp: int,
                       shards: int) -> float:
    """Bytes per GPU that gathered (ZeRO-3 / FSDP) units add because they are MoE blocks, not
    the dense-layer unit memory.comm_buffer_bytes charges (solver.cost.state.
    moe_gathered_delta_bytes; may be negative, never below minus comm_buffer_bytes' gathered
    part), and, with shards = DP x CP > 1, what a MoE block adds to FSDP2's reduce-scatter copy
    (state.moe_reduce_scatter_delta_bytes, torchtitan). Charged once per GPU, on every pipeline
    rank: moe_model_state here, and solver.cost.moe_stages for explicit splits."""
    _dense, routed = dense_and_expert_params(ctx)
    per_layer = routed // (ctx.params.moe_layers + ctx.model.mtp_layers)
    kw = {"tp": tp, "pp": pp, "ep": ep, "etp": etp}
    rs = moe_reduce_scatter_delta_bytes(ctx.training, ctx.params, per_layer, **kw) if shards > 1 else 0.0
    return moe_gathered_delta_bytes(ctx.training, ctx.params, per_layer, zero=zero, **kw) + rs


def fp8_copy_bytes(ctx: CostContext, *, tp: int, pp: int, ep: int, etp: int) -> float:
    """Cached FP8 weight copies (row- and column-wise, 2 x 1 byte per weight) of the linear
    weights the rank's FP8 GEMMs use, expert weights included (moe_fp8.moe_linear_weights_on_rank),
    where the framework caches them (memory.fp8_weight_copy_bytes); 0 otherwise."""
    w = ctx.fp8_work
    if w is None or w.weight_cast_per_use:
        return 0.0
    return 2.0 * FP8_BYTES * moe_linear_weights_on_rank(ctx.model, tp=tp, pp=pp, ep=ep, etp=etp)


@lru_cache(maxsize=65536)
def moe_layer_activation_extra_bytes(ctx: CostContext, *, tp: int, cp: int, recompute: Recompute,
                                     micro_batch: int, ep: int, etp: int) -> float:
    """Bytes one MoE layer keeps beyond a dense layer for one micro-batch (module docstring);
    0 for a dense model or under full recompute."""
    m, e = ctx.model, ctx.model.moe
    if e is None or recompute == "full":
        return 0.0
    sh = expert_shape(ctx, tp=tp, cp=cp, micro_batch=micro_batch, ep=ep, etp=etp)  # memoized per problem
    tt = TT.is_torchtitan_moe(ctx)
    if tt and recompute == "selective" and ctx.framework.memory.selective_recompute.value == "every_other_matmul":
        return TT.sac_moe_extra_bytes(ctx, sh, tp=tp, cp=cp, micro_batch=micro_batch, ep=ep, etp=etp)
    g1 = 3 if m.ffn_gated else 2
    s_b = ctx.seq_len / cp * micro_batch
    rows = sh.busy_rows * sh.local_experts
    moe = (2 * ML.ROUTER_LOGIT_BYTES * sh.tokens * e.experts + ACT_BYTES * rows * m.hidden
           + ACT_BYTES * rows * sh.width * g1 + 4 * rows + ACT_BYTES * s_b * sh.shared_width * g1)
    if recompute == "none":
        moe += combine_saved_bytes(ctx, sh.tokens * e.experts_per_token * etp)
        moe += TT.grouped_product_bytes(ctx, sh) if tt else 0.0
    dense = ACT_BYTES * s_b * (m.ffn_hidden / tp) * g1
    w = ctx.fp8_work
    if w is not None and w.saved_inputs_fp8:  # FP8 saved inputs (solver.cost.moe_fp8)
        rep = s_b / tp if tp > 1 else s_b  # MoE with TP runs sequence parallelism
        moe += moe_saved_input_delta_bytes(ExpertRows.of(sh, s_b, m.hidden, m.ffn_gated), m.ffn_hidden / tp, rep)
    if recompute == "selective":  # moe_act / layernorm outputs discarded (solver.cost.recompute)
        moe -= dropped_moe_bytes(ctx, routed_rows=rows, width=sh.width, norm_rows=s_b / tp if tp > 1 else s_b,
                                 shard_tokens=sh.tokens, shared=bool(sh.shared_width))
        moe += mlp_dropped_bytes(ctx, tp=tp, cp=cp, micro_batch=micro_batch)  # mlp spares MoE layers
    return moe - dense


def combine_saved_bytes(ctx: CostContext, rows: float) -> float:
    """Bytes the framework's token combine keeps for backward beyond Megatron-Core's charge, for
    `rows` combined rows (t k etp) of hidden values: the profile's memory.moe_combine_saved_bytes
    per value (torchtitan's FP32 copy, 4; module docstring), 0 where it states none."""
    cited = ctx.framework.memory.moe_combine_saved_bytes
    return 0.0 if cited is None else cited.value * rows * ctx.model.hidden


def moe_full_layer_bytes(ctx: CostContext, *, tp: int, cp: int, micro_batch: int, ep: int, etp: int) -> float:
    """Under full recompute, what the one layer being recomputed holds beyond a dense one."""
    return moe_layer_activation_extra_bytes(ctx, tp=tp, cp=cp, recompute="none", micro_batch=micro_batch,
                                            ep=ep, etp=etp)


def moe_recomputed_layer_bytes(ctx: CostContext, *, tp: int, cp: int, recompute: Recompute, micro_batch: int,
                               ep: int, etp: int) -> float:
    """What the one MoE layer being recomputed holds beyond a dense one and beyond what it stored,
    as memory.recomputed_layer_bytes for a dense layer: full recompute moe_full_layer_bytes; the
    op-level selective policy (torchtitan SelectiveAC) the unstored part, torchtitan's FP32
    combine copy among it; 0 otherwise."""
    if recompute == "none":
        return 0.0
    kw = {"tp": tp, "cp": cp, "micro_batch": micro_batch, "ep": ep, "etp": etp}
    if recompute == "full":
        return moe_full_layer_bytes(ctx, **kw)
    if ctx.framework.memory.selective_recompute.value == "every_other_matmul":
        return moe_full_layer_bytes(ctx, **kw) - moe_layer_activation_extra_bytes(ctx, recompute=recompute, **kw)
    return 0.0


@lru_cache(maxsize=65536)
def dispatch_working_set_bytes(ctx: CostContext, *, tp: int, cp: int, micro_batch: int, ep: int,
                               etp: int, recompute: Recompute) -> float:
    """Bytes the alltoall token dispatcher holds beyond the stored activations while one MoE
    layer runs, for one micro-batch (module docstring: the larger of the two forward peaks,
    2 bytes x hidden per row); torchtitan's own (moe_torchtitan.dispatch_working_set_bytes, what
    `recompute` stores aside) where its profile says so; 0 for a dense model."""
    m, e = ctx.model, ctx.model.moe
    if e is None:
        return 0.0
    sh = expert_shape(ctx, tp=tp, cp=cp, micro_batch=micro_batch, ep=ep, etp=etp)  # memoized per problem
    if TT.is_torchtitan_moe(ctx):
        return TT.dispatch_working_set_bytes(ctx, sh, recompute=recompute, ep=ep, etp=etp)
    permuted = sh.tokens * e.experts_per_token  # t k: the permuted tokens (and the combine's output)
    rows = sh.busy_rows * sh.local_experts      # R: the rows the rank's experts run
    several = sh.local_experts > 1
    a2a_out = rows / etp if ep > 1 and (several or etp > 1) else 0.0  # else it is the fc1 input
    held = permuted + a2a_out
    unsort = held + rows + (rows if several else 0.0) + (rows / etp if etp > 1 else 0.0)
    combine = held + (rows / etp if etp > 1 else rows) + (permuted if ep > 1 else 0.0)
    return ACT_BYTES * m.hidden * max(unsort, combine)
