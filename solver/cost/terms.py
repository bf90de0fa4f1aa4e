"""Step-time terms: each a function of the few layout scalars it depends on.

Unit legend: `_s` seconds; `_bytes` bytes; per-micro-batch terms are for one micro-batch
on one GPU. Every term takes a CostContext (model, cluster, training, options: fixed for
a search) plus keyword scalars; see solver/cost/step.py for the dependency table and the
composition. Results are cached per argument tuple (pure functions).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

from solver.cost import compute as C, shared_times
from solver.cost.accounting import ParameterCounts, parameter_counts
from solver.cost.communication import achieved_link, allgather_s, allreduce_s, bucketed_s, p2p_s, reduce_scatter_s
from solver.cost.fp8 import FP8_BYTES, Fp8Work, check_compute_precision, fp8_work
from solver.cost.options import DEFAULT_OPTIONS, CostOptions
from solver.cost.recompute import mlp_recompute_s, selective_modules
from solver.frameworks import FrameworkProfile, load_framework
from solver.specs import DEFAULT_RANK_ORDER, ModelSpec, Recompute, TrainingSpec, ZeroStage
from topology.groups import GroupLink, group_links
from topology.spec import ClusterSpec


@dataclass(frozen=True, eq=False)
class CostContext:
    """What is fixed while layouts vary: model, cluster, training recipe, constants.

    Hashed by identity (term caches key on it); build one per problem with make_context.
    Mixture-of-experts layers, MLA and multi-token prediction are covered (solver.cost.moe_comm,
    moe_layer, moe_memory, mtp; compute.mla_gemms).
    """

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    options: CostOptions = DEFAULT_OPTIONS
    rank_order: str = DEFAULT_RANK_ORDER  # LayoutSpec.rank_order: the placement the links assume

    def __post_init__(self) -> None:
        check_compute_precision(self.training.compute_precision, self.cluster.gpu, self.framework,
                                moe=self.model.moe is not None)

    @cached_property
    def framework(self) -> FrameworkProfile:
        """The training framework's profile (its memory semantics and rules)."""
        return load_framework(self.training.framework)

    @cached_property
    def fp8_work(self) -> Fp8Work | None:
        """What the FP8 recipe casts under this framework (None: BF16 GEMMs)."""
        return fp8_work(self.training.compute_precision, self.framework)

    @cached_property
    def params(self) -> ParameterCounts:
        return parameter_counts(self.model, self.training.seq_len)

    @property
    def seq_len(self) -> int:
        return self.training.seq_len


def link(ctx: CostContext, kind: str, tp: int = 1, cp: int = 1, dp: int = 1, pp: int = 1) -> GroupLink:
    """The GroupLink of one group kind, from topology.groups.group_links.

    Each term passes the degrees that place its group: a group's ranks depend on its own
    size and the sizes of the dimensions faster than it in ctx.rank_order (TP and CP are
    fastest in both supported orders; DP and PP terms pass all four degrees). At the
    tier's achieved busbw (communication.achieved_link; the stated one by default).
    """
    return achieved_link(group_links(ctx.cluster, tp, cp, dp, pp, order=ctx.rank_order)[kind], ctx.options)


@lru_cache(maxsize=256)
def with_rank_order(ctx: CostContext, rank_order: str) -> CostContext:
    """The same problem under another placement (one derived context per order, so the
    term caches keyed on the context keep working)."""
    if rank_order == ctx.rank_order:
        return ctx
    return dataclasses.replace(ctx, rank_order=rank_order)


@lru_cache(maxsize=65536)
def _layer(ctx: CostContext, tp: int, cp: int, sp: bool, micro_batch: int) -> C.LayerTimes:
    return shared_times.layer_times(ctx, tp, cp, sp, micro_batch)  # equal to compute.layer_times


def _activation_msg_bytes(ctx: CostContext, cp: int, micro_batch: int) -> float:
    """One layer's full activation (micro_batch x seq/cp x hidden, BF16): the TP collective buffer."""
    return C.ACT_BYTES * micro_batch * ctx.seq_len / cp * ctx.model.hidden


