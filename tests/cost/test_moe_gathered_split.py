"""Gathered ZeRO-3 / FSDP units of a MoE model are MoE blocks (solver.cost.state.
moe_gathered_delta_bytes) on explicit pipeline splits too (solver.cost.moe_stages), as on even
stages (moe_memory.moe_model_state): a split layout's memory may not miss what the same layout
on even stages charges.

Hand count, Mixtral 8x7B (tests/fixtures/hf/mixtral-8x7b: hidden 4096, 32 heads / 8 KV heads of
128, 8 experts of SwiGLU width 14,336), TP2 EP1 ETP1, Megatron-FSDP (ZeRO-3; 2 gathered layers,
no all-gather pool):
  attention 4096 x (4096 + 2 x 1024 + 4096) = 41,943,040; norms 2 x 4096 = 8,192;
  router 4096 x 8 = 32,768; one expert 3 x 4096 x 14,336 = 176,160,768; routed 8 x that
  = 1,409,286,144.
  MoE block unit: (41,943,040 + 8,192 + 32,768) / 2 + 1,409,286,144 / 1 = 1,430,278,144
  dense-layer unit the buffers charge: (41,943,040 + 8,192 + 176,160,768) / 2 = 109,056,000
  2 units x (1,430,278,144 - 109,056,000) x 2 bytes = 5,284,888,576 bytes per GPU.
"""
from __future__ import annotations

from solver.cost.estimate import make_context
from solver.cost.moe_comm import expert_dp_ranks
from solver.cost.moe_stages import moe_stage_terms, rank_parameters
from solver.cost.state import framework_state_bytes
from solver.cost.step_memory import buffer_terms
from solver.presets import load_model, load_training
from solver.specs import LayoutSpec
from topology.catalog import load_cluster

MIXTRAL = load_model("tests/fixtures/hf/mixtral-8x7b/config.json")
CLUSTER = load_cluster("dgx-h100-superpod").model_copy(update={"nodes": 8})
GATHERED = 2 * (1_430_278_144 - 109_056_000) * 2


def test_split_ranks_charge_the_gathered_moe_blocks():
    ctx = make_context(MIXTRAL, CLUSTER, load_training("seed-300b"))
    lo = LayoutSpec(tp=2, pp=4, dp=8, ep=1, etp=1, zero_stage=3, micro_batch=1, recompute="full",
                    sequence_parallel=True, pipeline_layers=(9, 8, 8, 7))
    edp = expert_dp_ranks(tp=2, cp=1, dp=8, ep=1, etp=1)
    terms = moe_stage_terms(ctx, lo, 16, **buffer_terms(ctx, lo))
    for t, (dense, routed) in zip(terms, rank_parameters(ctx, 4, lo.pipeline_layers), strict=True):
        d = framework_state_bytes(ctx.training, dense / 2, pp=4, dp=8, cp=1, zero=3)
        x = framework_state_bytes(ctx.training, routed, pp=4, dp=edp, cp=1, zero=3)
        assert t.weights - d.weights - x.weights == GATHERED  # BF16: no FP8 copies
