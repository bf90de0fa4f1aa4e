"""Mixture-of-experts step-time terms: the expert groups' links, the token all-to-all, the
MoE layer's extra time over a dense layer, and the expert gradient traffic.

Unit legend: `_s` seconds; `_bytes` bytes; per-micro-batch terms are one micro-batch on one GPU.

Expert groups (NVIDIA/Megatron-LM d98e8a64, megatron/core/parallel_state.py L871-895,
initialize_model_parallel): the expert RankGenerator folds ETP x EP x expert-DP onto the same
TP x CP x DP ranks of a pipeline stage with the decoder's order minus CP ("tp-cp-ep-dp-pp" ->
tp (= ETP), ep, dp (= expert-DP), pp; "tp-cp-ep-pp-dp" under --use-tp-pp-dp-mapping): ETP
fastest, then EP, then expert-DP. So an EP group is ep ranks at stride etp and an expert-DP
group edp ranks at stride etp x ep: exactly the CP and DP groups of a layout with degrees
(tp, cp, dp, pp) = (etp, ep, edp, pp) in the same rank order. expert_links asks
topology.groups.group_links for those, so the EP all-to-all is routed over the cluster like
every other group (inside one NVLink domain or across nodes).

Overlap: Megatron runs the dispatch and combine all-to-all on the compute stream's critical
path unless --overlap-moe-expert-parallel-comm (model_parallel_config.py L343, default False;
"Overlap EP A2A communications with independent computations of different micro-batches in
1f1b phase"), so they are charged in full. With it (training.moe_a2a_overlap) the combined
1F1B schedule runs the forward of one micro-batch and the backward of another layer by layer
(NVIDIA/Megatron-LM d98e8a64, megatron/core/models/common/model_chunk_schedule_plan.py
TransformerLayerSchedulePlan.run, L236-300) in four phases, one all-to-all on the comm stream
beside computation on the compute stream in each:
    comm: combine_bwd   | dispatch_fwd        | dispatch_bwd          | combine_fwd
    comp: attention fwd | MoE block bwd dgrad | MoE wgrad + MoE fwd   | attention bwd
so a paired MoE layer exposes sum over phases of max(0, a2a - compute) (moe_a2a_paired_s).
Only the steady 1F1B slots are paired: the warm-up forwards and cool-down backwards run
alone and expose their all-to-alls in full (paired_fraction).
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from solver.cost import moe_layer as ML
from solver.cost import shared_times
from solver.cost.communication import achieved_link, allgather_s, reduce_scatter_s
from solver.cost.compute import ACT_BYTES
from solver.cost import terms as T
from solver.cost.recompute import moe_act_recompute_s, selective_modules
from solver.cost.terms import CostContext, DpTraffic, bucketed_traffic, layer_tp_comm_s
from solver.specs import Recompute
from topology.collectives import alltoall_time_s
from topology.groups import GroupLink, group_links


@lru_cache(maxsize=65536)  # read-only results; every MoE layer term of a search asks again
def expert_links(ctx: CostContext, *, etp: int, ep: int, edp: int, pp: int) -> dict[str, GroupLink]:
    """Links of the expert groups: 'etp' (expert TP), 'ep' and 'edp' (expert-DP), every group
    of a kind active at once (module docstring: the CP / DP groups of degrees (etp, ep, edp, pp))."""
    links = group_links(ctx.cluster, etp, ep, edp, pp, order=ctx.rank_order)
    return {name: achieved_link(links[kind], ctx.options)  # each tier's achieved busbw (terms.link)
            for name, kind in (("etp", "tp"), ("ep", "cp"), ("edp", "dp"))}


@lru_cache(maxsize=256)  # a count per problem, read for every layout's memory
def routed_expert_params(ctx: CostContext) -> int:
    """Parameters of every routed expert of every MoE layer and multi-token-prediction
    module (one MoE layer each: moe_params.mtp_params), what EP x ETP split; the shared
    experts, router and gates are replicated like the attention (ParameterCounts)."""
    e = ctx.model.moe
    if e is None:
        return 0
    from solver.cost.accounting import ffn_params
    layers = ctx.params.moe_layers + ctx.model.mtp_layers
    return layers * e.experts * ffn_params(ctx.model, e.expert_ffn_hidden)


def imbalance(ctx: CostContext) -> float:
    """The busiest expert rank's load factor (moe_layer.load_imbalance)."""
    return ML.load_imbalance(ctx.training)[0]


