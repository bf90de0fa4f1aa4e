"""torchtitan's own MoE block memory: what its SelectiveAC keeps of a MoE block, the extra
product its grouped experts keep without recompute, and its token dispatcher's working set.
Charged where the framework's profile states memory.moe_implementation "torchtitan" (cited there);
solver.cost.moe_memory routes to these and keeps Megatron-Core's formulas otherwise.

Unit legend: `_bytes` bytes per GPU for one MoE layer and one micro-batch; D = hidden; T = the
tokens the block routes on the rank (t x etp: the sequence-parallel shard with EP, the whole
replicated micro-batch sequence without EP, moe_sharding.py L201-240); N = T k permuted rows;
R = the rows the rank's experts run (moe_layer.expert_shape: busy rows x local experts, N at
EP 1); F' = one expert's width on the rank; s b = micro_batch x seq / cp; 2 bytes per BF16 value.

Read at pytorch/torchtitan b5bcd76c66d0acb1a08b176d9639425bc55e0b2a:
- SelectiveAC (torchtitan/distributed/activation_checkpoint.py L31-94 _get_default_save_ops,
  L246-274 wrapped_policy) saves the outputs of torch's compute-intensive ops, aten.linear, SDPA,
  topk, reduce_scatter_tensor and all_to_all_single, except every second mm (counted per block in
  call order) and the mms of the router gate's shape (force_recompute_mm_shapes_by_fqns
  'moe.router.gate', not counted); everything else is recomputed. Of a MoE block that keeps: the
  router's topk (L311-312 of models/common/moe.py: FP32 values and int64 indices, 12 bytes x N);
  with EP > 1 the dispatch and combine all-to-all outputs (token_dispatcher.py L316-340, L344-370:
  R and N rows); the shared experts' (FeedForward w2(silu(w1 x) * w3 x), feed_forward.py L53-54)
  mm outputs at odd positions after the attention's mms (4 for GQA: wq wk wv wo; MLA: wq_a wq_b or
  wq, wkv_a, wkv_b, wo). torch._grouped_mm (GroupedExperts, moe.py L93-108) is in no save list
  torchtitan wrote (the per-model _op_sac_save_list removed in 114151ad4 never held it) nor in the
  compute-intensive ops of the torch read (pytorch/pytorch c28ba8e5 torch/_functorch/partitioners.py
  get_default_op_list), so the experts' GEMM outputs are recomputed, not kept.
- Without recompute GroupedExperts keeps four R x F' values for backward (silu's input, its output
  and the w3 output for the multiply, the product for w2), one more than Megatron-Core's fused
  SwiGLU (fc1's 2 F' and the activation output).
- The combine (token_dispatcher.py L562-634; L141-165 at EP 1) holds, at the FP32 multiply, the
  experts' output (R rows, still bound in RoutedExperts.forward, moe.py L161-168), with EP the
  combine all-to-all output (N rows), out_TD = zeros_like(x) (T rows, allocated first), the FP32
  cast (4 bytes x N D) and the FP32 product (4 bytes x N D). The dispatch (L372-499) holds the
  permuted copy x[idx] (N rows, bound until dispatch returns), the all-to-all output and its
  expert-major copy (R rows each); the experts, at the multiply, their input (R rows) and three
  R x F' tensors (silu output, w3 output, product), then at w2 the product and the R x D output.
The working set is the largest of the three, less what the recompute policy stores (the FP32 cast
without recompute, the all-to-all outputs under SelectiveAC, the experts' tensors without recompute).
"""
from __future__ import annotations

from solver.cost.compute import ACT_BYTES
from solver.cost.moe_layer import ExpertShape
from solver.cost.terms import CostContext
from solver.specs import ModelSpec, Recompute

TOPK_BYTES = 4 + 8  # FP32 value + int64 index per routed row (torch.topk on FP32 scores)
FP32_BYTES = 4


def is_torchtitan_moe(ctx: CostContext) -> bool:
    """The profile's memory.moe_implementation is torchtitan's (module docstring)."""
    cited = ctx.framework.memory.moe_implementation
    return cited is not None and cited.value == "torchtitan"