def layer_compute_s(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute,
                    micro_batch: int) -> float:
    """One layer, one micro-batch: forward + backward (2x forward GEMMs) + recompute, seconds."""
    lt = _layer(ctx, tp, cp, sp, micro_batch)
    extra = mlp_recompute_s(ctx, tp=tp, cp=cp, micro_batch=micro_batch) if recompute == "selective" else 0.0
    return lt.forward_s + lt.backward_s + lt.recompute_s(recompute, selective_modules(ctx)) + extra


def layer_tp_comm_s(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute,
                    micro_batch: int) -> float:
    """Exposed TP collective time of one layer for one micro-batch, seconds.

    Without SP: forward 2 all-reduces (attention output, FFN down; Shoeybi et al. 2019,
    Fig. 3 'g'), backward 2 all-reduces ('f') overlapped with the weight-gradient GEMMs
    of QKV and FFN-up (Megatron async TP all-reduce). With SP (Korthikanti et al. 2022,
    Sec. 4.2.2): forward 2 all-gathers + 2 reduce-scatters; backward 2 all-gathers before
    the row-parallel GEMMs (exposed), 2 reduce-scatters and 2 input re-gathers overlapped
    with the column-parallel GEMMs. Full recompute repeats the forward collectives. FP8 with
    fp8.sp_gather_fp8 (TE gathers the quantized input, module/linear.py L380-411): the two
    forward all-gathers move 1-byte values; gradients and reduce-scatters stay BF16.
    """
    if tp == 1:
        return 0.0
    lk = link(ctx, "tp", tp=tp)
    msg = _activation_msg_bytes(ctx, cp, micro_batch)
    lt = _layer(ctx, tp, cp, sp, micro_batch)
    if sp:
        ag, rs = allgather_s(msg, lk), reduce_scatter_s(msg, lk)
        w = ctx.fp8_work
        ag_fwd = allgather_s(msg * FP8_BYTES / C.ACT_BYTES, lk) if w is not None and w.sp_gather_fp8 else ag
        fwd = 2 * (ag_fwd + rs)
        bwd = 2 * ag + max(0.0, 2 * (rs + ag) - (lt.column_dgrad_s + lt.column_wgrad_s))
    else:
        ar = allreduce_s(msg, lk)
        fwd = 2 * ar
        bwd = max(0.0, 2 * ar - lt.column_wgrad_s)
    return fwd + bwd + (fwd if recompute == "full" else 0.0)


def layer_cp_comm_s(ctx: CostContext, *, tp: int, cp: int, recompute: Recompute,
                    micro_batch: int) -> float:
    """Exposed context-parallel ring time of one layer for one micro-batch, seconds.

    Ring attention with causal load balancing (Liu et al. 2023, "Ring Attention with
    Blockwise Transformers", arXiv:2310.01889; Megatron-LM's default `--cp-comm-type p2p`
    (NVIDIA/Megatron-LM d98e8a6, megatron/training/arguments.py; "P2P is async and can be
    overlapped with attention compute", core/transformer/transformer_config.py) runs
    Transformer Engine's AttnFuncWithCPAndKVP2P, NVIDIA/TransformerEngine d0067d0,
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py): the
    sequence is cut into 2 x cp chunks and rank r holds chunks r and 2cp-1-r, so each of the
    cp ring steps computes two chunk x chunk tiles, 1/cp of the rank's causal attention
    (step 0 the diagonal, then lower- or upper-triangle halves). A step's send runs on its
    own stream under that step's compute and must land before the next step starts, so each
    send is exposed by max(0, send - step compute):
    - forward: cp - 1 sends of this rank's K and V block (micro_batch x seq/cp x K dh/tp, BF16);
    - backward: step 0 sends K/V, steps 1..cp-2 send K/V with the travelling dK/dV (one
      buffer twice the size, same dtype), step cp-1 sends dK/dV; each under one step's
      attention backward;
    - selective or full recompute runs the forward ring again.
    """
    if cp == 1:
        return 0.0
    lk = link(ctx, "cp", tp=tp, cp=cp)
    sh = C.layer_shape(ctx.model, ctx.seq_len, tp, cp, micro_batch)
    kv = p2p_s(2 * C.ACT_BYTES * sh.tokens * sh.kv_width, lk)   # K and V of the local tokens
    kv_dkv = p2p_s(4 * C.ACT_BYTES * sh.tokens * sh.kv_width, lk)  # with dK and dV
    lt = _layer(ctx, tp, cp, False, micro_batch)
    fwd_step, bwd_step = lt.attn_fwd_s / cp, lt.attn_bwd_s / cp
    exposed_fwd = (cp - 1) * max(0.0, kv - fwd_step)
    exposed_bwd = 2 * max(0.0, kv - bwd_step) + (cp - 2) * max(0.0, kv_dkv - bwd_step)
    return exposed_fwd + exposed_bwd + (exposed_fwd if recompute != "none" else 0.0)


