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
1f1b phase"), so they are charged in full; with training.moe_a2a_overlap they hide under the
MoE layer's own compute time (another micro-batch's, of equal length), exposed only beyond it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from solver.cost import moe_layer as ML
from solver.cost.communication import achieved_link, allgather_s, reduce_scatter_s
from solver.cost.compute import ACT_BYTES
from solver.cost.recompute import mlp_recompute_s, moe_act_recompute_s
from solver.cost.terms import CostContext, DpTraffic, bucketed_traffic, layer_tp_comm_s
from solver.specs import Recompute
from topology.collectives import alltoall_time_s
from topology.groups import GroupLink, group_links


def expert_links(ctx: CostContext, *, etp: int, ep: int, edp: int, pp: int) -> dict[str, GroupLink]:
    """Links of the expert groups: 'etp' (expert TP), 'ep' and 'edp' (expert-DP), every group
    of a kind active at once (module docstring: the CP / DP groups of degrees (etp, ep, edp, pp))."""
    links = group_links(ctx.cluster, etp, ep, edp, pp, order=ctx.rank_order)
    return {name: achieved_link(links[kind], ctx.options)  # each tier's achieved busbw (terms.link)
            for name, kind in (("etp", "tp"), ("ep", "cp"), ("edp", "dp"))}


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


@dataclass(frozen=True)
class MoELayerComm:
    """Communication of one MoE layer for one micro-batch on one GPU, seconds."""

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
    edp = tp * cp * dp // (ep * etp)
    lk = expert_links(ctx, etp=etp, ep=ep, edp=edp, pp=pp)
    msg = dispatch_bytes(ctx, tp=tp, cp=cp, micro_batch=micro_batch)
    a2a = alltoall_time_s(msg, lk["ep"]) if ep > 1 else 0.0
    count = 4 + (2 if recompute == "full" else 0)
    gathered = msg * etp  # rows after the expert-TP all-gather, full buffer
    etp_s = (allgather_s(gathered, lk["etp"]) + reduce_scatter_s(gathered, lk["etp"])) if etp > 1 else 0.0
    drop = 0.0
    e = ctx.model.moe
    assert e is not None
    if e.shared_experts == 0:
        drop = -0.5 * layer_tp_comm_s(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch)
    return MoELayerComm(a2a, count, etp_s * count / 2, drop,
                        _routing_s(ctx, msg, lk["ep"], count, tp=tp, cp=cp, ep=ep, etp=etp, edp=edp, pp=pp))


def _routing_s(ctx: CostContext, dispatch: float, ep_link: GroupLink, count: int, *, tp: int, cp: int,
               ep: int, etp: int, edp: int, pp: int) -> float:
    """The dispatcher's small collectives per micro-batch (token_dispatcher.py d98e8a64):
    the routing probabilities go to the experts in their own all-to-all after the tokens'
    (token_dispatch, global_probs; FP32, t x k x 4 bytes = dispatch / (D / 2)), forward and
    backward; before each forward dispatch the per-expert token counts are all-gathered over
    the expert TP x EP group (preprocess, gather_from_sequence_parallel_region over
    tp_ep_group: E x 8 bytes per rank) to size the all-to-all. Both latency-bound on large
    EP groups; full recompute repeats the forward ones."""
    if ep * etp == 1:
        return 0.0
    e = ctx.model.moe
    assert e is not None
    forward = count // 2 - 1  # 1, or 2 under full recompute
    probs = alltoall_time_s(dispatch * 4 / (2 * ctx.model.hidden), ep_link) if ep > 1 else 0.0
    group = achieved_link(group_links(ctx.cluster, etp * ep, 1, edp, pp, order=ctx.rank_order)["tp"], ctx.options)
    counts = allgather_s(8.0 * e.experts * etp * ep, group)
    return (forward + 1) * probs + forward * counts


