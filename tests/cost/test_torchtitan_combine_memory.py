"""torchtitan's FP32 copy of the combined expert outputs (solver.cost.moe_memory.combine_saved_bytes,
the torchtitan profile's memory.moe_combine_saved_bytes) against hand counts.

pytorch/torchtitan b5bcd76c, torchtitan/models/common/token_dispatcher.py L616-619 (L158-161 at
EP 1): the combine computes (routed_output.to(float32) * scores).to(bf16); the scores require grad,
so autograd's mul keeps the FP32 operand, 4 bytes x T k rows x hidden per MoE layer and
micro-batch. With EP the rows are the rank's own tokens (s b / (cp tp)) x k; without EP the MoE
input is replicated over TP (moe_sharding.py L201-240), s b / cp tokens x k. Kept without
activation checkpointing; SelectiveAC recomputes the cast and the multiply; FullAC holds it in
the one layer being recomputed. Megatron-Core has no such copy (the probabilities are applied
inside the expert activation), so the difference to a Megatron-Core context of the same run is
the copy alone.

DeepSeek-V3 (tests/fixtures/hf/deepseek-v3): hidden 7168, top-8; Qwen3-30B-A3B: hidden 2048,
top-8, 48 MoE layers.
"""
from __future__ import annotations

from pathlib import Path

from solver.cost.estimate import make_context
from solver.cost.moe_comm import imbalance
from solver.cost.moe_layer import expert_shape, moe_layer_mask
from solver.cost.moe_memory import dispatch_working_set_bytes, moe_full_layer_bytes, moe_layer_activation_extra_bytes
from solver.cost.moe_torchtitan import grouped_product_bytes
from solver.cost.step_memory import moe_activation_extra_of
from solver.presets import load_model, load_training
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
TRAIN = load_training("seed-300b").model_copy(update={"seq_len": 4096})
CLUSTER = load_cluster("seed-512")


def _ctxs(model: str):
    m = load_model(str(HF / model / "config.json"))
    return (make_context(m, CLUSTER, TRAIN.model_copy(update={"framework": "torchtitan"})),
            make_context(m, CLUSTER, TRAIN.model_copy(update={"framework": "megatron-core"})))


TT, MC = _ctxs("deepseek-v3")
# 4 bytes x 4096 tokens x top-8 x hidden 7168: 0.94 GB a layer and micro-batch
DSV3_COPY = 4 * 4096 * 8 * 7168
assert DSV3_COPY == 939_524_096


def _extra(ctx, rc: str, *, tp: int = 1, ep: int = 8, etp: int = 1) -> float:
    return moe_layer_activation_extra_bytes(ctx, tp=tp, cp=1, recompute=rc, micro_batch=1, ep=ep, etp=etp)


# torchtitan's grouped experts also keep their R x F' product for w2 without recompute
# (solver.cost.moe_torchtitan.grouped_product_bytes; tests/cost/test_torchtitan_moe_memory.py):
# TP1 EP8, R = ceil(4096 x 8 x 8 / 256 x 1.25) x 32 local experts = 40,960 rows x 2048 x 2 bytes
PRODUCT_EP8 = 2 * 40_960 * 2048


def test_without_recompute_the_fp32_copy_is_kept():
    # TP1 EP8: the rank's 4096 tokens x 8 rows after the combine all-to-all
    assert _extra(TT, "none") - _extra(MC, "none") == DSV3_COPY + PRODUCT_EP8


def test_without_expert_parallelism_the_rows_are_the_whole_sequence():
    # TP2 EP1 (expert TP = TP): the MoE input is replicated over TP, 4096 tokens x 8 on each rank,
    # not 2048 x 8 (the sequence-parallel shard)
    # (product: EP 1, expert TP 2: all 256 experts on the rank, 4096 x 8 rows, width 1024)
    assert _extra(TT, "none", tp=2, ep=1, etp=2) - _extra(MC, "none", tp=2, ep=1, etp=2) \
        == DSV3_COPY + 2 * 32_768 * 1024
    # TP2 EP8 (expert TP 1): the tokens are sharded over TP, 2048 x 8 rows (640 busy rows an expert)
    assert _extra(TT, "none", tp=2) - _extra(MC, "none", tp=2) == DSV3_COPY // 2 + 2 * 640 * 32 * 2048


def test_selective_recomputes_it_and_full_holds_it_in_one_layer():
    # SelectiveAC keeps its own set of a MoE block (tests/cost/test_torchtitan_moe_memory.py), the
    # FP32 copy not among it
    assert _extra(TT, "selective") < DSV3_COPY
    assert _extra(TT, "full") == 0.0
    full = moe_full_layer_bytes(TT, tp=1, cp=1, micro_batch=1, ep=8, etp=1)
    assert full - moe_full_layer_bytes(MC, tp=1, cp=1, micro_batch=1, ep=8, etp=1) == DSV3_COPY + PRODUCT_EP8


def test_every_moe_layer_on_the_rank_keeps_one_per_micro_batch_in_flight():
    # Qwen3-30B-A3B, 48 MoE layers, PP2 1F1B with 8 micro-batches: the first rank holds 24 layers
    # for min(2, 8) = 2 micro-batches; 4 x 4096 x 8 x 2048 = 268,435,456 bytes a layer
    tt, mc = _ctxs("qwen3-30b-a3b")
    assert moe_layer_mask(tt.model) == (True,) * 48
    kw = {"tp": 1, "cp": 1, "micro_batch": 1, "ep": 8, "etp": 1, "pp": 2, "vpp": 1, "recompute": "none",
          "grad_accum": 8, "mask": (True,) * 48}
    per_layer = 4 * 4096 * 8 * 2048
    # beside each layer's product (2 x R x F') and once the dispatchers' different working sets
    one = {k: kw[k] for k in ("tp", "cp", "micro_batch", "ep", "etp", "recompute")}
    ws = dispatch_working_set_bytes(tt, **one) - dispatch_working_set_bytes(mc, **one)
    sh = expert_shape(tt.model, 4096, imbalance(tt), tp=1, cp=1, micro_batch=1, ep=8, etp=1)
    product = grouped_product_bytes(tt, sh)
    assert moe_activation_extra_of(tt, **kw) - moe_activation_extra_of(mc, **kw) \
        == 24 * 2 * (per_layer + product) + ws
