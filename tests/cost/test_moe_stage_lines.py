"""solver.cost.moe_stages' regrouped per-rank memory (RankLines) and its split-free floor
(mean_floor_parts), which the search's split bounds read (solver.search.moe_split): RankLines
equals moe_stage_terms' busiest rank on every first/last split of DeepSeek-V3 up to float
summation order, and the floor is below every split's mean over the ranks (so below its
busiest rank), for FP8 and BF16, every recompute level, 1F1B and interleaved, ZeRO 0-3."""
from __future__ import annotations

import pytest

from solver.cost.estimate import make_context
from solver.cost.moe_layer import moe_layer_mask, moe_layers_per_rank
from solver.cost.moe_stages import (
    activation_parts, floor_activation_bytes, floor_rest_bytes, floor_state_bytes, fp8_copy_parts,
    mean_floor_parts, moe_stage_terms, rank_memory_lines, state_bytes_per_param,
)
from solver.cost.step_memory import buffer_terms, compose_memory, rank_layers
from solver.presets import load_model, load_training
from solver.search.moe_split import candidates
from solver.specs import LayoutSpec
from topology.catalog import load_cluster

DSV3 = load_model("deepseek-v3")
CLUSTER = load_cluster("h800-2048")
FP8 = load_training("deepseek-v3-14.8t")  # FP8 GEMMs (cached FP8 weight copies)
BF16 = FP8.model_copy(update={"compute_precision": "bf16"})
LAYOUTS = [  # (tp, pp, vpp, zero, recompute, ep, micro_batch)
    (1, 16, 1, 1, "selective", 64, 1), (2, 8, 2, 1, "full", 32, 1), (4, 4, 1, 3, "none", 8, 2),
    (1, 16, 1, 2, "full", 64, 1), (2, 2, 3, 0, "selective", 16, 1),
]


@pytest.mark.parametrize("training", [FP8, BF16], ids=["fp8", "bf16"])
@pytest.mark.parametrize("shape", LAYOUTS)
def test_rank_lines_equal_stage_terms_and_floor_is_below_every_split(training, shape):
    tp, pp, vpp, zero, rc, ep, mb = shape
    ctx = make_context(DSV3, CLUSTER, training)
    lo = LayoutSpec(tp=tp, pp=pp, dp=2048 // (tp * pp), ep=ep, etp=1, zero_stage=zero, micro_batch=mb, recompute=rc,
                    sequence_parallel=tp > 1, vpp=vpp)
    m = 30
    buffers = buffer_terms(ctx, lo)
    state = state_bytes_per_param(ctx, tp=tp, pp=pp, dp=lo.dp, cp=1, zero=zero, ep=ep, etp=1)
    acts = activation_parts(ctx, lo, m)
    lines = rank_memory_lines(ctx, tp=tp, pp=pp, ep=ep, etp=1, zero=zero, shards=lo.dp, state=state, acts=acts,
                              **buffers)
    parts = mean_floor_parts(ctx, pp=pp, n_moe=sum(moe_layer_mask(DSV3)))
    floor = (floor_state_bytes(parts, state) + floor_activation_bytes(parts, acts)
             + floor_rest_bytes(ctx, parts, fp8_copy_parts(ctx, tp=tp, ep=ep, etp=1)))
    least = float("inf")
    for f, mid, last in candidates(61, pp * vpp):
        split = (f, *[mid] * (pp * vpp - 2), last)
        totals = [compose_memory(t)["total"] for t in moe_stage_terms(
            ctx, lo.model_copy(update={"pipeline_layers": split}), m, **buffers)]
        exact = max(totals)
        assert floor <= sum(totals) / pp * (1 + 1e-12)  # below every split's mean over the ranks
        ns, ks = rank_layers(split, pp), moe_layers_per_rank(moe_layer_mask(DSV3), split, pp)
        assert lines.busiest_bytes(ns, ks) == pytest.approx(exact, rel=1e-12)
        least = min(least, exact)
    assert floor <= least * (1 + 1e-12)
    # the floor is a mean over the ranks (loose where 1F1B's first ranks hold pp micro-batches: 0.25-0.99 here)
    assert floor >= 0.2 * least