def dispatch_bytes(ctx: CostContext, *, tp: int, cp: int, micro_batch: int) -> float:
    """Send buffer of one dispatch (or combine) all-to-all on one rank, bytes: its
    t = micro_batch x seq / (cp tp) tokens x top-k copies x hidden x 2 (BF16). (ep - 1)/ep of
    it leaves the rank (topology.collectives.alltoall_time_s)."""
    e = ctx.model.moe
    assert e is not None
    return ACT_BYTES * micro_batch * ctx.seq_len / (cp * tp) * e.experts_per_token * ctx.model.hidden


class MoELayerComm(NamedTuple):
    """Communication of one MoE layer for one micro-batch on one GPU, seconds (a NamedTuple:
    one is built for every distinct layout row of a search, and a tuple is the cheapest)."""

    a2a_one_s: float      # one dispatch or combine all-to-all of the tokens
    a2a_count: int        # all-to-alls per micro-batch: 2 forward + 2 backward (+ 2 recomputed)
    etp_s: float          # expert-TP all-gather / reduce-scatter of the dispatched tokens
    tp_delta_s: float     # TP collectives a MoE layer drops (no shared experts) or keeps (<= 0)
    routing_s: float = 0.0  # the probabilities' all-to-all and the token-count all-gather

    @property
    def a2a_s(self) -> float:
        return self.a2a_count * self.a2a_one_s + self.routing_s


@lru_cache(maxsize=65536)
def moe_layer_comm(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute, micro_batch: int,
                   ep: int, etp: int, dp: int, pp: int) -> MoELayerComm:
    """Token dispatch/combine all-to-all over the EP group (4 per layer per micro-batch:
    dispatch and combine forward, their gradients backward; full recompute repeats the two
    forward ones), the expert-TP gather/scatter around the expert GEMMs (same count, exposed:
    token_dispatcher.py dispatch_postprocess / combine_preprocess), and the TP collectives of
    the dense FFN that a MoE layer without shared experts does not run (about half of the
    layer's TP time: its FFN all-gather + reduce-scatter pair of the two; shared experts are a
    TP-split MLP with the same pair, so with them nothing changes)."""
    a2a, etp_pair_s, routing = _comm_once(ctx, tp, cp, micro_batch, ep, etp, dp, pp)
    count = 4 + (2 if recompute == "full" else 0)
    drop = 0.0
    e = ctx.model.moe
    assert e is not None
    if e.shared_experts == 0:
        drop = -0.5 * layer_tp_comm_s(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch)
    return MoELayerComm(a2a, count, etp_pair_s * count / 2, drop, _routing_s(routing, count))


@lru_cache(maxsize=65536)
def _comm_once(ctx: CostContext, tp: int, cp: int, micro_batch: int, ep: int, etp: int, dp: int,
               pp: int) -> tuple[float, float, tuple[float, float] | None]:
    """moe_layer_comm's collectives, once each (they do not depend on the recompute level,
    which only sets how many run: memoized apart): one all-to-all of the tokens, one expert-TP
    all-gather + reduce-scatter of the gathered rows, and _routing_s's two collectives."""
    edp = tp * cp * dp // (ep * etp)
    lk = expert_links(ctx, etp=etp, ep=ep, edp=edp, pp=pp)
    msg = dispatch_bytes(ctx, tp=tp, cp=cp, micro_batch=micro_batch)
    a2a = alltoall_time_s(msg, lk["ep"]) if ep > 1 else 0.0
    gathered = msg * etp  # rows after the expert-TP all-gather, full buffer
    etp_s = (allgather_s(gathered, lk["etp"]) + reduce_scatter_s(gathered, lk["etp"])) if etp > 1 else 0.0
    return a2a, etp_s, _routing_once(ctx, msg, lk["ep"], tp=tp, cp=cp, ep=ep, etp=etp, edp=edp, pp=pp)