def p2p_per_microbatch_s(ctx: CostContext, *, tp: int, cp: int, dp: int, pp: int, vpp: int,
                         micro_batch: int) -> float:
    """Pipeline send/receive time per micro-batch on one rank, seconds.

    Each micro-batch crosses a rank's chunk boundaries vpp times forward and vpp times
    backward; each crossing sends micro_batch x seq/cp x hidden BF16 values split over the
    TP ranks (scatter/gather optimization, Narayanan et al. 2021, Sec. 4.1).
    """
    if pp == 1:
        return 0.0
    lk = link(ctx, "pp", tp=tp, cp=cp, dp=dp, pp=pp)
    msg = _activation_msg_bytes(ctx, cp, micro_batch) / tp
    return 2 * vpp * p2p_s(msg, lk)


def head_extra_s(ctx: CostContext, *, tp: int, cp: int, sp: bool, micro_batch: int, pp: int) -> float:
    """Extra work of the heaviest pipeline stage per micro-batch, seconds.

    The last stage runs the final norm, LM head and cross-entropy (forward and backward)
    plus the TP collective around the LM head (all-gather fwd + reduce-scatter bwd with SP,
    an all-reduce bwd without). With pp = 1 the same rank also runs the token embedding.
    """
    gpu, o = ctx.cluster.gpu, ctx.options
    t = shared_times.head_times_s(ctx, tp, cp, sp, micro_batch)  # equal to compute.head_times_s
    if tp > 1:
        lk, msg = link(ctx, "tp", tp=tp), _activation_msg_bytes(ctx, cp, micro_batch)
        t += allgather_s(msg, lk) + reduce_scatter_s(msg, lk) if sp else allreduce_s(msg, lk)
    if pp == 1:
        t += C.embedding_s(ctx.model, ctx.seq_len, gpu, o, tp, cp, micro_batch)
    return t


@lru_cache(maxsize=65536)
def embedding_s(ctx: CostContext, *, tp: int, cp: int, micro_batch: int) -> float:
    """Token embedding of one micro-batch on the first stage (forward + gradient), seconds.

    Charged separately only for an explicit pipeline split (solver.cost.step); with pp = 1
    head_extra_s includes it.
    """
    return C.embedding_s(ctx.model, ctx.seq_len, ctx.cluster.gpu, ctx.options, tp, cp, micro_batch)