@lru_cache(maxsize=65536)
def moe_layer_extra_s(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute, micro_batch: int,
                      ep: int, etp: int, dp: int, pp: int) -> tuple[float, float, float]:
    """(compute, EP/ETP communication, TP change) seconds a MoE layer takes beyond a dense
    layer of the same model, one micro-batch on one GPU; (0, 0, 0) for a dense model.

    Compute: the MoE block (moe_layer.moe_block_times) less the dense FFN it replaces
    (moe_layer.dense_ffn_times), forward + backward, plus its forward again under full
    recompute (selective: the routed activation under moe_act, solver.cost.recompute). Communication: the
    all-to-alls (exposed in full, or beyond the layer's compute with training.moe_a2a_overlap),
    the expert-TP collectives and the TP change (moe_layer_comm). The parts are
    moe_layer_compute and moe_layer_comm_s (the search memoizes them apart: the compute does
    not depend on dp, pp or the placement).
    """
    if ctx.model.moe is None:
        return 0.0, 0.0, 0.0
    compute, block_s = moe_layer_compute(ctx, tp=tp, cp=cp, recompute=recompute, micro_batch=micro_batch,
                                         ep=ep, etp=etp)
    return (compute, *moe_layer_comm_s(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch,
                                       ep=ep, etp=etp, dp=dp, pp=pp, block_s=block_s))


def moe_layer_compute(ctx: CostContext, *, tp: int, cp: int, recompute: Recompute, micro_batch: int,
                      ep: int, etp: int) -> tuple[float, float]:
    """(compute beyond the dense layer, the MoE block's forward + backward) seconds, one
    micro-batch (moe_layer_extra_s)."""
    blk = block_times(ctx, tp=tp, cp=cp, micro_batch=micro_batch, ep=ep, etp=etp)
    dense_f, dense_b = _dense_ffn(ctx, tp, cp, micro_batch)
    fwd = blk.forward_s - dense_f
    compute = fwd + blk.backward_s - dense_b + (fwd if recompute == "full" else 0.0)
    if recompute == "selective":  # moe_act's activation again (moemem: solver.cost.recompute)
        sh = ML.expert_shape(ctx.model, ctx.seq_len, imbalance(ctx), tp=tp, cp=cp, micro_batch=micro_batch,
                             ep=ep, etp=etp)
        compute += moe_act_recompute_s(ctx, routed_rows=sh.busy_rows * sh.local_experts, width=sh.width)
        compute -= mlp_recompute_s(ctx, tp=tp, cp=cp, micro_batch=micro_batch)  # no dense MLP to redo
    return compute, blk.forward_s + blk.backward_s


def moe_layer_comm_s(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute, micro_batch: int,
                     ep: int, etp: int, dp: int, pp: int, block_s: float) -> tuple[float, float]:
    """(EP/ETP communication, TP change) of moe_layer_extra_s; block_s: the MoE block's forward
    + backward seconds (moe_layer_compute), what an overlapped all-to-all hides under."""
    c = moe_layer_comm(ctx, tp=tp, cp=cp, sp=sp, recompute=recompute, micro_batch=micro_batch,
                       ep=ep, etp=etp, dp=dp, pp=pp)
    a2a = c.a2a_s
    if ctx.training.moe_a2a_overlap:
        a2a = max(0.0, a2a - block_s)
    return a2a + c.etp_s, c.tp_delta_s


@lru_cache(maxsize=65536)
def block_times(ctx: CostContext, *, tp: int, cp: int, micro_batch: int, ep: int, etp: int) -> ML.MoEBlockTimes:
    """moe_layer.moe_block_times for this problem, memoized per (tp, cp, mb, ep, etp): it does
    not depend on dp, pp or the links, so a search's tables compute it once per such tuple."""
    return ML.moe_block_times(ctx.model, ctx.seq_len, imbalance(ctx), ctx.cluster.gpu, ctx.options, tp=tp, cp=cp,
                              micro_batch=micro_batch, ep=ep, etp=etp, fp8=ctx.fp8_work)


@lru_cache(maxsize=65536)
def _dense_ffn(ctx: CostContext, tp: int, cp: int, micro_batch: int) -> tuple[float, float]:
    return ML.dense_ffn_times(ctx.model, ctx.seq_len, ctx.cluster.gpu, ctx.options, tp=tp, cp=cp,
                              micro_batch=micro_batch, fp8=ctx.fp8_work)


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