def _routing_once(ctx: CostContext, dispatch: float, ep_link: GroupLink, *, tp: int, cp: int,
                  ep: int, etp: int, edp: int, pp: int) -> tuple[float, float] | None:
    """The dispatcher's small collectives, one of each (None: EP x ETP = 1, none run): the
    routing probabilities go to the experts in their own all-to-all after the tokens'
    (token_dispatcher.py d98e8a64 token_dispatch, global_probs; FP32, t x k x 4 bytes =
    dispatch / (D / 2)); before each forward dispatch the per-expert token counts are
    all-gathered over the expert TP x EP group (preprocess, gather_from_sequence_parallel_region
    over tp_ep_group: E x 8 bytes per rank) to size the all-to-all. Both latency-bound on
    large EP groups. With training.moe_pad_to_capacity no counts are gathered: every expert
    gets exactly its capacity, so preprocess fills the splits on the host (torch.full) and
    returns before the gather (token_dispatcher.py d98e8a64 L517-540; the same early return
    in core_v0.9.0, 1afee592, L398-410)."""
    if ep * etp == 1:
        return None
    e = ctx.model.moe
    assert e is not None
    probs = alltoall_time_s(dispatch * 4 / (2 * ctx.model.hidden), ep_link) if ep > 1 else 0.0
    if ctx.training.moe_pad_to_capacity:
        return probs, 0.0
    group = _tp_ep_link(ctx, etp * ep, edp, pp)
    return probs, allgather_s(8.0 * e.experts * etp * ep, group)


@lru_cache(maxsize=65536)  # read-only; asked again for every micro-batch size
def _tp_ep_link(ctx: CostContext, size: int, edp: int, pp: int) -> GroupLink:
    """The expert TP x EP group's link (`size` ranks; the 'tp' group of degrees (size, 1, edp, pp))."""
    return achieved_link(group_links(ctx.cluster, size, 1, edp, pp, order=ctx.rank_order)["tp"], ctx.options)


def _routing_s(routing: tuple[float, float] | None, count: int) -> float:
    """The routing collectives per micro-batch (_routing_once): the probabilities' all-to-all
    forward and backward, the token counts' all-gather before each forward dispatch; full
    recompute (count 6) repeats the forward ones."""
    if routing is None:
        return 0.0
    probs, counts = routing
    forward = count // 2 - 1  # 1, or 2 under full recompute
    return (forward + 1) * probs + forward * counts


@lru_cache(maxsize=65536)
def moe_layer_extra_s(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute, micro_batch: int,
                      ep: int, etp: int, dp: int, pp: int) -> tuple[float, float, float]:
    """(compute, EP/ETP communication, TP change) seconds a MoE layer takes beyond a dense
    layer of the same model, one micro-batch on one GPU; (0, 0, 0) for a dense model.

    Compute: the MoE block (moe_layer.moe_block_times) less the dense FFN it replaces
    (moe_layer.dense_ffn_times), forward + backward, plus its forward again under full
    recompute (selective: the routed activation under moe_act, solver.cost.recompute). Communication: the
    all-to-alls (exposed in full, or as a paired combined-1F1B slot exposes them with
    training.moe_a2a_overlap: moe_layer_comm_s),
    the expert-TP collectives and the TP change (moe_layer_comm). The parts are
    moe_layer_compute and moe_layer_comm_s (the search memoizes them apart: the compute does
    not depend on dp, pp or the placement).
    """
    if ctx.model.moe is None:
        return 0.0, 0.0, 0.0
    compute, _ = moe_layer_compute(ctx, tp=tp, cp=cp, recompute=recompute, micro_batch=micro_batch,
                                   ep=ep, etp=etp)
    return (compute, *moe_layer_comm_s(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch,
                                       ep=ep, etp=etp, dp=dp, pp=pp))


def moe_layer_compute(ctx: CostContext, *, tp: int, cp: int, recompute: Recompute, micro_batch: int,
                      ep: int, etp: int) -> tuple[float, float]:
    """(compute beyond the dense layer, the MoE block's forward + backward) seconds, one
    micro-batch (moe_layer_extra_s)."""
    fwd, once, block, redo_moe_act, redo_mlp = _compute_parts(ctx, tp, cp, micro_batch, ep, etp)
    compute = once + (fwd if recompute == "full" else 0.0)
    if recompute == "selective":  # moe_act's activation again (moemem: solver.cost.recompute)
        compute += redo_moe_act
        compute -= redo_mlp  # no dense MLP to redo
    return compute, block


