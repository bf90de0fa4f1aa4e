"""Per-layout model state under each framework's recipe, against hand-derived numbers; and
`estimate` on a layout the framework cannot run names the rule and its source."""
from __future__ import annotations

import pytest

from solver.cost.estimate import estimate_layout
from solver.cost.memory import comm_buffer_bytes, logits_bytes
from solver.cost.estimate import make_context
from solver.presets import load_model, load_training
from solver.specs import LayoutSpec
from topology.catalog import load_cluster

# seed-70b: 69,500,936,192 parameters; per transformer layer 855,654,400 (Llama-3 70B shape).
N = 69_500_936_192


def _state(framework: str, **layout):
    training = load_training("seed-300b").model_copy(update={"framework": framework})
    est = estimate_layout(load_model("seed-70b"), load_cluster("seed-512"), training, LayoutSpec(**layout))
    m = est.memory_per_gpu_bytes
    return est, m["weights"], m["gradients"], m["optimizer"]


def test_megatron_distributed_optimizer_70b_tp4_pp4_dp32():
    # N/16 = 4,343,808,512 local params; d = 32: 2 + 4 + 12/32 = 6.375 B/param = 27.69 GB.
    est, w, g, o = _state("megatron-core", tp=4, pp=4, dp=32, zero_stage=1, sequence_parallel=True)
    local = N / 16
    assert (w, g, o) == (pytest.approx(2 * local), pytest.approx(4 * local), pytest.approx(12 / 32 * local))
    assert w + g + o == pytest.approx(27.69e9, rel=1e-3)
    assert est.runs_in_framework


def test_megatron_ddp_is_18_bytes():
    # ZeRO-0 (no distributed optimizer): 18 B/param of N/64 (TP8 PP8) = 19.55 GB.
    _, w, g, o = _state("megatron-core", tp=8, pp=8, dp=8, zero_stage=0, sequence_parallel=True)
    assert w + g + o == pytest.approx(18 * N / 64)


def test_torchtitan_fsdp2_is_16_over_d_plus_two_gathered_layers():
    # FSDP2 (ZeRO-3), TP8, d = 64: FP32 param 4 + FP32 grad 4 + Adam 8 = 16/64 B/param of
    # N/8, = 2.17 GB. Beyond ZeRO-2 ('never', whose BF16 copy is in the weights): two BF16
    # layers in flight, 2 x 855,654,400 / 8 x 2 B = 0.428 GB, and the LM-head unit kept
    # gathered: seed-70b ties its embeddings, so the unit is embedding (128,000 x 8,192 =
    # 1,048,576,000) + final norm (8,192): 1,048,584,192 / 8 x 2 B = 0.262 GB.
    _est, w, g, o = _state("torchtitan", tp=8, dp=64, zero_stage=3, sequence_parallel=True)
    assert w + g + o == pytest.approx(16 / 64 * N / 8)
    ctx = make_context(load_model("seed-70b"), load_cluster("seed-512"),
                       load_training("seed-300b").model_copy(update={"framework": "torchtitan"}))
    no_gather = comm_buffer_bytes(ctx, tp=8, cp=1, dp=64, pp=1, sp=True, zero=2, micro_batch=1)
    with_gather = comm_buffer_bytes(ctx, tp=8, cp=1, dp=64, pp=1, sp=True, zero=3, micro_batch=1)
    assert with_gather - no_gather == pytest.approx((2 * 855_654_400 + 1_048_584_192) / 8 * 2)