def _dp_link(ctx: CostContext, tp: int, cp: int, dp: int, pp: int) -> GroupLink:
    """Gradient-reduction group: the DP x CP ranks (CP ranks hold the same weights; Megatron-
    Core reduces gradients over the data-parallel group with context parallelism, the 'dp_cp'
    group: get_data_parallel_group(with_context_parallel=True), NVIDIA/Megatron-LM d98e8a6,
    megatron/core/process_groups_config.py, core/distributed/finalize_model_grads.py).

    Its own routed link, not the DP group's: with cp = 1 the DP group; with dp = 1 the CP
    group; when CP and DP are neighbours in the rank order (tp-cp-dp-pp, or pp = 1) the
    DP x CP ranks are one arithmetic progression, i.e. the DP group of the same placement
    with the two degrees merged (topology.groups.group_links(tp, 1, cp x dp, pp)); otherwise
    (tp-cp-pp-dp with pp > 1) a ring over both sets of hops: the slower bandwidth and latency
    of the CP and DP groups, on dp x cp ranks.
    """
    if cp == 1:
        return link(ctx, "dp", tp=tp, cp=cp, dp=dp, pp=pp)
    if dp == 1:
        return link(ctx, "cp", tp=tp, cp=cp, dp=dp, pp=pp)
    if pp == 1 or ctx.rank_order.startswith("tp-cp-dp"):
        return link(ctx, "dp", tp=tp, cp=1, dp=cp * dp, pp=pp)
    lc, ld = link(ctx, "cp", tp=tp, cp=cp, dp=dp, pp=pp), link(ctx, "dp", tp=tp, cp=cp, dp=dp, pp=pp)
    return dataclasses.replace(
        ld, size=dp * cp, bandwidth_gb_s=min(lc.bandwidth_gb_s, ld.bandwidth_gb_s),
        latency_s=max(lc.latency_s, ld.latency_s), crosses_nodes=lc.crosses_nodes or ld.crosses_nodes,
        ranks_per_node=1, intra_bandwidth_gb_s=None, intra_latency_s=None,
        inter_bandwidth_gb_s=None, inter_latency_s=None)


def dp_bucket_elements(options, dp: int) -> int:
    """Gradient bucket size on a DP group of `dp` ranks, elements.

    Megatron-Core DistributedDataParallel's default: max(40M, 1M x dp) elements, so that
    each rank's chunk of a ring stays bandwidth-bound at large DP (megatron/core/
    distributed/distributed_data_parallel.py). Without it a 512-way ring would pay
    2 x 511 latencies per 40M elements.
    """
    return max(options.dp_bucket_elements, options.dp_bucket_elements_per_rank * dp)


@dataclass(frozen=True)
class DpTraffic:
    """One GPU's data-parallel collectives over its local parameters, seconds each."""

    allreduce_s: float        # gradient all-reduce (ZeRO-0)
    reduce_scatter_s: float   # one full gradient reduce-scatter
    allgather_s: float        # one full parameter all-gather
    ar_bucket_s: float        # the last bucket of each, which waits for the end of its pass
    rs_bucket_s: float
    ag_bucket_s: float


def dp_traffic(ctx: CostContext, *, tp: int, cp: int, dp: int, pp: int) -> DpTraffic | None:
    """Bucketed ring collectives of the DP x CP group (None with one replica)."""
    lk = _dp_link(ctx, tp, cp, dp, pp)
    if lk.size <= 1:
        return None
    return bucketed_traffic(ctx, _dense_params(ctx) / (tp * pp), dp, lk)


def bucketed_traffic(ctx: CostContext, local: float, replicas: int, lk: GroupLink) -> DpTraffic:
    """Bucketed ring collectives over `lk` for `local` parameters per rank: gradient all-reduce
    or reduce-scatter and weight all-gather, bucket size set for `replicas` ranks."""
    rec = ctx.training.precision
    bucket = dp_bucket_elements(ctx.options, replicas)
    grads, gb = local * rec.grad_bytes, bucket * rec.grad_bytes
    weights, wb = local * rec.weight_bytes, bucket * rec.weight_bytes
    ar, ar_last = bucketed_s(grads, gb, lk, allreduce_s)
    rs, rs_last = bucketed_s(grads, gb, lk, reduce_scatter_s)
    ag, ag_last = bucketed_s(weights, wb, lk, allgather_s)
    return DpTraffic(ar, rs, ag, ar_last, rs_last, ag_last)