@lru_cache(maxsize=65536)
def _compute_parts(ctx: CostContext, tp: int, cp: int, micro_batch: int, ep: int,
                   etp: int) -> tuple[float, float, float, float, float]:
    """moe_layer_compute's terms, which do not depend on the recompute level (memoized: the
    search asks for each level of every (tp, cp, micro_batch, ep, etp)), shared by value in
    block_calc's memo with the selective set, all they read beyond block_calc's inputs."""
    calc, key = block_calc(ctx), (selective_modules(ctx), tp, cp, micro_batch, ep, etp)
    return calc.memo.get(key) or calc.remember(key, _parts(ctx, tp, cp, micro_batch, ep, etp))


def _parts(ctx: CostContext, tp: int, cp: int, micro_batch: int, ep: int,
           etp: int) -> tuple[float, float, float, float, float]:
    """_compute_parts: the block's forward beyond the dense FFN's, the compute beyond the
    dense layer's without recompute, the block's forward + backward, and selective recompute's
    two terms (mlp's: the dense FFN's forward, recompute.mlp_recompute_s, from _dense_ffn)."""
    calc = block_calc(ctx)
    blk = calc.times(tp, cp, micro_batch, ep, etp)
    dense_f, dense_b = _dense_ffn(ctx, tp, cp, micro_batch)
    fwd = blk.forward_s - dense_f
    sh = calc.shape(tp, cp, micro_batch, ep, etp)
    return (fwd, fwd + blk.backward_s - dense_b, blk.forward_s + blk.backward_s,
            moe_act_recompute_s(ctx, routed_rows=sh.busy_rows * sh.local_experts, width=sh.width),
            dense_f if "mlp" in selective_modules(ctx) else 0.0)


def moe_layer_comm_s(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute, micro_batch: int,
                     ep: int, etp: int, dp: int, pp: int) -> tuple[float, float]:
    """(EP/ETP communication, TP change) of moe_layer_extra_s, seconds per micro-batch. The
    communication is the all-to-all exposed in a paired combined-1F1B slot under
    training.moe_a2a_overlap (moe_a2a_paired_s; in full without it) plus the expert-TP
    collectives; an unpaired slot adds moe_a2a_unpaired_s (step.compose_step_time)."""
    return _comm_s(ctx, tp, cp, sp, recompute, micro_batch, ep, etp, dp, pp)[:2]


def moe_a2a_unpaired_s(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute, micro_batch: int,
                       ep: int, etp: int, dp: int, pp: int) -> float:
    """All-to-all seconds a MoE layer exposes beyond moe_layer_comm_s's in a slot the combined
    1F1B schedule does not pair (warm-up forward, cool-down backward): the full all-to-all
    less the paired exposure; 0 without training.moe_a2a_overlap."""
    if ctx.model.moe is None:
        return 0.0
    return _comm_s(ctx, tp, cp, sp, recompute, micro_batch, ep, etp, dp, pp)[2]


@lru_cache(maxsize=65536)
def _comm_s(ctx: CostContext, tp: int, cp: int, sp: bool, recompute: Recompute, micro_batch: int, ep: int,
            etp: int, dp: int, pp: int) -> tuple[float, float, float]:
    """(moe_layer_comm_s' two terms, moe_a2a_unpaired_s) from one moe_layer_comm, memoized
    positionally: the search asks for both of every row."""
    c = moe_layer_comm(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch,
                       ep=ep, etp=etp, dp=dp, pp=pp)
    paired, full = _exposure(ctx, c, tp, cp, sp, recompute, micro_batch, ep, etp)
    return paired + c.etp_s, c.tp_delta_s, full - paired


def moe_overlap_problems(pp: int, vpp: int, ep: int, recompute: str) -> list[str]:
    """Why Megatron refuses --overlap-moe-expert-parallel-comm at these degrees (empty: it
    accepts it): it needs EP > 1, interleaving (vpp > 1) when PP > 1, and no full recompute
    (NVIDIA/Megatron-LM d98e8a64 megatron/core/transformer/transformer_config.py L3002-3023).
    The cost model (overlap_applies), the search (solver.search.rules.moe_overlap_ok) and the Megatron
    export (service.launchers.megatron_moe) share it."""
    out = []
    if ep == 1:
        out.append("--overlap-moe-expert-parallel-comm needs ep > 1 (transformer_config.py)")
    if pp > 1 and vpp == 1:
        out.append("--overlap-moe-expert-parallel-comm with pp > 1 needs virtual pipeline stages "
                   "(vpp > 1) (transformer_config.py)")
    if recompute == "full":
        out.append("--overlap-moe-expert-parallel-comm refuses full recompute (transformer_config.py L3021-3023)")
    return out



