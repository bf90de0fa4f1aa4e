"""DeepSpeed's memory semantics for the layouts trainplan exports, counted by hand from
deepspeedai/DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641 (the commit the fixtures were
extracted from); Megatron-Core and torchtitan terms stay as they were."""
from __future__ import annotations

import pytest

from solver.cost.estimate import make_context
from solver.cost.memory import comm_buffer_bytes
from solver.presets import load_model
from solver.specs import TrainingSpec
from topology.catalog import load_cluster


def _ctx(model: str, framework: str = "deepspeed"):
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
