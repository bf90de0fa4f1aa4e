"""Explicit pipeline splits of a MoE model (solver.cost.moe_stages): the parameters each rank
holds (dense vs MoE layers, embedding first, head + MTP with its embedding copy last), the
busiest rank's memory, the Megatron export of the split, against hand-derived numbers.

DeepSeek-V3 (deepseek-v3 preset; README parameter table): 671,026,419,200 parameters, layers 0-2
dense, 3-60 MoE; one MoE layer's routed experts 256 x 3 x 7168 x 2048 = 11,274,289,152; the
embedding 129,280 x 7168 = 926,679,040. Split [4]*15 + [1] on PP16 (Megatron
--decoder-first-pipeline-num-layers 4 --decoder-last-pipeline-num-layers 1): rank 0 holds
layers 0-3 (one MoE), ranks 1-14 four MoE layers each, rank 15 layer 60 and the MTP module.
"""
from __future__ import annotations

import pytest

from service.launchers import export_layout, rank_placement
from solver.cost import memory as M
from solver.cost.estimate import estimate_layout, make_context
from solver.cost.moe_memory import moe_layer_activation_extra_bytes
from solver.cost.moe_stages import rank_parameters
from solver.presets import load_model, load_training
from solver.specs import LayoutSpec
from tests.service.framework_options import megatron_violations, parse_megatron
from topology.catalog import load_cluster

DSV3 = load_model("deepseek-v3")
TRAIN = load_training("deepseek-v3-14.8t")
CLUSTER = load_cluster("h800-2048")
SPLIT = (4,) * 15 + (1,)
ROUTED = 256 * 3 * 7168 * 2048
EMBEDDING = 129_280 * 7168
LAYOUT = LayoutSpec(tp=1, pp=16, dp=128, ep=64, etp=1, zero_stage=1, micro_batch=1, recompute="selective",
                    sequence_parallel=False, pipeline_layers=SPLIT)


def test_rank_parameters_place_dense_moe_embedding_and_mtp():
    ctx = make_context(DSV3, CLUSTER, TRAIN)
    ranks = rank_parameters(ctx, 16, SPLIT)
    assert ROUTED == 11_274_289_152 and EMBEDDING == 926_679_040
    assert [r[1] for r in ranks] == [ROUTED] + [4 * ROUTED] * 14 + [2 * ROUTED]  # MTP: one MoE layer
    # every parameter once, plus the MTP's own embedding on the last rank (gpt_model.py L173-181)
    assert sum(d + x for d, x in ranks) == 671_026_419_200 + ctx.params.mtp + EMBEDDING
    assert ranks[1][0] == ranks[14][0]  # equal middle ranks
    # rank 0 beyond a middle rank: the embedding and three dense FFNs (3 x 3 x 7168 x 18432)
    # in place of three MoE layers' shared experts and router (3 x (3 x 7168 x 2048 + 256 x 7168 + 256))
    moe_rest = 3 * 7168 * 2048 + 256 * 7168 + 256
    assert ranks[0][0] - ranks[1][0] == EMBEDDING + 3 * (3 * 7168 * 18432 - moe_rest)


def test_busiest_rank_is_the_second_under_1f1b():
    est = estimate_layout(DSV3, CLUSTER, TRAIN, LAYOUT)
    ctx = make_context(DSV3, CLUSTER, TRAIN)
    kw = {"tp": 1, "cp": 1, "micro_batch": 1}
    per_layer = M.layer_activation_bytes(ctx, sp=False, recompute="selective", **kw)
    per_moe = moe_layer_activation_extra_bytes(ctx, recompute="selective", ep=64, etp=1, **kw)
    # rank 1: 15 micro-batches in flight (1F1B, min(pp - r, m)) of four MoE layers; rank 0 keeps
    # 16 of three dense + one MoE layer (less: a dense layer keeps less than a MoE one here);
    # plus the dispatcher's working set of the one MoE layer running (moe_memory): t k = 32,768
    # permuted rows + the all-to-all output R = 4 x ceil(1.25 x 4096 x 8 x 64 / 256) = 40,960 held,
    # fc2 output and its unsorted copy 2 x 40,960: 155,648 rows x 7168 x 2 bytes
    dispatch = 155_648 * 7168 * 2
    assert est.memory_per_gpu_bytes["activations"] == pytest.approx(15 * 4 * (per_layer + per_moe) + dispatch,
                                                                     rel=1e-12)
    assert est.memory_per_gpu_bytes["logits"] == 0.0  # not the last rank
    even = estimate_layout(DSV3, CLUSTER, TRAIN, LAYOUT.model_copy(update={"pipeline_layers": None}))
    assert est.memory_per_gpu_bytes["total"] < even.memory_per_gpu_bytes["total"]
    assert est.step_time_s < even.step_time_s  # the head and MTP no longer share a 4-layer stage


def test_megatron_exports_the_moe_split():
    train = TRAIN.model_copy(update={"moe_a2a_overlap": False})
    args = export_layout("megatron-core", DSV3, train, LAYOUT, rank_placement(CLUSTER, LAYOUT), list(SPLIT))["args"]
    a = parse_megatron(args)
    assert megatron_violations(args) == []
    assert (a["decoder_first_pipeline_num_layers"], a["decoder_last_pipeline_num_layers"]) == (4, 1)
    inter = LAYOUT.model_copy(update={"vpp": 2, "pipeline_layers": None})
    split = [3] + [2] * 27 + [1, 1, 1, 1]  # 32 chunks of PP16 x VPP2, 61 layers
    train = train.model_copy(update={"global_batch_tokens": 4096 * 16384})  # 128 micro-batches: 16 | m
    args = export_layout("megatron-core", DSV3, train, inter, rank_placement(CLUSTER, inter), split)["args"]
    layout = parse_megatron(args)["pipeline_model_parallel_layout"]
    assert layout.startswith("Et*3|t*2|") and layout.endswith("|t*1|t*1|t*1|t*1mL")  # MTP before the loss
    assert megatron_violations(args) == []