def attention_mm_count(model: ModelSpec) -> int:
    """mms a block's attention runs before its MoE (torchtitan's models): MLA wq_a + wq_b (or wq),
    wkv_a, wkv_b, wo; otherwise wq, wk, wv, wo."""
    if model.mla is not None:
        return (2 if model.mla.q_lora_rank else 1) + 3
    return 4


def shared_saved_width(ctx: CostContext, sh: ExpertShape) -> float:
    """Values per token SelectiveAC keeps of the shared experts: their mm outputs at odd positions
    counted from the attention's (w1, w3, w2 for a gated FFN, w1, w2 otherwise); w1 and w3 are
    S F_s / tp wide, w2 hidden wide."""
    if not sh.shared_width:
        return 0.0
    widths = [sh.shared_width, sh.shared_width, ctx.model.hidden] if ctx.model.ffn_gated \
        else [sh.shared_width, ctx.model.hidden]
    start = attention_mm_count(ctx.model) + 1
    return float(sum(w for i, w in enumerate(widths) if (start + i) % 2 == 1))


def sac_moe_extra_bytes(ctx: CostContext, sh: ExpertShape, *, tp: int, cp: int, micro_batch: int,
                        ep: int, etp: int) -> float:
    """What SelectiveAC keeps of a MoE block beyond what memory.op_selective_bytes charges a dense
    block's FFN (its W1 output, F / tp, and, gated, its W2 output, hidden), bytes: the router's
    topk (12 N), with EP the two all-to-all outputs (2 (R + N) D) and the shared experts' saved mm
    outputs (2 s b x shared_saved_width)."""
    m, e = ctx.model, ctx.model.moe
    assert e is not None  # callers pass MoE models only
    n_rows = sh.tokens * etp * e.experts_per_token
    rows = sh.busy_rows * sh.local_experts
    s_b = ctx.seq_len / cp * micro_batch
    a2a = ACT_BYTES * (rows + n_rows) * m.hidden if ep > 1 else 0.0
    moe = TOPK_BYTES * n_rows + a2a + ACT_BYTES * s_b * shared_saved_width(ctx, sh)
    dense_ffn = ACT_BYTES * s_b * (m.ffn_hidden / tp + (m.hidden if m.ffn_gated else 0.0))
    return moe - dense_ffn


def grouped_product_bytes(ctx: CostContext, sh: ExpertShape) -> float:
    """Without recompute: the R x F' product GroupedExperts keeps for w2 beyond Megatron-Core's
    fused SwiGLU charge (module docstring), bytes (gated experts only)."""
    return ACT_BYTES * sh.busy_rows * sh.local_experts * sh.width if ctx.model.ffn_gated else 0.0


def dispatch_working_set_bytes(ctx: CostContext, sh: ExpertShape, *, recompute: Recompute, ep: int,
                               etp: int) -> float:
    """Bytes torchtitan's dispatcher and grouped experts hold while one MoE layer's forward runs,
    beyond what the layer stores under `recompute` (module docstring: the largest of dispatch,
    experts and combine)."""
    m, e = ctx.model, ctx.model.moe
    assert e is not None  # callers pass MoE models only
    d, t = m.hidden, sh.tokens * etp
    n_rows, rows, width = t * e.experts_per_token, sh.busy_rows * sh.local_experts, sh.width
    a2a_stored = ep > 1 and recompute == "selective"
    # x[idx] (N rows), the all-to-all output (kept under SelectiveAC) and the experts' input (kept
    # by the first grouped mm without recompute)
    dispatch = (n_rows + (0 if a2a_stored else rows) + (0 if recompute == "none" else rows)) * d if ep > 1 else 0.0
    if recompute == "none":  # everything but the w2 output is kept for backward
        experts = rows * d
    else:
        experts = max(rows * d + 3 * rows * width, 2 * rows * d + rows * width)
    combine = (ACT_BYTES * (rows + t + (n_rows if ep > 1 and not a2a_stored else 0)) * d
               + FP32_BYTES * n_rows * d * (1 if recompute == "none" else 2))
    return max(ACT_BYTES * dispatch, ACT_BYTES * experts, combine)