def _dense_params(ctx: CostContext) -> int:
    """Parameters the DP x CP group reduces: all of a dense model's; a MoE model's less its
    routed experts, which the expert-DP group reduces (solver.cost.moe_comm.expert_traffic)."""
    if ctx.model.moe is None:
        return ctx.params.total
    from solver.cost.moe_comm import dense_and_expert_params
    return dense_and_expert_params(ctx)[0]


@lru_cache(maxsize=65536)  # the search asks once per ZeRO stage and accumulation (dp_exposed_s)
def _with_experts(ctx: CostContext, *, tp: int, cp: int, dp: int, pp: int, ep: int,
                  etp: int | None) -> DpTraffic | None:
    """The DP x CP group's traffic (dp_traffic) plus, for a MoE model, the expert-DP group's (run
    one after the other under the same windows; the last bucket is the later of the two)."""
    t = dp_traffic(ctx, tp=tp, cp=cp, dp=dp, pp=pp)
    if ctx.model.moe is None:
        return t
    from solver.cost.moe_comm import expert_traffic
    x = expert_traffic(ctx, tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, etp=tp if etp is None else etp)
    if x is None or t is None:
        return t or x
    return DpTraffic(t.allreduce_s + x.allreduce_s, t.reduce_scatter_s + x.reduce_scatter_s,
                     t.allgather_s + x.allgather_s, max(t.ar_bucket_s, x.ar_bucket_s),
                     max(t.rs_bucket_s, x.rs_bucket_s), max(t.ag_bucket_s, x.ag_bucket_s))


def micro_batch_windows_s(ctx: CostContext, *, tp: int, cp: int, dp: int, pp: int,
                          grad_accum: int) -> tuple[float, float]:
    """(forward, backward) compute seconds of one micro-batch on one rank.

    Sequences per replica (global batch / (dp x seq_len)) / grad_accum per micro-batch x
    layers on the rank (ceil(L / pp)) x one sequence's layer time without recompute (the
    smallest window any recompute level gives, so exposures are upper bounds).
    """
    lt = _layer(ctx, tp, cp, tp > 1, 1)
    per_micro_batch = ctx.training.global_batch_tokens / (dp * ctx.seq_len) / grad_accum
    scale = per_micro_batch * math.ceil(ctx.model.layers / pp)
    return scale * lt.forward_s, scale * lt.backward_s


def _hidden(comm_s: float, last_s: float, window_s: float, overlap: float) -> float:
    """Exposed part of a bucketed collective run under a compute window: the last bucket
    waits for the window's end; the rest hides under overlap x window."""
    return max(0.0, comm_s - last_s - overlap * window_s) + last_s


def dp_exposed_s(ctx: CostContext, *, tp: int, cp: int, dp: int, pp: int, zero: ZeroStage,
                 grad_accum: int, ep: int = 1, etp: int | None = None) -> float:
    """Exposed DP time per step on one GPU, seconds.

    Each collective can hide under the compute that runs while it is in flight, times
    options.dp_overlap_fraction (the share of a window NCCL traffic actually overlaps);
    the last bucket of each waits for its pass to end (Li et al. 2020, PyTorch DDP,
    Sec. 3.2.3). The windows, per micro-batch (micro_batch_windows_s):
    - ZeRO-0/1: gradients accumulate locally, so the all-reduce / reduce-scatter can only
      run under the last micro-batch's backward (Megatron overlap_grad_reduce); ZeRO-1's
      parameter all-gather under the first forward of the next step (overlap_param_gather).
    - ZeRO-2: a reduce-scatter under every micro-batch's backward; the all-gather as ZeRO-1.
    - ZeRO-3: every micro-batch prefetches the parameters under its forward and again,
      with the gradient reduce-scatter, under its backward (FSDP, Zhao et al. 2023, Sec. 4).
    With overlap 0 this is the plain sum of the step's traffic (Rajbhandari et al. 2020,
    Sec. 5.1-5.3): ZeRO-0 = AR, 1 = RS + AG (Megatron distributed optimizer), 2 = m RS + AG
    (sharded gradients cannot accumulate locally), 3 = m (RS + 2 AG) (parameters gathered
    for forward and again for backward); ZeRO-3 >= ZeRO-2 >= ZeRO-1 for any overlap.
    A MoE model's routed-expert gradients go over the expert-DP group (ep, etp: the layout's;
    etp None = tp) in the same windows (_with_experts).
    """
    t = _with_experts(ctx, tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, etp=etp)
    if t is None:
        return 0.0
    fwd, bwd = micro_batch_windows_s(ctx, tp=tp, cp=cp, dp=dp, pp=pp, grad_accum=grad_accum)
    f, m = ctx.options.dp_overlap_fraction, grad_accum
    gather = _hidden(t.allgather_s, t.ag_bucket_s, fwd, f)
    reduce = _hidden(t.reduce_scatter_s, t.rs_bucket_s, bwd, f)
    if zero == 0:
        return _hidden(t.allreduce_s, t.ar_bucket_s, bwd, f)
    if zero == 1:
        return reduce + gather
    if zero == 2:
        return m * reduce + gather
    return m * (gather + _hidden(t.allgather_s + t.reduce_scatter_s, t.rs_bucket_s, bwd, f))


