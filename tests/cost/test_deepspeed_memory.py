"""DeepSpeed's memory semantics for the layouts trainplan exports, counted by hand from
deepspeedai/DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641 (the commit the fixtures were
extracted from); Megatron-Core and torchtitan terms stay as they were."""
from __future__ import annotations

import pytest

from solver.cost.estimate import make_context
from solver.cost.memory import comm_buffer_bytes, dp_buffer_bytes
from solver.frameworks.profile import FrameworkName
from solver.presets import load_model
from solver.specs import TrainingSpec
from topology.catalog import load_cluster


def _ctx(model: str, framework: FrameworkName = "deepspeed"):
    t = TrainingSpec(seq_len=8192, global_batch_tokens=8192 * 256, framework=framework)
    return make_context(load_model(model), load_cluster("dgx-h100-superpod"), t)


@pytest.mark.parametrize("model, layer, vh, norms", [
    ("llama3-8b", 218_112_000, 525_336_576, 266_240),
    ("llama3-70b", 855_654_400, 1_050_673_152, 1_318_912),
])
def test_zero3_gathers_the_lm_head_whole_on_top_of_the_two_layers(model, layer, vh, norms):
    """ZeRO-3 under the exported limits (stage3_max_live_parameters = 2 layers, prefetch
    bucket and reuse distance 1 layer). partitioned_param_coordinator.py L452-476: a prefetch
    runs while fewer than max_live elements are gathered and pops whole parameters until
    numel_prefetching reaches min(max_live - available, bucket), so the LM head (one
    parameter of V x h elements, more than the bucket) is gathered whole while up to two
    layers are still live; the norms (<= 1e5 elements) are persistent (parameter_offload.py
    L311-329). Replaying the coordinator's rules over the Llama 3 module trace peaks at
    961,544,192 non-persistent elements for 8B (436,207,616 of layers 30-31 + 525,336,576 of
    the head, in layer 30's forward) and 2,761,949,184 for 70B: two layers + V x h.
    Layer: 8B 218,112,000, 70B 855,654,400; V x h: 128,256 x 4,096 = 525,336,576 and
    128,256 x 8,192 = 1,050,673,152; norms: 32 x 2 x 4,096 + 4,096 = 266,240 and
    80 x 2 x 8,192 + 8,192 = 1,318,912. BF16: 2 bytes. 8B: (436,224,000 + 525,336,576 +
    266,240) x 2 = 1,923,653,632 bytes (was 2 layers, 872,448,000); 70B: 5,526,601,728 (was
    3,422,617,600). ZeRO-2 gathers nothing, so the difference is the gathered term."""
    ctx = _ctx(model)
    zero3 = comm_buffer_bytes(ctx, tp=1, cp=1, dp=8, pp=1, sp=False, zero=3, micro_batch=1)
    zero2 = comm_buffer_bytes(ctx, tp=1, cp=1, dp=8, pp=1, sp=False, zero=2, micro_batch=1)
    assert zero3 - zero2 == pytest.approx((2 * layer + vh + norms) * 2, rel=1e-12)
    # Megatron-FSDP's ZeRO-3 units are its layers only (its profile): unchanged
    mc = _ctx(model, "megatron-core")
    gathered = (comm_buffer_bytes(mc, tp=1, cp=1, dp=8, pp=1, sp=False, zero=3, micro_batch=1)
                - comm_buffer_bytes(mc, tp=1, cp=1, dp=8, pp=1, sp=False, zero=2, micro_batch=1))
    assert gathered == pytest.approx(2 * layer * 2, rel=1e-12)


def test_zero_reduce_buffers_are_two_exported_buckets_in_bf16():
    """ZeRO-1/2 with contiguous_gradients and overlap_comm (both exported true) allocate two
    reduce_bucket_size buffers in the model's BF16 during backward (stage_1_and_2.py
    setup_buckets L2493-2514); ZeRO-3 one for the run plus reduce_scatter_coalesced's staging
    copy. DeepSpeed's default bucket, 5e8 elements, would hold 2 GB; the export now writes the
    bucket the step time charges, max(40M, 1M x DP): 40,000,000 at DP 8 and 512,000,000 at
    DP 512. Charged: 2 x 512,000,000 x 2 B = 2,048,000,000 bytes at DP 512 (was two 40M buckets
    at the gradient dtype, 160,000,000); at DP 8 2 x 40M x 2 = 160,000,000 even when the
    training spec states 4-byte gradients (the buffers are the model's BF16; was 320,000,000).
    Megatron-Core reduces in its gradient buffer at ZeRO 0/1 (no buckets, test_megatron_memory.py)
    and keeps two 40M buckets at the gradient dtype under Megatron-FSDP."""
    from service.launchers import export_layout, rank_placement
    from solver.specs import LayoutSpec, PrecisionRecipe
    from tests.service.deepspeed_options import deepspeed_config_problems

    ds, mc = _ctx("llama3-8b"), _ctx("llama3-8b", "megatron-core")
    for zero in (1, 2, 3):
        assert comm_buffer_bytes(ds, tp=1, cp=1, dp=512, pp=1, sp=False, zero=zero, micro_batch=1) \
            - comm_buffer_bytes(ds, tp=1, cp=1, dp=1, pp=1, sp=False, zero=zero, micro_batch=1) \
            == 2 * 512_000_000 * 2
    assert comm_buffer_bytes(mc, tp=1, cp=1, dp=512, pp=1, sp=False, zero=1, micro_batch=1) == 0.0
    assert dp_buffer_bytes(mc, dp=512, cp=1, zero=3, tp=1, pp=1) == 2 * 40_000_000 * 2
    fp32_grads = PrecisionRecipe(weight_bytes=2, grad_bytes=4, optimizer_moment_bytes=4, master_weights=True)
    t = ds.training.model_copy(update={"precision": fp32_grads})
    stated = make_context(ds.model, ds.cluster, t)
    assert comm_buffer_bytes(stated, tp=1, cp=1, dp=8, pp=1, sp=False, zero=1, micro_batch=1) == 160_000_000
    cluster = load_cluster("dgx-h100-superpod")
    for dp, bucket in ((8, 40_000_000), (512, 512_000_000)):
        layout = LayoutSpec(dp=dp, zero_stage=1)
        cfg = export_layout("deepspeed", ds.model, ds.training, layout, rank_placement(cluster, layout))["config"]
        assert cfg["zero_optimization"]["reduce_bucket_size"] == bucket
        assert deepspeed_config_problems(cfg) == []


