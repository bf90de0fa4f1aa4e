"""Per-GPU memory terms: model state, activations, logits, communication buffers, overhead.

Unit legend: `_bytes` bytes; s = sequence length, b = micro-batch, h = hidden, a = heads,
t = TP degree, L = layers, p = PP degree, v = virtual stages, F = FFN width.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", arXiv:2205.05198), Sec. 4: per layer sbh(34 + 5as/h) bytes (eq. 1:
attention 11sbh + 5as^2b, MLP 19sbh, norms 4sbh); with TP sbh(10 + 24/t + 5as/(ht))
(eq. 2); with TP + SP sbh/t (34 + 5as/h) (eq. 3); selective recompute drops the 5as^2b
term (Sec. 5: 34 sbh/t); full recompute keeps only the layer input, 2sbh (/t with SP).
The first pipeline stage holds p micro-batches of L/p layers (1F1B, Sec. 4.2.3), scaled by
1 + (p-1)/(p v) for the interleaved schedule (Sec. 4.2.3; Megatron-LM
theoretical_memory_usage.py). Extensions derived the same way (2 bytes per stored BF16
value, 1 per dropout-mask value): GQA stores K and V of width K dh; SwiGLU stores both FFN
up outputs (2 x 2sbF) and the product (2sbF); FlashAttention stores no s x s tensor, only
the FP32 log-sum-exp (4 s b a) besides Q, K, V and the output; CP divides s by cp.
"""
from __future__ import annotations

from dataclasses import dataclass

from solver.cost.accounting import StateBytes
from solver.cost.compute import ACT_BYTES, dropout_on, linear_weights_on_rank
from solver.cost.options import AttentionKernel
from solver.cost.fp8 import FP8_BYTES, saved_input_saving_bytes
from solver.cost.recompute import dropped_dense_bytes, selective_modules
from solver.cost.state import BF16_BYTES, framework_state_bytes, gathered_weight_bytes, reduce_scatter_bytes
from solver.cost.terms import CostContext, dp_bucket_elements, layers_on_rank
from solver.frameworks.profile import SelectivePolicy
from solver.specs import ModelSpec, Recompute, ZeroStage


@dataclass(frozen=True)
class LayerActivations:
    """Bytes one layer keeps for backward, for one micro-batch on one GPU, by part."""

    norms: float          # inputs of the two norms (4sbh)
    attention: float      # QKV input, Q, K, V, output-projection input, dropout mask
    attention_core: float  # s x s softmax/dropout tensors (unfused) or log-sum-exp (flash)
    mlp: float            # FFN input, activation input(s) and output, dropout mask

    @property
    def total(self) -> float:
        return self.norms + self.attention + self.attention_core + self.mlp


