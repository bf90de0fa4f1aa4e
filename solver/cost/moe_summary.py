"""What an estimate prints about a MoE layout: the expert groups, the token traffic, the
load-imbalance factor and its basis, and the expert GEMM efficiency.

Unit legend: `_bytes` bytes; `_s` seconds; `_gb_s` 1e9 bytes per second per GPU per direction.
"""
from __future__ import annotations

from solver.cost import moe_layer as ML
from solver.cost.accounting import batch_plan
from solver.cost.moe_comm import (dispatch_bytes, expert_dp_ranks, expert_links, moe_a2a_exposure, moe_layer_comm,
                                  overlap_applies, paired_fraction)
from solver.cost.terms import CostContext
from solver.specs import LayoutSpec


def moe_summary(ctx: CostContext, layout: LayoutSpec) -> dict:
    """The MoE figures of one layout ({} for a dense model)."""
    e = ctx.model.moe
    if e is None:
        return {}
    lo = layout
    etp = lo.expert_tp
    edp = expert_dp_ranks(tp=lo.tp, cp=lo.cp, dp=lo.dp, ep=lo.ep, etp=etp)
    factor, basis = ML.load_imbalance(ctx.training)
    sh = ML.expert_shape(ctx.model, ctx.seq_len, factor, tp=lo.tp, cp=lo.cp, micro_batch=lo.micro_batch,
                         ep=lo.ep, etp=etp)
    blk = ML.moe_block_times(ctx.model, ctx.seq_len, factor, ctx.cluster.gpu, ctx.options, tp=lo.tp, cp=lo.cp,
                             micro_batch=lo.micro_batch, ep=lo.ep, etp=etp)
    comm = moe_layer_comm(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel, recompute=lo.recompute,
                          micro_batch=lo.micro_batch, ep=lo.ep, etp=etp, dp=lo.dp, pp=lo.pp)
    ep_link = expert_links(ctx, etp=etp, ep=lo.ep, edp=edp, pp=lo.pp)["ep"]
    send = dispatch_bytes(ctx, tp=lo.tp, cp=lo.cp, micro_batch=lo.micro_batch)
    n_moe = ML.busiest_moe_layers(ML.moe_layer_mask(ctx.model), lo.pp, lo.vpp)
    expert_s = blk.expert_fwd_s + blk.expert_bwd_s
    return {
        "ep": lo.ep, "etp": etp, "expert_dp": edp, "local_experts": sh.local_experts,
        "tokens_routed_per_rank": sh.tokens,
        "tokens_per_expert_per_microbatch": sh.rows_per_expert,
        "busiest_rank_rows_per_expert": sh.busy_rows,
        "load_imbalance": factor, "load_imbalance_basis": basis,
        "expert_gemm_efficiency": blk.expert_ideal_s / expert_s if expert_s > 0 else 1.0,
        "a2a_send_bytes_per_rank": send,
        "a2a_bytes_leaving_rank": send * (lo.ep - 1) / lo.ep,
        "a2a_per_layer_per_microbatch": comm.a2a_count if lo.ep > 1 else 0,
        "a2a_one_s": comm.a2a_one_s,
        "a2a_overlapped": ctx.training.moe_a2a_overlap,
        **_overlap_figures(ctx, lo),
        "ep_group": {"size": ep_link.size, "crosses_nodes": ep_link.crosses_nodes,
                     "alltoall_bandwidth_gb_s": ep_link.alltoall_bandwidth_gb_s or ep_link.bandwidth_gb_s},
        "moe_layers_on_busiest_rank": n_moe,
    }


def _overlap_figures(ctx: CostContext, lo: LayoutSpec) -> dict:
    """What the combined 1F1B schedule hides (solver.cost.moe_comm): the fraction of a rank's
    micro-batch slots it pairs (0 without the overlap or where Megatron refuses it) and the
    all-to-all seconds one MoE layer exposes per micro-batch, paired and alone."""
    on = overlap_applies(ctx.training, ep=lo.ep, recompute=lo.recompute)
    m = batch_plan(ctx.training, lo.dp, lo.micro_batch).grad_accum
    paired, alone = moe_a2a_exposure(ctx, tp=lo.tp, cp=lo.cp, sp=lo.sequence_parallel, recompute=lo.recompute,
                                     micro_batch=lo.micro_batch, ep=lo.ep, etp=lo.expert_tp, dp=lo.dp, pp=lo.pp)
    return {"a2a_paired_fraction": paired_fraction(pp=lo.pp, vpp=lo.vpp, grad_accum=m) if on else 0.0,
            "a2a_exposed_paired_s": paired, "a2a_exposed_alone_s": alone}


def _overlap_note(ctx: CostContext, lo: LayoutSpec) -> str | None:
    """Why training.moe_a2a_overlap hides nothing on this layout (None: it applies or is off)."""
    if not ctx.training.moe_a2a_overlap:
        return None
    why = ("ep is 1" if lo.ep == 1 else "recompute is full" if lo.recompute == "full"
           else "pp > 1 with vpp 1" if lo.pp > 1 and lo.vpp == 1 else None)
    if why is None:
        return None
    return (f"training.moe_a2a_overlap: Megatron refuses --overlap-moe-expert-parallel-comm when {why} "
            "(transformer_config.py L3002-3023 d98e8a64); the all-to-all is charged in full")


def moe_notes(ctx: CostContext, layout: LayoutSpec) -> tuple[str, ...]:
    """Warnings an estimate of a MoE layout carries."""
    if ctx.model.moe is None:
        return ()
    out = []
    if layout.tp > 1 and not layout.sequence_parallel:
        out.append("MoE with tp > 1 needs sequence_parallel in Megatron-Core training (moe_layer.py raises "
                   "otherwise); charged as if it were on")
    if ctx.training.moe_load_imbalance is None and ctx.training.moe_capacity_factor is None:
        out.append(f"assumed: expert load imbalance {ML.DEFAULT_LOAD_IMBALANCE} ({ML.LOAD_IMBALANCE_BASIS})")
    overlap = _overlap_note(ctx, layout)
    if overlap is not None:
        out.append(overlap)
    if ctx.fp8_work is not None:  # solver.cost.moe_fp8
        out.append(f"{ctx.training.compute_precision}: routed and shared expert GEMMs in FP8; the token all-to-all "
                   "stays BF16 (Megatron-Core moe_dispatch_fwd_dtype / moe_combine_bwd_dtype default 'bf16', "
                   "NVIDIA/Megatron-LM d98e8a64 transformer_config.py L997-1008)")
    return tuple(out)
