"""torchtitan's FSDP2 memory semantics read in PyTorch's and torchtitan's own source (cited in
solver/data/frameworks/torchtitan.json, memory.reduce_scatter_copy_bytes), counted by hand.
Each test fails on the code before it (two 40M-element buckets x 2 bytes = 160,000,000)."""
from pathlib import Path

from solver.cost.estimate import make_context
from solver.cost.memory import comm_buffer_bytes, dp_buffer_bytes
from solver.cost.moe_memory import moe_gathered_bytes
from solver.cost.options import CostOptions
from solver.frameworks.profile import FrameworkName
from solver.cost.terms import CostContext
from solver.presets import load_model, load_training
from solver.specs import TrainingSpec
from topology.catalog import load_cluster

S = 8192


def ctx(framework: FrameworkName = "torchtitan", model: str = "llama3-8b") -> CostContext:
    training = TrainingSpec(seq_len=S, global_batch_tokens=S * 64, framework=framework)
    return CostContext(load_model(model), load_cluster("seed-512"), training, CostOptions())


# Llama 3 8B (h 4096, 32 heads, 8 KV heads of 128, FFN 14336, V 128256, untied):
# block = q, o 2 x 4096^2 (33,554,432) + k, v 2 x 4096 x 1024 (8,388,608)
#       + SwiGLU 3 x 4096 x 14336 (176,160,768) + 2 norms x 4096 (8,192) = 218,112,000;
# LM-head unit = final norm 4096 + LM head 128,256 x 4096 (525,336,576) = 525,340,672 > block.
HEAD_UNIT = 525_340_672


def test_fsdp2_reduce_scatter_copy_is_fp32_beside_the_bf16_gradient():
    # foreach_reduce copies the unit's unsharded BF16 gradient (2 bytes) into an FP32
    # reduce-scatter input (4 bytes, mixed_precision_reduce float32) and frees the gradient only
    # after the copy: 6 bytes per parameter of the largest unit, the LM-head unit:
    # 525,340,672 x 6 = 3,152,044,032 bytes (3.15 GB), whatever the DP size.
    c = ctx()
    for zero, dp in ((3, 8), (2, 8), (3, 128), (0, 8)):
        assert dp_buffer_bytes(c, dp=dp, cp=1, zero=zero, tp=1, pp=1) == 3_152_044_032
    # TP 8 splits the unit: 525,340,672 / 8 x 6 = 394,005,504.
    assert dp_buffer_bytes(c, dp=8, cp=1, zero=3, tp=8, pp=1) == 394_005_504
    # One replica (DP x CP = 1): nothing is reduced.
    assert dp_buffer_bytes(c, dp=1, cp=1, zero=3, tp=1, pp=1) == 0.0
    # CP alone makes the FSDP mesh (dp_shard x cp): reduced as with DP.
    assert dp_buffer_bytes(c, dp=1, cp=8, zero=3, tp=1, pp=1) == 3_152_044_032


def test_fsdp2_under_pp_copies_the_fp32_accumulated_gradient():
    # Under PP the unit hands its FP32 accumulated gradient (the recipe's 4 bytes of gradients)
    # to the copy: 4 bytes per parameter beside it. Llama 3.1 405B (h 16384, 128 heads, 8 KV
    # heads of 128, FFN 53248): block = 2 x 16384^2 (536,870,912) + 2 x 16384 x 1024 (33,554,432)
    # + 3 x 16384 x 53248 (2,617,245,696) + 2 x 16384 (32,768) = 3,187,703,808 > LM-head unit
    # (16,384 + 128,256 x 16,384 = 2,101,362,688); TP 8: 398,462,976 x 4 = 1,593,851,904.
    c = ctx(model="llama3-405b")
    assert dp_buffer_bytes(c, dp=8, cp=1, zero=1, tp=8, pp=8) == 1_593_851_904
    # in comm_buffer_bytes beside the SP gather, the PP buffers and the all-gather pool
    gathered = comm_buffer_bytes(c, tp=8, cp=1, dp=1, pp=8, sp=True, zero=1, micro_batch=1)
    assert comm_buffer_bytes(c, tp=8, cp=1, dp=8, pp=8, sp=True, zero=1, micro_batch=1) \
        == gathered + 1_593_851_904


def test_other_frameworks_keep_their_reduce_terms():
    # Megatron-FSDP (ZeRO-3) keeps the default two buckets; DeepSpeed its reduce buffers.
    assert dp_buffer_bytes(ctx("megatron-core"), dp=8, cp=1, zero=3, tp=1, pp=1) == 2 * 40_000_000 * 2


def test_a_moe_block_is_the_largest_unit_reduced():
    # Mixtral 8x7B (h 4096, 32 heads, 8 KV heads, 8 experts of width 14336, top-2), TP1: a MoE block
    # is attention 2 x 4096^2 + 2 x 4096 x 1024 (41,943,040) + norms 8,192 + router 4096 x 8 (32,768)
    # + 8 x 3 x 4096 x 14336 (1,409,286,144) = 1,451,270,144 parameters at EP 1, against the dense
    # block dp_buffer_bytes sizes the copy by (41,943,040 + 3 x 4096 x 14336 + 8,192 = 218,112,000;
    # the LM-head unit 4,096 + 32,000 x 4096 is smaller): (1,451,270,144 - 218,112,000) x 6 more.
    hf = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "mixtral-8x7b" / "config.json"
    c = make_context(load_model(str(hf)), load_cluster("seed-512"),
                     load_training("seed-300b").model_copy(update={"framework": "torchtitan"}))
    kw = {"tp": 1, "pp": 1, "zero": 3, "etp": 1}
    assert moe_gathered_bytes(c, **kw, ep=1, shards=8) - moe_gathered_bytes(c, **kw, ep=1, shards=1) \
        == 1_233_158_144 * 6 == 7_398_948_864
    # EP 8: 41,984,000 + 1,409,286,144 / 8 = 218,144,768, 32,768 above the dense block
    assert moe_gathered_bytes(c, **kw, ep=8, shards=8) - moe_gathered_bytes(c, **kw, ep=8, shards=1) == 32_768 * 6
    # under PP the copy is 4 bytes a parameter (the FP32 accumulated gradient is the recipe's)
    pp = {**kw, "pp": 2, "zero": 1}
    assert moe_gathered_bytes(c, **pp, ep=1, shards=8) - moe_gathered_bytes(c, **pp, ep=1, shards=1) \
        == 1_233_158_144 * 4
    # Megatron-Core states no copy: nothing added
    m = make_context(c.model, c.cluster, c.training.model_copy(update={"framework": "megatron-core"}))
    assert moe_gathered_bytes(m, **kw, ep=1, shards=8) == moe_gathered_bytes(m, **kw, ep=1, shards=1)