def test_torchtitan_all_gather_stream_pool_is_the_largest_unit_pair():
    # FSDP2 allocates all-gather outputs on its copy-in stream and keeps the last one until
    # the next copy-in; the caching allocator reuses a stream's blocks on that stream only.
    # The largest consecutive pair on seed-70b at TP8: the tied embedding unit (1,048,584,192)
    # and one layer (855,654,400): 1,904,238,592 / 8 x 2 B = 0.476 GB, held by every FSDP
    # recipe of torchtitan (ZeRO-1 under PP, 2, 3) and by none of Megatron-Core's.
    pool = 1_904_238_592 / 8 * 2
    for framework, zero, pp, expected in (("torchtitan", 2, 1, pool), ("torchtitan", 1, 4, pool),
                                          ("megatron-core", 1, 4, 0.0)):
        ctx = make_context(load_model("seed-70b"), load_cluster("seed-512"),
                           load_training("seed-300b").model_copy(update={"framework": framework}))
        bufs = comm_buffer_bytes(ctx, tp=8, cp=1, dp=1, pp=pp, sp=False, zero=zero, micro_batch=1)
        p2p = 4 * 2 * 8192 * 8192 / 8 if pp > 1 else 0.0  # seed-300b seq 8192, micro-batch 1
        assert bufs - p2p == pytest.approx(expected)


def test_torchtitan_fsdp_under_pipelining_keeps_stage_grads_whole():
    # PP: unsharded BF16 params (2) + FP32 accumulated grads (4) whole, FP32 param + Adam
    # (12) sharded over d = 16: 6.75 B/param of N/32.
    _, w, g, o = _state("torchtitan", tp=8, pp=4, dp=16, zero_stage=1, sequence_parallel=True)
    assert (w, g, o) == (pytest.approx((2 + 4 / 16) * N / 32), pytest.approx(4 * N / 32),
                         pytest.approx(8 / 16 * N / 32))


def test_deepspeed_zero1_and_pipeline_bf16_optimizer():
    # ZeRO-1 without PP: 2 + 2 + 16/d; d = 64 over N/8: 4.25 B/param.
    _, w, g, o = _state("deepspeed", tp=8, dp=64, zero_stage=1)
    assert w + g + o == pytest.approx(4.25 * N / 8)
    # Pipeline engine, stage 0 (BF16_Optimizer): 2 + (2 BF16 grads + 2 accumulation buffer)
    # + 12/d; d = 8 over N/64: 7.5 B/param (tests/cost/test_deepspeed_memory.py).
    _, w, g, o = _state("deepspeed", tp=8, pp=8, dp=8, zero_stage=0)
    assert w + g + o == pytest.approx(7.5 * N / 64)


def test_estimate_of_a_layout_megatron_cannot_run_says_why_and_where():
    # The seed's old best: TP4 PP2 VPP8 DP64 ZeRO-2. Megatron-Core has no ZeRO-2 with PP.
    est, *_ = _state("megatron-core", tp=4, pp=2, vpp=8, dp=64, zero_stage=2, sequence_parallel=True)
    assert not est.runs_in_framework
    (v,) = est.framework_violations
    assert v["rule"] == "zero_stage" and "ZeRO-2" in v["reason"]
    assert {s["repository"] for s in v["sources"]} == {"NVIDIA/Megatron-LM"}
    assert any(n.startswith("NOT RUNNABLE in megatron-core") for n in est.notes)
    d = est.as_dict()
    assert d["runs_in_framework"] is False and d["framework"] == "megatron-core"


def test_torchtitan_vocab_parallel_loss_keeps_16_bytes_per_logit_under_tp():
    # seed-300b: seq 8192; seed-70b: hidden 8192, vocab 128,000. One micro-batch: the LM-head
    # input 2 x 8192 x 8192 B plus the logits, 8192 x 128,000 / t of them: 12 B each on one
    # GPU (F.cross_entropy on pred.float()), 16 B under TP (_LossParallelCrossEntropy keeps the
    # FP32 log-probs, a one-hot, their sum with exp and the product alive); Megatron-Core's
    # vocab-parallel loss 6 B at any TP (BF16 logits + their FP32 copy).
    head_input, logits = 2 * 8192 * 8192, 8192 * 128_000
    for framework, tp, per_logit in (("torchtitan", 1, 12), ("torchtitan", 8, 16),
                                     ("megatron-core", 8, 6), ("megatron-core", 1, 6)):
        ctx = make_context(load_model("seed-70b"), load_cluster("seed-512"),
                           load_training("seed-300b").model_copy(update={"framework": framework}))
        got = logits_bytes(ctx, tp=tp, cp=1, micro_batch=1)
        assert got == pytest.approx(head_input + per_logit * logits / tp)
