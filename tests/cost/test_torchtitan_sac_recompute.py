"""torchtitan's SelectiveAC holds, while a block's backward starts, the block's whole activations:
torch.utils.checkpoint's non-reentrant unpack hook recomputes the whole block at its first unpack
and keeps every recomputed tensor until backward unpacks it (pytorch/pytorch 0008d771
torch/utils/checkpoint.py; torchtitan b5bcd76c activation_checkpoint.py L278-288 wraps each block
with early_stop=False). solver.cost.memory.recomputed_layer_bytes charges the unstored part of one
layer beside the stored layers, as full recompute's one full layer; Megatron's per-module
selective recompute adds nothing.

Llama 3 8B (hidden 4096, 32 heads / 8 KV of 128, gated FFN 14336, flash attention, no dropout),
seq 8192, micro-batch 1, TP1, no SP, bytes per token of one layer:
- stored without recompute (memory.layer_activation_parts): norms 2 x 2 x 4096 = 16,384; attention
  input 2 x 4096 + Q, K, V, proj input 2 x (2 x 4096 + 2 x 1024) = 28,672; FP32 log-sum-exp
  4 x 32 = 128; FFN input 2 x 4096 + gate, up, act out 2 x 3 x 14336 = 94,208: 139,392;
- stored by SelectiveAC (memory.op_selective_bytes): block input 4096 + Q 4096 + V 1024 + W1 14336
  + W2 4096 + attention output 4096 = 31,744 values x 2 + 128 = 63,616.
The recomputed rest: 75,776 bytes a token, x 8192 = 620,756,992 bytes.
"""
from __future__ import annotations

from pathlib import Path

from solver.cost.estimate import make_context
from solver.cost.memory import activation_bytes, recomputed_layer_bytes
from solver.cost.moe_memory import moe_recomputed_layer_bytes
from solver.presets import load_model, load_training
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
CLUSTER = load_cluster("seed-512")


def _ctx(model, framework: str, seq: int):
    t = load_training("seed-300b").model_copy(update={"seq_len": seq, "framework": framework})
    return make_context(model, CLUSTER, t)


LLAMA = load_model("llama3-8b")
KW = {"tp": 1, "cp": 1, "sp": False, "micro_batch": 1}


def test_selective_ac_holds_the_recomputed_rest_of_one_layer():
    ctx = _ctx(LLAMA, "torchtitan", 8192)
    assert recomputed_layer_bytes(ctx, recompute="selective", **KW) == 75_776 * 8192 == 620_756_992
    # the first stage at PP1: 32 stored layers of 63,616 bytes a token, the token ids (8 bytes a
    # token), and the one recomputed layer
    expected = 32 * 63_616 * 8192 + 8 * 8192 + 620_756_992
    assert activation_bytes(ctx, recompute="selective", pp=1, vpp=1, grad_accum=1, **KW) == expected


def test_megatron_per_module_recompute_and_no_recompute_add_nothing():
    assert recomputed_layer_bytes(_ctx(LLAMA, "megatron-core", 8192), recompute="selective", **KW) == 0.0
    assert recomputed_layer_bytes(_ctx(LLAMA, "torchtitan", 8192), recompute="none", **KW) == 0.0
    assert recomputed_layer_bytes(_ctx(LLAMA, "torchtitan", 8192), recompute="full", **KW) == 139_392 * 8192


def test_the_recomputed_moe_layer_holds_torchtitans_fp32_combine_copy():
    # DeepSeek-V3 TP1 EP8, seq 4096: the recomputed MoE block holds its whole extra without
    # recompute (Megatron-Core's 696,418,304 bytes + torchtitan's FP32 combine copy 4 x 4096 x 8 x
    # 7168 = 939,524,096 + its grouped experts' product 2 x 40,960 x 2048 = 167,772,160) less what
    # SelectiveAC stored (864,419,840: tests/cost/test_torchtitan_moe_memory.py)
    dsv3 = load_model(str(HF / "deepseek-v3" / "config.json"))
    kw = {"tp": 1, "cp": 1, "micro_batch": 1, "ep": 8, "etp": 1, "recompute": "selective"}
    assert moe_recomputed_layer_bytes(_ctx(dsv3, "torchtitan", 4096), **kw) \
        == 696_418_304 + 939_524_096 + 167_772_160 - 864_419_840
    assert moe_recomputed_layer_bytes(_ctx(dsv3, "megatron-core", 4096), **kw) == 0.0