def optimizer_s(ctx: CostContext, *, tp: int, cp: int, dp: int, pp: int, zero: ZeroStage,
                ep: int = 1, etp: int | None = None) -> float:
    """Optimizer step over the local shard, memory-bound, seconds.

    Adam (Kingma & Ba 2015) reads the gradient twice (norm for clipping, update), reads
    and writes the optimizer state (moments, FP32 master if kept) and the working weights.
    ZeRO >= 1 shards this over the DP x CP group (Rajbhandari et al. 2020, Sec. 5.1); a MoE
    model's routed experts (1/(ep etp pp) per rank) over the expert-DP group (Megatron's
    distributed optimizer shards expert-parallel buffers over intra_expt_dp_group,
    megatron/core/distributed/distributed_data_parallel.py L285-286, d98e8a64).
    """
    rec = ctx.training.precision
    dense = _dense_params(ctx)
    shard = dense / (tp * pp) / (dp * cp if zero >= 1 else 1)
    if ctx.model.moe is not None:
        e_tp = tp if etp is None else etp
        edp = tp * cp * dp // (ep * e_tp)
        shard += (ctx.params.total - dense) / (ep * e_tp * pp) / (edp if zero >= 1 else 1)
    per_param = 2 * rec.grad_bytes + 2 * rec.optimizer_bytes_per_param + 2 * rec.weight_bytes
    hbm = ctx.cluster.gpu.hbm_gb_s * 1e9 * ctx.options.hbm_fraction
    return shard * per_param / hbm + _fp8_weight_cast_s(ctx, tp=tp, pp=pp, ep=ep, etp=etp)


def _fp8_weight_cast_s(ctx: CostContext, *, tp: int, pp: int, ep: int, etp: int | None) -> float:
    """compute.fp8_weight_cast_s; a MoE model casts its rank's expert weights instead of the
    dense FFN's in its MoE layers (moe_fp8.moe_linear_weights_on_rank)."""
    w = ctx.fp8_work
    if ctx.model.moe is None or w is None or w.weight_cast_per_use:
        return C.fp8_weight_cast_s(ctx.model, ctx.cluster.gpu, ctx.options, w, tp, pp)
    from solver.cost.moe_fp8 import moe_linear_weights_on_rank
    weights = moe_linear_weights_on_rank(ctx.model, tp=tp, pp=pp, ep=ep, etp=tp if etp is None else etp)
    return w.cast_bytes_per_element * weights / (ctx.cluster.gpu.hbm_gb_s * 1e9 * ctx.options.hbm_fraction)


def layers_on_rank(layers: int, pp: int, vpp: int) -> int:
    """Transformer layers on the most loaded pipeline rank: ceil(L / (pp vpp)) x vpp."""
    return math.ceil(layers / (pp * vpp)) * vpp