def overlap_applies(training, *, ep: int, recompute: Recompute) -> bool:
    """Whether Megatron would run --overlap-moe-expert-parallel-comm: set, and
    moe_overlap_problems finds nothing at this EP and recompute (the VPP condition is
    paired_fraction's: at PP > 1 with VPP 1 no slot pairs)."""
    return bool(training.moe_a2a_overlap) and not moe_overlap_problems(1, 1, ep, recompute)


@lru_cache(maxsize=65536)
def moe_a2a_exposure(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute, micro_batch: int,
                     ep: int, etp: int, dp: int, pp: int) -> tuple[float, float]:
    """(paired, unpaired) all-to-all seconds one MoE layer exposes per micro-batch (module
    docstring). Unpaired: every all-to-all and routing collective in full. Paired: each of
    the four phases exposes max(0, a - c), a = one all-to-all with its share of the routing
    collectives, c = the phase's computation on the other micro-batch: attention forward;
    half the MoE block's backward (its data gradient; the weight gradient is the other half,
    2 of the 3 GEMM passes split evenly); the other half plus the MoE block's forward; the
    attention backward with its recompute. Attention = the dense layer less its FFN
    (terms.layer_compute_s parts, moe_layer.dense_ffn_times). Both equal without the overlap."""
    c = moe_layer_comm(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch,
                       ep=ep, etp=etp, dp=dp, pp=pp)
    return _exposure(ctx, c, tp, cp, sp, recompute, micro_batch, ep, etp)


def _exposure(ctx: CostContext, c: MoELayerComm, tp: int, cp: int, sp: bool, recompute: Recompute,
              micro_batch: int, ep: int, etp: int) -> tuple[float, float]:
    """moe_a2a_exposure of the layer's communication `c` (its moe_layer_comm)."""
    full = c.a2a_s
    if not overlap_applies(ctx.training, ep=ep, recompute=recompute):
        return full, full
    a = full / c.a2a_count
    lt = T._layer(ctx, tp, cp, sp, micro_batch)  # the dense layer's times (memoized)
    dense_f, dense_b = _dense_ffn(ctx, tp, cp, micro_batch)
    blk = block_times(ctx, tp=tp, cp=cp, micro_batch=micro_batch, ep=ep, etp=etp)
    phases = (lt.forward_s - dense_f, blk.backward_s / 2, blk.backward_s / 2 + blk.forward_s,
              lt.backward_s - dense_b + lt.recompute_s(recompute, selective_modules(ctx)))
    return sum(max(0.0, a - p) for p in phases), full


def slot_comm_s(paired_s: float, unpaired_s: float, overlap: bool, pp: int, vpp: int, grad_accum: int) -> float:
    """A MoE layer's exposed communication per micro-batch slot averaged over a rank's slots
    (step.compose_step_time): paired_s (moe_layer_comm_s) plus unpaired_s
    (moe_a2a_unpaired_s) in the fraction of slots the combined 1F1B schedule runs alone
    (1 - paired_fraction; every slot without the overlap), seconds."""
    alone = 1.0 - paired_fraction(pp=pp, vpp=vpp, grad_accum=grad_accum) if overlap else 1.0
    return paired_s + alone * unpaired_s