def test_bf16_optimizer_under_the_pipeline_keeps_bf16_grads_and_their_accumulation_buffer():
    """ZeRO-0 under the pipeline engine runs BF16_Optimizer: the BF16 .grad of every parameter
    (zeroed in place before each backward, never freed: bf16_optimizer.py clear_lp_grads
    L473-489) and the flat accumulation buffer it is added to (zeros_like the BF16 group in
    grad_acc_dtype, BF16 by default: L175-177, engine.py L1485-1496), so 2 + 2 bytes per
    parameter whole (was 2). Llama 3 8B at PP 4: 8,030,261,248 / 4 = 2,007,565,312 parameters
    per rank: 8,030,261,248 gradient bytes."""
    from solver.cost.estimate import estimate_layout
    from solver.specs import LayoutSpec

    ds = _ctx("llama3-8b")
    est = estimate_layout(ds.model, ds.cluster, ds.training, LayoutSpec(pp=4, dp=2, zero_stage=0))
    assert est.memory_per_gpu_bytes["gradients"] == pytest.approx(4 * 8_030_261_248 / 4, rel=1e-12)


@pytest.mark.parametrize("pp, tp, expected", [
    # X = 2 s b h = 2 x 8192 x 4096 = 67,108,864 bytes (seq 8192, micro-batch 1, grad_accum 8).
    # PP 4, TP 1: 8 layers a rank; rank 0 holds 4 micro-batches, each with its stage output
    # (X) beside 8 layer inputs (8X, full recompute): 36X; rank 1, 3 micro-batches of 8X + its
    # output X + its received input X: 30X. Rank 0 stays the busiest: +4X.
    (4, 1, 4 * 67_108_864),
    # PP 8, TP 1: 4 layers a rank; rank 0: 8 x (4X + X) = 40X (+ 8 x 65,536 token ids);
    # rank 1: 7 x (4X + 2X) = 42X, the busier: 42X - (32X + 8 x 65,536) = 10X - 524,288.
    (8, 1, 10 * 67_108_864 - 8 * 65_536),
    # PP 4, TP 2 (pipe_partitioned): the output is split over TP, X / 2, and the received
    # input is the first layer's own (rebuilt whole): rank 0 +4 x X/2.
    (4, 2, 4 * 67_108_864 / 2),
])
def test_pipeline_engine_keeps_each_in_flight_stage_output(pp, tp, expected):
    """DeepSpeed's PipelineEngine keeps each in-flight micro-batch's stage output until its
    backward (pipe/engine.py L774, L888-889) and, with TP 1, the received input the forward
    ran on a clone of (L1146-1177, freed at L1134). Full recompute keeps 2 s b h per layer
    (the layer input), so rank by rank the charge is counted by hand; Megatron-Core's
    activations on the same layout are the baseline (same layer, embedding and full-recompute
    terms)."""
    from solver.cost.memory import activation_bytes

    kw = {"tp": tp, "cp": 1, "sp": False, "recompute": "full", "micro_batch": 1, "pp": pp, "vpp": 1,
          "grad_accum": 8}
    ds, mc = _ctx("llama3-8b"), _ctx("llama3-8b", "megatron-core")
    assert activation_bytes(ds, **kw) - activation_bytes(mc, **kw) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tp, ds_bytes", [
    # s b h = 8192 x 4096 = 33,554,432 values, 2 B each. TP 1: the activation and gradient
    # receive buffers, 2 x 67,108,864 = 134,217,728 (was the default 4 x 2 s b h = 268,435,456).
    (1, 2 * 67_108_864),
    # TP 2: both receive buffers split over TP (2 x 33,554,432) plus the whole output and
    # output gradient a backward rebuilds (2 x 67,108,864): 201,326,592 (was 4 x 2 s b h / 2).
    (2, 2 * 67_108_864 / 2 + 2 * 67_108_864),
])
def test_pipeline_engine_send_and_receive_buffers(tp, ds_bytes):
    """DeepSpeed's PipelineEngine sends the stored stage output itself and keeps one receive
    buffer per direction, split over TP (pipe/grad_partitioned), and under TP rebuilds a
    micro-batch's whole output and output gradient for its backward (pipe/engine.py L838-857,
    L1146-1165, L1200-1230). Megatron-Core keeps its 4 x 2 s b h / t."""
    ds, mc = _ctx("llama3-8b"), _ctx("llama3-8b", "megatron-core")
    kw = {"tp": tp, "cp": 1, "dp": 2, "sp": False, "zero": 1, "micro_batch": 1}
    assert comm_buffer_bytes(ds, pp=4, **kw) - comm_buffer_bytes(ds, pp=1, **kw) == pytest.approx(ds_bytes)
    assert comm_buffer_bytes(mc, pp=4, **kw) - comm_buffer_bytes(mc, pp=1, **kw) == pytest.approx(4 * 67_108_864 / tp)