def layer_activation_parts(model: ModelSpec, seq_len: int, *, tp: int, cp: int, sp: bool,
                           micro_batch: int, kernel: AttentionKernel, dropout: bool) -> LayerActivations:
    """Stored activations of one layer without recompute (Korthikanti et al. 2022, Sec. 4.1-4.2).

    `rep` is the share of the sequence-parallel regions kept per GPU: 1/t with SP, 1 without
    (eq. 2 vs eq. 3). Tensor-parallel regions are split over t in both.
    """
    s, b, h = seq_len / cp, micro_batch, model.hidden
    rep = 1.0 / tp if sp else 1.0
    sbh = s * b * h
    mask = sbh if dropout else 0.0
    q_width = model.heads * model.head_dim / tp
    kv_width = max(1, model.kv_heads // tp) * model.head_dim
    heads = model.heads / tp
    attention = (ACT_BYTES * sbh * rep + mask * rep                         # QKV input, out mask
                 + ACT_BYTES * s * b * (2 * q_width + 2 * kv_width))       # Q, K, V, proj input
    if model.mla is not None:
        attention = ACT_BYTES * sbh * rep + mask * rep + mla_stored_bytes(model, s * b, tp=tp, rep=rep)
    if kernel == "unfused":
        core = (5.0 if dropout else 2.0) * heads * s * seq_len * b   # softmax (+mask, +dropout out)
    else:
        core = 4.0 * s * b * heads                                   # FP32 log-sum-exp
    ffn = model.ffn_hidden / tp
    mlp = (ACT_BYTES * sbh * rep + mask * rep                                # FFN input, mask
           + ACT_BYTES * s * b * ffn * ((2 if model.ffn_gated else 1) + 1))  # act in(s) + out
    return LayerActivations(norms=2 * ACT_BYTES * sbh * rep, attention=attention,
                            attention_core=core, mlp=mlp)


def mla_stored_bytes(model: ModelSpec, tokens: float, *, tp: int, rep: float) -> float:
    """What MLA keeps for backward beyond its input, for `tokens` = s b per GPU (BF16; the
    shapes of compute.mla_gemms, NVIDIA/Megatron-LM d98e8a64 multi_latent_attention.py):
    the down projections' outputs on the sequence-parallel shard (rep: 1/t with SP), the
    latents after their RMSNorms gathered for the up projections (r_q + r_kv), Q and K of
    H d_qk / t, V of H d_v / t and the core output, the output projection's input (H d_v / t)."""
    a, h = model.mla, model.heads / tp
    assert a is not None
    r_q = a.q_lora_rank or 0
    down = (r_q + a.kv_lora_rank + a.qk_rope_head_dim) * rep
    return ACT_BYTES * tokens * (down + r_q + a.kv_lora_rank + 2 * h * a.qk_head_dim + 2 * h * a.v_head_dim)


def layer_activation_bytes(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute,
                           micro_batch: int) -> float:
    """Bytes one layer keeps for backward for one micro-batch under a recompute level.

    none: everything (eq. 1-3); selective: all but the attention core (Sec. 5, 34sbh/t with
    SP); full: the layer input only, 2sbh (/t with SP) (Sec. 5 / Chen et al. 2016).
    """
    if recompute == "full":
        rep = 1.0 / tp if sp else 1.0
        return ACT_BYTES * ctx.seq_len / cp * micro_batch * ctx.model.hidden * rep
    if recompute == "selective" and _selective_policy(ctx) == "every_other_matmul":
        return op_selective_bytes(ctx.model, ctx.seq_len, tp=tp, cp=cp, sp=sp, micro_batch=micro_batch)
    parts = layer_activation_parts(ctx.model, ctx.seq_len, tp=tp, cp=cp, sp=sp, micro_batch=micro_batch,
                                   kernel=ctx.training.attention_kernel,
                                   dropout=dropout_on(ctx.model, ctx.options))
    kept = parts.total
    if recompute == "selective":  # the recomputed modules' outputs (solver.cost.recompute)
        kept -= parts.attention_core if "core_attn" in selective_modules(ctx) else 0.0
        kept -= dropped_dense_bytes(ctx, tp=tp, cp=cp, sp=sp, micro_batch=micro_batch)
    return kept - fp8_saved_input_saving(ctx, tp=tp, cp=cp, sp=sp, micro_batch=micro_batch)


def fp8_saved_input_saving(ctx: CostContext, *, tp: int, cp: int, sp: bool, micro_batch: int) -> float:
    """Bytes per layer and micro-batch an FP8 recipe saves by keeping the four GEMM inputs
    for backward in FP8 (frameworks whose profile says fp8.saved_inputs_fp8: Transformer
    Engine); 0 for BF16 GEMMs and for frameworks that keep them in BF16 (torchao)."""
    w = ctx.fp8_work
    if w is None or not w.saved_inputs_fp8:
        return 0.0
    s_b = ctx.seq_len / cp * micro_batch
    m = ctx.model
    # the output projection's input: H d_v with MLA (linear_proj of query_projection_size =
    # v_head_dim x heads, multi_latent_attention.py L163, L221-223, NVIDIA/Megatron-LM d98e8a64)
    out_in = m.heads * (m.mla.v_head_dim if m.mla is not None else m.head_dim) / tp
    return saved_input_saving_bytes(s_b / tp if sp else s_b, s_b, m.hidden, out_in, m.ffn_hidden / tp)


def fp8_weight_copy_bytes(ctx: CostContext, *, tp: int, pp: int) -> float:
    """FP8 copies of the rank's linear weights kept across the step, bytes: row-wise and
    column-wise (transposed) 1-byte copies, 2 bytes per weight, where the framework caches
    them (profile fp8.weight_cast 'per_step': Transformer Engine's weight workspace,
    module/linear.py L479-490); 0 for BF16 and for per-use casting."""
    w = ctx.fp8_work
    if w is None or w.weight_cast_per_use:
        return 0.0
    return 2.0 * FP8_BYTES * linear_weights_on_rank(ctx.model, tp, pp)


def _selective_policy(ctx: CostContext) -> SelectivePolicy:
    return ctx.framework.memory.selective_recompute.value


def op_selective_bytes(model: ModelSpec, seq_len: int, *, tp: int, cp: int, sp: bool,
                       micro_batch: int) -> float:
    """Bytes one layer keeps under op-level selective recompute that saves matmul and
    attention outputs except every second matmul (torchtitan SelectiveAC; its profile cites
    activation_checkpoint.py).

    The block's matmuls in call order: Q(1) K(2) V(3) O(4), then gated W1(5) W3(6) W2(7) or
    plain up(5) down(6); the odd-numbered outputs are saved: Q (H dh / t), V (K dh / t), W1
    or up (F / t) and, gated, W2 (h: the row-parallel output before its reduction). The
    attention output (H dh / t) and its FP32 log-sum-exp are saved (SDPA is a saved op) and
    the block input (h, /t with SP) is the checkpoint's input; norms, activations and
    residual adds are recomputed. 2 bytes per BF16 value.
    """
    s_b = seq_len / cp * micro_batch
    q = model.heads * model.head_dim / tp
    kv = max(1, model.kv_heads // tp) * model.head_dim
    ffn = model.ffn_hidden / tp
    saved_mm = q + kv + ffn + (model.hidden if model.ffn_gated else 0.0)
    block_input = model.hidden / (tp if sp else 1)
    values = block_input + saved_mm + q  # + the attention output
    return ACT_BYTES * s_b * values + 4.0 * s_b * model.heads / tp  # + FP32 log-sum-exp


def in_flight_microbatches(pp: int, vpp: int, grad_accum: int) -> float:
    """Micro-batches whose activations the first stage holds at its peak (in units of a
    whole stage's L/p layers): 1F1B min(p, m); interleaved min(m, p (1 + (p-1)/(p v)))
    (Korthikanti et al. 2022, Sec. 4.2.3; Narayanan et al. 2021, Sec. 2.2.1).

    The interleaved figure is the first rank's warm-up, (v-1) p + 2 (p-1) forward chunks
    plus one, of L/(p v) layers each; both Megatron-Core (schedules.py,
    get_pp_rank_microbatches: warm-up capped at the m v chunks there are) and PyTorch's
    ScheduleInterleaved1F1B (warm-up ops capped at the stage's m x v micro-batch ops) stop
    at m micro-batches of every local chunk, i.e. m x L/p layers: no rank holds more than
    the m micro-batches of the step."""
    if pp == 1:
        return 1.0
    if vpp == 1:
        return float(min(pp, grad_accum))
    return min(float(grad_accum), pp * (1.0 + (pp - 1) / (pp * vpp)))


def embedding_stored_bytes(ctx: CostContext, *, tp: int, cp: int, sp: bool, micro_batch: int) -> float:
    """What the embedding keeps for backward per micro-batch on the first stage: 8 s b bytes
    of token ids, plus a dropout mask s b h (/t with SP) when dropout is on (Korthikanti
    Sec. 4.3, Megatron theoretical_memory_usage.py)."""
    s_b = ctx.seq_len / cp * micro_batch
    mask = s_b * ctx.model.hidden / (tp if sp else 1) if dropout_on(ctx.model, ctx.options) else 0.0
    return 8 * s_b + mask


def activation_bytes(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute,
                     micro_batch: int, pp: int, vpp: int, grad_accum: int) -> float:
    """Peak activation bytes on the first pipeline stage (the most loaded one).

    Layers on the rank x in-flight micro-batches x per-layer bytes, plus the embedding's
    stored values (8 s b bytes of token ids and a dropout mask sbh/t per micro-batch;
    Korthikanti Sec. 4.3, Megatron theoretical_memory_usage.py) and, where the pipeline engine
    keeps them, each in-flight micro-batch's pipe buffers (pipe_buffer_bytes) and the pipeline
    stage's per-step buffers (stage_buffer_bytes); where rank 1's buffers make it the busier
    rank, rank 1's. Full recompute also holds one layer's full activations while that layer is
    recomputed, op-level selective recompute what that layer did not store
    (recomputed_layer_bytes).
    """
    per_layer = layer_activation_bytes(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute,
                                       micro_batch=micro_batch)
    layers = layers_on_rank(ctx.model.layers, pp, vpp)  # about L/p on the first rank
    flight = in_flight_microbatches(pp, vpp, grad_accum)
    embed = embedding_stored_bytes(ctx, tp=tp, cp=cp, sp=sp, micro_batch=micro_batch)
    pipe = [pipe_buffer_bytes(ctx, tp=tp, cp=cp, micro_batch=micro_batch, rank=r, pp=pp) for r in (0, 1)]
    stage = [stage_buffer_bytes(ctx, tp=tp, cp=cp, sp=sp, micro_batch=micro_batch, rank=r, pp=pp, vpp=vpp,
                                grad_accum=grad_accum) for r in (0, 1)]
    total = per_layer * layers * flight + embed * flight + pipe[0] * flight + stage[0]
    if (pipe[1] or stage[1]) and pp > 2 and vpp == 1:  # rank 1's buffers may make it the busier
        second = float(min(pp - 1, grad_accum))
        total = max(total, (per_layer * layers + pipe[1]) * second + stage[1])
    return total + recomputed_layer_bytes(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch)


def recomputed_layer_bytes(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute,
                           micro_batch: int) -> float:
    """Bytes the one layer being recomputed holds beyond what it stored, one micro-batch, while
    its backward runs. Full recompute: its full activations (the stored input aside). The
    op-level selective policy (torchtitan's SelectiveAC; its profile's selective_recompute
    cites the mechanism): the full activations less the stored ones, since the non-reentrant
    checkpoint recomputes the whole block at its first unpack and keeps every recomputed tensor
    until backward unpacks it. Megatron's per-module selective recompute: 0 (a module's outputs
    at a time, not charged)."""
    if recompute == "none":
        return 0.0
    whole = layer_activation_bytes(ctx, tp=tp, cp=cp, sp=sp, recompute="none", micro_batch=micro_batch)
    if recompute == "full":
        return whole
    if _selective_policy(ctx) == "every_other_matmul":
        return whole - layer_activation_bytes(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch)
    return 0.0


def pipe_buffer_bytes(ctx: CostContext, *, tp: int, cp: int, micro_batch: int, rank: int, pp: int) -> float:
    """What the pipeline engine keeps per in-flight micro-batch on pipeline rank `rank` beyond
    the layers' stored activations, bytes (profile memory.pipe_output_buffers; 0 otherwise):
    DeepSpeed's PipelineEngine keeps every rank's stage output but the last's (s b h BF16,
    partitioned over TP when TP > 1: s b h / t) until that micro-batch's backward, and with
    TP 1 every rank's received input but the first's (the forward runs on a clone of it,
    which the first layer keeps) until its gradient is sent (deepspeedai/DeepSpeed edaa7221
    deepspeed/runtime/pipe/engine.py L722-774, L888-889, L1134, L1146-1177)."""
    flag = ctx.framework.memory.pipe_output_buffers
    if pp == 1 or flag is None or not flag.value:
        return 0.0
    s_b_h = ctx.seq_len / cp * micro_batch * ctx.model.hidden
    out = ACT_BYTES * s_b_h / tp if rank < pp - 1 else 0.0
    return out + (ACT_BYTES * s_b_h if rank > 0 and tp == 1 else 0.0)


def stage_buffer_bytes(ctx: CostContext, *, tp: int, cp: int, sp: bool, micro_batch: int, rank: int, pp: int,
                       vpp: int, grad_accum: int) -> float:
    """The pipeline stage's own buffers on pipeline rank `rank` for the whole step, bytes
    (profile memory.stage_recv_buffers; 0 otherwise). PyTorch's PipelineStage (torchtitan's
    pipeline) allocates, before the first micro-batch, a receive buffer of the stage input for
    every one of the m micro-batches on every stage but the first (_prepare_forward_infra) and
    a receive buffer of the stage output's gradient for every micro-batch on every stage but
    the last (_prepare_backward_infra, _create_grad_recv_info), and keeps each forward's output
    in fwd_cache until that micro-batch's backward (forward_one_chunk; pytorch/pytorch 0138610
    torch/distributed/pipelining/stage.py). Each is one boundary tensor, A = s b h / cp BF16,
    / t with sequence parallelism (the blocks' output is sequence-sharded). An in-flight
    micro-batch's received input is its first block's saved input, already in the layers'
    activations. 1F1B, f = min(pp - r, m) in flight on rank r: outputs f A and gradient buffers
    m A on all but the last rank, inputs (m - f) A on all but the first: rank 0 (m + f) A, the
    middle ranks 2 m A, the last (m - 1) A. Interleaved: every stage at most 2 m A (in flight
    outputs and the other inputs m A, gradients m A), 2 v m A on any rank, an upper bound."""
    flag = ctx.framework.memory.stage_recv_buffers
    if pp == 1 or flag is None or not flag.value:
        return 0.0
    m = grad_accum
    a = ACT_BYTES * ctx.seq_len / cp * micro_batch * ctx.model.hidden / (tp if sp else 1)
    if vpp > 1:
        return 2.0 * vpp * m * a
    f = min(pp - rank, m)
    return a * ((m + f if rank < pp - 1 else 0) + (m - f if rank > 0 else 0))


def logits_bytes(ctx: CostContext, *, tp: int, cp: int, micro_batch: int) -> float:
    """LM-head input and loss buffers of one micro-batch on the last stage.

    2sbh input to the output layer plus s b V/t logits at the framework's bytes per logit
    (its profile's memory.logit_bytes, cited there): Megatron-Core 6, the BF16 logits beside
    their FP32 copy at the unfused vocab-parallel loss, then the FP32 gradient beside its BF16
    cast (Korthikanti et al. 2022, Sec. 4.3 count the 4 bytes of the FP32 softmax kept in
    between, 4sbh(1 + V/h)/t); torchtitan 12 (FP32 log-softmax output,
    its incoming gradient and the gradient it returns, alive when backward starts). Added
    for every pp: exact for pp = 1, an upper bound on the first and last stages for pp > 1.
    Under TP the profile's memory.logit_bytes_tp where it has one (torchtitan's vocab-parallel
    loss: 16). A training spec that states `logit_bytes` (a run whose loss is not its
    framework's) replaces the profile's figure.
    """
    s_b = ctx.seq_len / cp * micro_batch
    mem = ctx.framework.memory
    profile = mem.logit_bytes_tp if tp > 1 and mem.logit_bytes_tp is not None else mem.logit_bytes
    per_logit = ctx.training.logit_bytes or profile.value
    return ACT_BYTES * s_b * ctx.model.hidden + per_logit * s_b * ctx.model.vocab / tp


def mtp_logits_bytes(ctx: CostContext, *, tp: int, cp: int, micro_batch: int) -> float:
    """One multi-token-prediction depth's output head on the last stage: its LM-head input
    (2sbh) and s b V/t logits at the profile's memory.mtp_logit_bytes (torchtitan 4: each
    depth's MTPLoss keeps its FP32 loss input, the one loss's transient gradients being
    logits_bytes'; Megatron-Core 4: each depth's saved FP32 softmax); logits_bytes where the
    profile states none or the training spec states
    `logit_bytes`."""
    per_depth = ctx.framework.memory.mtp_logit_bytes
    if per_depth is None or ctx.training.logit_bytes:
        return logits_bytes(ctx, tp=tp, cp=cp, micro_batch=micro_batch)
    s_b = ctx.seq_len / cp * micro_batch
    return ACT_BYTES * s_b * ctx.model.hidden + per_depth.value * s_b * ctx.model.vocab / tp


def model_state(ctx: CostContext, *, tp: int, pp: int, dp: int, cp: int, zero: ZeroStage,
                ep: int = 1, etp: int | None = None) -> StateBytes:
    """Weights, gradients, optimizer state per GPU under training.framework's recipe
    (solver.cost.state), parameters split evenly over TP x PP; a MoE model's routed experts
    over EP x ETP x PP, sharded over the expert-DP group (solver.cost.moe_memory). The weights
    include the cached FP8 weight copies of an FP8 recipe (fp8_weight_copy_bytes)."""
    if ctx.model.moe is not None:
        from solver.cost.moe_memory import moe_model_state
        return moe_model_state(ctx, tp=tp, pp=pp, dp=dp, cp=cp, zero=zero, ep=ep, etp=etp)
    state = framework_state_bytes(ctx.training, ctx.params.total / (tp * pp), pp=pp, dp=dp, cp=cp, zero=zero)
    copies = fp8_weight_copy_bytes(ctx, tp=tp, pp=pp)
    return state if copies == 0 else StateBytes(state.weights + copies, state.gradients, state.optimizer)


def comm_buffer_bytes(ctx: CostContext, *, tp: int, cp: int, dp: int, pp: int, sp: bool,
                      zero: ZeroStage, micro_batch: int) -> float:
    """Communication buffers per GPU, bytes.

    DP: the gradient-reduction buffers of dp_buffer_bytes (none at ZeRO 0/1 where Megatron's
    DDP / distributed optimizer reduce inside their gradient buffer; DeepSpeed's reduce
    buffers; two buckets otherwise); SP: the all-gathered layer input
    (s b h BF16); PP: a send and a receive buffer per direction (2 x 2 x sbh/t; DeepSpeed's
    pipeline engine, pp_buffer_bytes);
    gathered BF16 weights where the framework's recipe has them (ZeRO-3 / FSDP prefetch:
    two layers; FSDP2's LM-head unit and all-gather stream pool;
    solver.cost.state.gathered_weight_bytes).
    """
    s_b_h = ctx.seq_len / cp * micro_batch * ctx.model.hidden
    out = dp_buffer_bytes(ctx, dp=dp, cp=cp, zero=zero, tp=tp, pp=pp)
    if sp:
        out += ACT_BYTES * s_b_h
    if pp > 1:
        out += pp_buffer_bytes(ctx, s_b_h=s_b_h, tp=tp)
    return out + gathered_weight_bytes(ctx.training, ctx.params, tp=tp, pp=pp, zero=zero)


def pp_buffer_bytes(ctx: CostContext, *, s_b_h: float, tp: int) -> float:
    """Pipeline send / receive buffers per GPU, bytes (s_b_h: one micro-batch's s b h on the
    rank). By default a send and a receive buffer per direction, 4 x 2 s b h / t. DeepSpeed's
    PipelineEngine (profile memory.pipe_output_buffers) sends the stored stage output itself
    and keeps two receive buffers, the activation's (pipe_recv_buf) and the gradient's
    (grad_layer), each split over TP when TP > 1 (pipe_partitioned / grad_partitioned); under
    TP a micro-batch's backward also rebuilds its whole output and whole output gradient
    (deepspeedai/DeepSpeed edaa7221 deepspeed/runtime/pipe/engine.py L838-857, L1146-1165,
    L1200-1230, L1307-1317): 2 x 2 s b h / t, plus 2 x 2 s b h with TP."""
    flag = ctx.framework.memory.pipe_output_buffers
    if flag is None or not flag.value:
        return 4 * ACT_BYTES * s_b_h / tp
    return 2 * ACT_BYTES * s_b_h / tp + (2 * ACT_BYTES * s_b_h if tp > 1 else 0.0)


def dp_buffer_bytes(ctx: CostContext, *, dp: int, cp: int, zero: ZeroStage, tp: int, pp: int) -> float:
    """Gradient-reduction buffers per GPU during backward, bytes (0 with one replica).

    Profiles with memory.reduce_buffers (DeepSpeed): at ZeRO 1-3 that many buffers of the
    reduce bucket in BF16 (the model's dtype under bf16.enabled), the bucket being the one the
    step time charges, terms.dp_bucket_elements(options, dp x cp), which the export writes as
    zero_optimization.reduce_bucket_size (service/launchers/deepspeed.py). ZeRO-1/2 with
    contiguous_gradients allocate one buffer and, with overlap_comm, a second (deepspeedai/
    DeepSpeed edaa7221 deepspeed/runtime/zero/stage_1_and_2.py setup_buckets L2493-2514; under
    the pipeline engine overlap_comm is switched off, engine.py L2389-2393, and reduce_gradients
    adds one after backward, stage_1_and_2.py L866-872); ZeRO-3 keeps one for the whole run
    (stage3.py L730-735) plus the staging copy reduce_scatter_coalesced concatenates a
    bucket's gradients into (runtime/comm/coalesced_collectives.py L182-205; stage3.py L1813).
    ZeRO-0 reduces after backward (engine.py allreduce_gradients L2891-2913), outside the
    activations' peak: the default term. Profiles with memory.reduce_in_grad_buffer
    (Megatron-Core): 0 at ZeRO 0/1, the DDP and distributed-optimizer collectives run in place
    on the contiguous gradient buffer the recipe charges (NVIDIA/Megatron-LM d98e8a64
    megatron/core/distributed/param_and_grad_buffer.py L700-731). Profiles with
    memory.reduce_scatter_copy_bytes (torchtitan's FSDP2): one unit's gradient and its
    reduce-dtype copy (state.reduce_scatter_bytes; tp and pp size the unit). Otherwise two
    buckets of options.dp_bucket_elements at the gradient dtype."""
    if dp * cp <= 1:
        return 0.0
    mem = ctx.framework.memory
    if zero <= 1 and mem.reduce_in_grad_buffer is not None and mem.reduce_in_grad_buffer.value:
        return 0.0
    fsdp = reduce_scatter_bytes(ctx.training, ctx.params, tp=tp, pp=pp)
    if fsdp is not None:  # FSDP2's reduce-scatter copy (torchtitan; every ZeRO stage is fully_shard)
        return fsdp
    n = mem.reduce_buffers
    if n is None or zero == 0:
        return 2 * ctx.options.dp_bucket_elements * ctx.training.precision.grad_bytes
    return n.value * dp_bucket_elements(ctx.options, dp * cp) * BF16_BYTES