def paired_fraction(*, pp: int, vpp: int, grad_accum: int) -> float:
    """Fraction of a rank's forward (and backward) chunk passes that Megatron's combined 1F1B
    schedule pairs with another micro-batch's, for the rank with the longest warm-up (rank 0).
    PP = 1 (combined_1f1b.py combined_1f1b_schedule_for_no_pipelining d98e8a64): the first
    forward and the last backward run alone, m - 1 of m paired. PP > 1 needs VPP > 1
    (transformer_config.py L3002-3023; 0 paired otherwise: Megatron refuses the flag), and
    the interleaved schedule runs num_warmup = 2 (pp - 1) + (vpp - 1) x pp + 1 forwards alone
    (schedules.py get_pp_rank_microbatches L957-970: the "+ 1" is the overlap's extra
    warm-up micro-batch; the group size defaults to pp) and as many backwards in the
    cool-down, out of m x vpp chunk passes each."""
    m = grad_accum
    if pp == 1:
        return (m - 1) / m if m > 0 else 0.0
    if vpp == 1:
        return 0.0
    total = m * vpp
    warm = 2 * (pp - 1) + (vpp - 1) * pp + 1
    return max(0, total - warm) / total


@lru_cache(maxsize=256)
def block_calc(ctx: CostContext) -> ML.BlockCalc:
    """moe_layer.BlockCalc for this problem: moe_block_times and expert_shape memoized per
    (tp, cp, mb, ep, etp), which is all they read beyond the model, sequence length, GPU, cost
    options, FP8 work and load imbalance. Another problem with the same ones shares it, and its
    values (solver.cost.shared_times)."""
    factor = imbalance(ctx)
    return shared_times.GPU_TIMES.get(ctx, ("moe_block", factor), lambda: ML.BlockCalc(
        ctx.model, ctx.seq_len, factor, ctx.cluster.gpu, ctx.options, ctx.fp8_work))


def block_times(ctx: CostContext, *, tp: int, cp: int, micro_batch: int, ep: int, etp: int) -> ML.MoEBlockTimes:
    """moe_layer.moe_block_times for this problem (block_calc): it does not depend on dp, pp or
    the links, so a search's tables compute it once per (tp, cp, mb, ep, etp)."""
    return block_calc(ctx).times(tp, cp, micro_batch, ep, etp)


def expert_shape(ctx: CostContext, *, tp: int, cp: int, micro_batch: int, ep: int, etp: int) -> ML.ExpertShape:
    """moe_layer.expert_shape for this problem at its load imbalance (block_calc's memo)."""
    return block_calc(ctx).shape(tp, cp, micro_batch, ep, etp)


@lru_cache(maxsize=65536)
def _dense_ffn(ctx: CostContext, tp: int, cp: int, micro_batch: int) -> tuple[float, float]:
    """moe_layer.dense_ffn_times for this problem (shared by value as block_times)."""
    return shared_times.GPU_TIMES.get(ctx, ("dense_ffn", tp, cp, micro_batch), lambda: ML.dense_ffn_times(
        ctx.model, ctx.seq_len, ctx.cluster.gpu, ctx.options, tp=tp, cp=cp, micro_batch=micro_batch, fp8=ctx.fp8_work))


@lru_cache(maxsize=256)  # as routed_expert_params
def dense_and_expert_params(ctx: CostContext) -> tuple[int, int]:
    """(parameters outside the routed experts, routed-expert parameters) of the whole model,
    multi-token-prediction modules included (the training holds and updates them; they are
    outside ParameterCounts.total), spread over the stages like the rest."""
    routed = routed_expert_params(ctx)
    return ctx.params.total + ctx.params.mtp - routed, routed


def expert_traffic(ctx: CostContext, *, tp: int, cp: int, dp: int, pp: int, ep: int, etp: int) -> DpTraffic | None:
    """Bucketed collectives of the routed-expert gradients and weights over the expert-DP
    group (edp = tp cp dp / (ep etp) ranks; Megatron DDP reduces the expert-parallel buffers
    over intra_expt_dp_group: megatron/core/distributed/distributed_data_parallel.py L285-286);
    None with edp = 1. Local parameters: routed experts / (ep x etp x pp)."""
    edp = tp * cp * dp // (ep * etp)
    lk = expert_links(ctx, etp=etp, ep=ep, edp=edp, pp=pp)["edp"]
    if lk.size <= 1:
        return None
    return bucketed_traffic(ctx, routed_expert_params(ctx) / (ep * etp * pp), edp, lk)


def expert_dp_ranks(*, tp: int, cp: int, dp: int, ep: int, etp: int) -> int:
    """Expert data-parallel degree: tp cp dp / (ep etp) (Megatron parallel_state.py L880)."""
    return tp * cp * dp // (ep * etp)
