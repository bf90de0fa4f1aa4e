"""Multi-token-prediction (MTP) modules: their time per micro-batch and their memory.

Unit legend: `_s` seconds; `_bytes` bytes; per micro-batch on the last pipeline stage.

DeepSeek-V3 (report Sec. 2.2) adds model.mtp_layers sequential modules; module k
normalizes the previous depth's hidden state and the next token's embedding (hnorm, enorm),
projects their concatenation 2D -> D (eh_proj), runs one transformer layer (a MoE layer in
V3: solver.cost.moe_params.mtp_params) and the shared output head with its own
cross-entropy loss. Megatron-Core places every MTP module on the last pipeline stage unless
a custom layout says otherwise (NVIDIA/Megatron-LM d98e8a64,
megatron/core/transformer/multi_token_prediction.py L788-830, mtp_on_this_rank), so their
time adds to that stage's extra work per micro-batch like the LM head, and their one
micro-batch of activations and second logits buffer to its memory. Model FLOPs (MFU) keep the
FLOP convention's N_active, which excludes the MTP modules (accounting.ParameterCounts.mtp);
their work shows as lower MFU, as it does for the published runs.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from solver.cost import compute as C, shared_times
from solver.cost import terms as T
from solver.cost.communication import allgather_s, allreduce_s, reduce_scatter_s
from solver.cost.moe_comm import moe_a2a_unpaired_s, moe_layer_extra_s
from solver.cost.terms import CostContext
from solver.specs import Recompute


@lru_cache(maxsize=65536)
def mtp_s(ctx: CostContext, *, tp: int, cp: int, sp: bool, recompute: Recompute, micro_batch: int,
          ep: int, etp: int, dp: int, pp: int) -> float:
    """Time of the MTP modules for one micro-batch on the last stage, seconds (0 without).

    Per module: eh_proj's (M, D, 2D) GEMM forward and backward, one transformer layer
    (terms.layer_compute_s + its TP and CP collectives, plus the MoE layer's extra when the
    model has MoE layers), the output head and loss again (compute.head_times_s with its TP
    collective as terms.head_extra_s, without the embedding)."""
    n = ctx.model.mtp_layers
    if not n:
        return 0.0
    body, proj, head = _dense_parts(ctx, tp, cp, sp, recompute, micro_batch)
    if ctx.model.moe is not None:  # its all-to-all exposed in full: whether its slot is paired under
        # training.moe_a2a_overlap needs vpp and m, which this term does not read (moe_comm.slot_comm_s)
        layer: dict[str, Any] = {"tp": tp, "cp": cp, "sp": sp, "recompute": recompute, "micro_batch": micro_batch}
        body += (sum(moe_layer_extra_s(ctx, **layer, ep=ep, etp=etp, dp=dp, pp=pp))
                 + moe_a2a_unpaired_s(ctx, **layer, ep=ep, etp=etp, dp=dp, pp=pp))
    return n * (body + proj + head)


@lru_cache(maxsize=65536)
def _dense_parts(ctx: CostContext, tp: int, cp: int, sp: bool, recompute: Recompute,
                 micro_batch: int) -> tuple[float, float, float]:
    """mtp_s' terms of one module that do not read the expert degrees, dp or pp (memoized: the
    search asks for every EP x ETP x DP x PP of each): the dense layer with its TP and CP
    collectives, eh_proj, and the head with its TP collective, seconds."""
    layer: dict[str, Any] = {"tp": tp, "cp": cp, "sp": sp, "recompute": recompute, "micro_batch": micro_batch}
    body = (T.layer_compute_s(ctx, **layer) + T.layer_tp_comm_s(ctx, **layer)
            + T.layer_cp_comm_s(ctx, tp=tp, cp=cp, recompute=recompute, micro_batch=micro_batch))
    gpu, o, d = ctx.cluster.gpu, ctx.options, ctx.model.hidden
    tokens = micro_batch * ctx.seq_len // cp
    proj = sum(C.gemm_fwd_bwd_s(tokens, d, 2 * d, gpu, o))
    head = shared_times.head_times_s(ctx, tp, cp, sp, micro_batch)  # compute.head_times_s, shared by value
    if tp > 1:
        lk, msg = T.link(ctx, "tp", tp=tp), C.ACT_BYTES * micro_batch * ctx.seq_len / cp * d
        head += allgather_s(msg, lk) + reduce_scatter_s(msg, lk) if sp else allreduce_s(msg, lk)
    return body, proj, head
