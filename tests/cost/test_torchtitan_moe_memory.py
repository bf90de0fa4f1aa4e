"""torchtitan's own MoE block memory (solver.cost.moe_torchtitan; the torchtitan profile's
memory.moe_implementation, cited to pytorch/torchtitan b5bcd76c activation_checkpoint.py,
models/common/moe.py, token_dispatcher.py and pytorch/pytorch c28ba8e5 partitioners.py), counted
by hand. Each test fails on the code before it (Megatron-Core's formulas for torchtitan).

DeepSeek-V3 (tests/fixtures/hf/deepseek-v3): hidden 7168, dense FFN 18432, 256 experts top-8 of
width 2048, one shared expert of 2048, MLA with q_lora_rank 1536 (wq_a, wq_b, wkv_a, wkv_b, wo:
5 attention mms). seq 4096, micro-batch 1, TP1 CP1 EP8: t = 4096 tokens, N = t k = 32,768 rows;
rows per expert 4096 x 8 x 8 / 256 = 1024, busiest ceil(1.25 x 1024) = 1280 (the default load
imbalance), 32 local experts: R = 40,960 rows.
"""
from __future__ import annotations

from pathlib import Path

from solver.cost.estimate import make_context
from solver.cost.moe_memory import (
    dispatch_working_set_bytes, moe_layer_activation_extra_bytes, moe_recomputed_layer_bytes,
)
from solver.presets import load_model, load_training
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
TRAIN = load_training("seed-300b").model_copy(update={"seq_len": 4096})
MODEL = load_model(str(HF / "deepseek-v3" / "config.json"))
TT = make_context(MODEL, load_cluster("seed-512"), TRAIN.model_copy(update={"framework": "torchtitan"}))
MC = make_context(MODEL, load_cluster("seed-512"), TRAIN.model_copy(update={"framework": "megatron-core"}))
KW = {"tp": 1, "cp": 1, "micro_batch": 1, "ep": 8, "etp": 1}
D, T, N, R, F = 7168, 4096, 32_768, 40_960, 2048


def test_selective_ac_keeps_topk_all_to_all_outputs_and_odd_shared_mms():
    # topk: FP32 value + int64 index per routed row: 12 x 32,768 = 393,216
    # the two all-to-all outputs (MUST_SAVE): 2 x (40,960 + 32,768) x 7168 = 1,056,964,608
    # shared expert: mms 6 (w1), 7 (w3), 8 (w2) after the 5 attention mms; the odd one, w3, is kept:
    #   2 x 4096 x 2048 = 16,777,216; the grouped expert GEMMs are recomputed
    # less the dense FFN op_selective_bytes charged the block: 2 x 4096 x (18432 + 7168) = 209,715,200
    want = 393_216 + 1_056_964_608 + 16_777_216 - 209_715_200
    assert want == 864_419_840
    assert moe_layer_activation_extra_bytes(TT, recompute="selective", **KW) == want
    # without EP (TP1 EP1) there is no all-to-all: topk and the shared w3 output only
    one = {**KW, "ep": 1}
    assert moe_layer_activation_extra_bytes(TT, recompute="selective", **one) \
        == 393_216 + 16_777_216 - 209_715_200


def test_selective_recomputed_layer_holds_the_rest():
    # the one block being recomputed holds its full MoE activations less what it stored
    full = moe_layer_activation_extra_bytes(TT, recompute="none", **KW)
    assert moe_recomputed_layer_bytes(TT, recompute="selective", **KW) == full - 864_419_840


def test_dispatcher_working_set_is_the_fp32_combine():
    # SelectiveAC (all-to-all outputs stored):
    #   dispatch: x[idx] N + its a2a output (stored) + the expert-major copy R: 73,728 x 7168 x 2
    #   experts: max(R D + 3 R F, 2 R D + R F) x 2 = 40,960 x 16,384 x 2 = 1,342,177,280
    #   combine: experts' output R + out_TD T rows (BF16) + FP32 cast and product of N rows:
    #            2 x 45,056 x 7168 + 8 x 32,768 x 7168 = 645,922,816 + 1,879,048,192
    assert dispatch_working_set_bytes(TT, **KW, recompute="selective") == 2_524_971_008
    # without recompute the FP32 cast is stored (combine_saved_bytes) and the combine's
    # all-to-all output is not: 2 x (R + T + N) x 7168 + 4 x N x 7168
    assert dispatch_working_set_bytes(TT, **KW, recompute="none") == 1_115_684_864 + 939_524_096
    # Megatron-Core's alltoall dispatcher is unchanged (its own hand count: test_moe_dispatch_memory)
    assert dispatch_working_set_bytes(MC, **KW, recompute="selective") \
        == dispatch_working_set_bytes(MC, **KW, recompute="none")
