"""Step-time model: relative effects, decomposition agreement, the seed layout's fit."""
import dataclasses

import pytest

from solver.cost import terms as T
from solver.cost.estimate import estimate_layout, make_context
from solver.cost.step import compose_memory, compose_step_time, memory_terms, time_terms
from solver.cost.terms import layers_on_rank
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.spec import ClusterSpec
import itertools

A100 = {"name": "a100", "memory_gb": 80, "peak_tflops": 312, "hbm_gb_s": 2039}


def a100_cluster(nodes):
    return ClusterSpec.model_validate({
        "name": f"dgx-a100-{nodes}", "nodes": nodes, "gpus_per_node": 8, "gpu": A100,
        "intra_node": {"bandwidth_gb_s": 230, "latency_us": 3},
        "inter_node": {"bandwidth_gb_s": 23, "latency_us": 10}})


def gpt(layers, hidden, heads, head_dim):
    return ModelSpec(name="gpt", layers=layers, hidden=hidden, ffn_hidden=4 * hidden, ffn_gated=False,
                     heads=heads, kv_heads=heads, head_dim=head_dim, vocab=51200, tied_embeddings=True,
                     position_embedding="learned", norm="layernorm", bias=True)


# Korthikanti et al. 2022, Table 3: model dims, TP, PP, GPUs, global batch (sequences of 2048).
KORTHIKANTI = [
    ("22B", gpt(48, 6144, 64, 96), 8, 1, 1, 4),
    ("175B", gpt(96, 12288, 96, 128), 8, 8, 3, 64),
    ("530B", gpt(105, 20480, 128, 160), 8, 35, 3, 280),
    ("1T", gpt(128, 25600, 160, 160), 8, 64, 1, 512),
]


@pytest.mark.parametrize("name,model,tp,pp,vpp,batch", KORTHIKANTI, ids=[k[0] for k in KORTHIKANTI])
@pytest.mark.parametrize("kernel", ["flash", "unfused"])
def test_selective_faster_than_full(name, model, tp, pp, vpp, batch, kernel):
    training = TrainingSpec(seq_len=2048, global_batch_tokens=2048 * batch, attention_kernel=kernel)
    cluster = a100_cluster(tp * pp // 8)
    sel = LayoutSpec(tp=tp, pp=pp, vpp=vpp, sequence_parallel=True, recompute="selective")
    est = {rc: estimate_layout(model, cluster, training, sel.model_copy(update={"recompute": rc}))
           for rc in ("selective", "full")}
    full_no_sp = estimate_layout(model, cluster, training,
                                 sel.model_copy(update={"recompute": "full", "sequence_parallel": False}))
    assert est["selective"].step_time_s < est["full"].step_time_s
    assert est["selective"].step_time_s < full_no_sp.step_time_s
    # Korthikanti Table 5 measures full/selective = 1.29-1.32; the model stays in a sane band.
    assert 1.1 < full_no_sp.step_time_s / est["selective"].step_time_s < 1.5


def test_per_gpu_throughput_drops_as_dp_grows(seed_model, seed_cluster, seed_training):
    # Fixed per-replica batch: 8 micro-batches of one sequence per replica, global batch grows.
    rates = []
    for dp in (4, 8, 16, 32, 64):
        training = seed_training.model_copy(update={"global_batch_tokens": dp * 8 * 8192})
        layout = LayoutSpec(tp=8, dp=dp, zero_stage=1, sequence_parallel=True, recompute="selective")
        est = estimate_layout(seed_model, seed_cluster, training, layout)
        assert est.grad_accum == 8
        rates.append(est.tokens_per_s / layout.gpus)
    assert all(a > b for a, b in itertools.pairwise(rates)), rates


def test_seed_layout_under_megatron_core_memory(seed_model, seed_cluster, seed_training, seed_layout):
    est = estimate_layout(seed_model, seed_cluster, seed_training, seed_layout)
    mem = est.memory_per_gpu_bytes
    # Megatron-Core BF16 + distributed optimizer (ZeRO-1), d = DP x CP = 64, N/8 = 8.688e9
    # local params (Megatron-LM docs/user-guide/features/dist_optimizer.md, 6 + 12/d):
    # weights 2 x 8.688e9 = 17.38 GB, FP32 main grads 4 x 8.688e9 = 34.75 GB (full size),
    # optimizer 12/64 x 8.688e9 = 1.63 GB; 53.75 GB instead of the seed's 12-byte 36.1 GB.
    assert mem["weights"] == pytest.approx(17.375e9, rel=1e-3)
    assert mem["gradients"] == pytest.approx(34.75e9, rel=1e-3)
    assert mem["optimizer"] == pytest.approx(1.629e9, rel=1e-3)
    assert est.memory_recipe["mode"] == "--use-distributed-optimizer"
    assert est.grad_accum == 8 and est.tokens_per_step == 4_194_304
    # With 22.5 GB of activations it does not fit 90% of 80 GB (options.memory_margin_fraction).
    assert not est.fits
    assert est.memory_margin.usable_bytes == pytest.approx(72e9)
    assert -9e9 < est.memory_margin.headroom_bytes < -7e9
    assert mem["total"] == pytest.approx(sum(mem[k] for k in (
        "model_state", "activations", "logits", "comm_buffers", "framework_overhead")))
    assert 0.3 < est.mfu < 0.7 and est.hfu > est.mfu


def test_estimate_equals_the_composition_of_terms(seed_model, seed_cluster, seed_training):
    ctx = make_context(seed_model, seed_cluster, seed_training)
    layout = LayoutSpec(tp=4, pp=4, vpp=2, dp=16, cp=2, sequence_parallel=True, zero_stage=2,
                        micro_batch=1, recompute="full")
    from solver.cost.estimate import estimate_with_context
    est = estimate_with_context(ctx, layout)
    m = est.grad_accum
    st = compose_step_time(time_terms(ctx, layout, m), layers=layers_on_rank(80, 4, 2), pp=4, vpp=2,
                           grad_accum=m)
    assert est.step_time_s == st.step_time_s
    assert sum(est.time_breakdown_s.values()) == pytest.approx(est.step_time_s, rel=1e-12)
    assert est.memory_per_gpu_bytes == compose_memory(memory_terms(ctx, layout, m))


def test_terms_depend_only_on_their_declared_variables(seed_model, seed_cluster, seed_training):
    ctx = make_context(seed_model, seed_cluster, seed_training)
    a = LayoutSpec(tp=8, pp=2, dp=16, sequence_parallel=True, zero_stage=1, recompute="selective")
    b = a.model_copy(update={"pp": 4, "dp": 8, "zero_stage": 3, "vpp": 2})
    ta, tb = time_terms(ctx, a, 8), time_terms(ctx, b, 16)
    for field in ("layer_compute_s", "layer_tp_comm_s", "layer_cp_comm_s"):
        assert getattr(ta, field) == getattr(tb, field)
    assert T.head_extra_s(ctx, tp=8, cp=1, sp=True, micro_batch=1, pp=2) == ta.head_extra_s


def test_layers_on_rank():
    assert layers_on_rank(80, 1, 1) == 80
    assert layers_on_rank(126, 9, 7) == 14
    assert layers_on_rank(80, 3, 1) == 27      # uneven split: the most loaded rank


def test_zero_shards_the_optimizer_step(seed_model, seed_cluster, seed_training):
    ctx = make_context(seed_model, seed_cluster, seed_training)
    z0 = T.optimizer_s(ctx, tp=8, cp=1, dp=64, pp=1, zero=0)
    z1 = T.optimizer_s(ctx, tp=8, cp=1, dp=64, pp=1, zero=1)
    assert z1 == pytest.approx(z0 / 64)
    assert T.dp_exposed_s(ctx, tp=8, cp=1, dp=1, pp=1, zero=1, grad_accum=8) == 0.0
    assert T.p2p_per_microbatch_s(ctx, tp=8, cp=1, dp=64, pp=1, vpp=1, micro_batch=1) == 0.0


def test_zero3_costs_more_dp_traffic_than_zero1(seed_model, seed_cluster, seed_training):
    from solver.cost.options import CostOptions
    ctx = make_context(seed_model, seed_cluster, seed_training, CostOptions(dp_overlap_fraction=0.0))
    args = {"tp": 8, "cp": 1, "dp": 64, "pp": 1, "grad_accum": 8}
    z1 = T.dp_exposed_s(ctx, zero=1, **args)   # no overlap: the step's whole DP traffic
    z3 = T.dp_exposed_s(ctx, zero=3, **args)
    z0 = T.dp_exposed_s(ctx, zero=0, **args)
    assert z3 > z1 and z0 == pytest.approx(z1, rel=0.02)   # AR = RS + AG in volume (bf16 both)


def test_cost_options_reject_impossible_fractions():
    from solver.cost.options import CostOptions
    from solver.errors import SpecError
    with pytest.raises(SpecError):
        CostOptions(gemm_peak_fraction=1.5)
    assert dataclasses.replace(CostOptions(), hbm_fraction=0.9).hbm_fraction == 0.9


def test_zero_stages_expose_monotonically_more_dp_time(seed_model, seed_cluster, seed_training):
    from solver.cost.options import CostOptions
    def exposed(options):
        ctx = make_context(seed_model, seed_cluster, seed_training, options)
        return [T.dp_exposed_s(ctx, tp=4, cp=1, dp=128, pp=1, zero=z, grad_accum=8) for z in range(4)]
    plain = exposed(CostOptions(dp_overlap_fraction=0.0))
    assert plain[0] == pytest.approx(plain[1], rel=0.02)       # AR = RS + AG in volume
    assert plain[1] <= plain[2] <= plain[3]
    overlapped = exposed(CostOptions())
    # The all-reduce hides under one backward only; ZeRO-1's all-gather under the next forward.
    assert overlapped[1] < overlapped[0] < plain[0]
    assert overlapped[1] <= overlapped[2] <= overlapped[3]


def test_fsdp_prefetch_hides_dp_traffic_under_a_long_micro_batch(seed_model, seed_cluster, seed_training):
    # ZeRO-3, TP4 PP4 DP4, one micro-batch of 32 sequences. Local parameters
    # 69,500,936,192 / 16 = 4,343,808,512 (8,687,617,024 BF16 bytes) in
    # ceil(8,687,617,024 / 80e6) = 109 buckets. The DP ring (ranks 0, 4, 8, 12) spans two
    # nodes: one bucket's reduce-scatter or all-gather = 3 x 10 us + 3/4 x bytes/109 / 45 GB/s
    # = 1.3584 ms. The step moves RS + 2 AG = 3 x 109 buckets (0.444 s); the micro-batch's
    # compute (~32 x 20 layers x ~35 ms) hides all but the first gather and the last
    # reduce-scatter bucket.
    from solver.cost.options import CostOptions
    bucket_s = 3 * 10e-6 + 0.75 * (8_687_617_024 / 109) / 45e9
    ctx = make_context(seed_model, seed_cluster, seed_training)
    kw = {"tp": 4, "cp": 1, "dp": 4, "pp": 4, "zero": 3, "grad_accum": 1}
    assert T.dp_exposed_s(ctx, **kw) == pytest.approx(2 * bucket_s)
    plain = make_context(seed_model, seed_cluster, seed_training, CostOptions(dp_overlap_fraction=0.0))
    assert T.dp_exposed_s(plain, **kw) == pytest.approx(3 * 109 * bucket_s)


def test_dp_buckets_grow_with_dp_so_latency_stays_bounded(seed_model, seed_cluster, seed_training):
    # Megatron-Core DDP: bucket = max(40M, 1M x dp) elements. Seed, TP1 PP1 DP512, ZeRO-1:
    # 69,500,936,192 BF16 gradients in ceil(69.50e9 / 512e6) = 136 buckets; each
    # reduce-scatter and all-gather pays 511 ring steps of 10 us (inter-node latency) plus
    # 511/512 of its bytes at 45 GB/s. By hand: 2 x 136 x 511 x 10e-6 = 1.390 s of latency
    # + 2 x (511/512) x 139.0e9 / 45e9 = 6.166 s of bandwidth = 7.556 s. With fixed 40M
    # buckets it would be 1738 buckets, i.e. 17.8 s of latency alone.
    from solver.cost.options import CostOptions
    assert T.dp_bucket_elements(CostOptions(), 8) == 40_000_000
    assert T.dp_bucket_elements(CostOptions(), 512) == 512_000_000
    ctx = make_context(seed_model, seed_cluster, seed_training, CostOptions(dp_overlap_fraction=0.0))
    kw = {"tp": 1, "cp": 1, "dp": 512, "pp": 1, "zero": 1, "grad_accum": 1}
    assert T.dp_exposed_s(ctx, **kw) == pytest.approx(7.556, rel=0.01)
    fixed = make_context(seed_model, seed_cluster, seed_training,
                         CostOptions(dp_overlap_fraction=0.0, dp_bucket_elements_per_rank=0))
    assert T.dp_exposed_s(fixed, **kw) > 20.0


def test_public_estimate_schema_and_errors(seed_model, seed_cluster, seed_training, seed_layout):
    from solver.errors import SpecError
    out = estimate_layout(seed_model, seed_cluster, seed_training, seed_layout).as_dict()
    assert {"step_time_s", "mfu", "hfu", "tokens_per_s", "time_breakdown_s", "memory_per_gpu_bytes",
            "fits", "memory_margin", "grad_accum", "tokens_per_step"} <= set(out)
    assert {"compute", "tp_comm", "cp_comm", "pp_bubble", "pp_p2p", "dp_exposed", "optimizer",
            "embedding_lm_head"} == set(out["time_breakdown_s"])
    assert {"weights", "gradients", "optimizer", "model_state", "activations", "logits",
            "comm_buffers", "framework_overhead", "total"} == set(out["memory_per_gpu_bytes"])
    with pytest.raises(SpecError) as err:
        estimate_layout(seed_model, seed_cluster, seed_training, seed_layout.model_copy(update={"dp": 128}))
    assert any(p.field == "layout" and "1024 GPUs" in p.reason for p in err.value.problems)


def test_unfused_attention_costs_time_and_memory(seed_model, seed_cluster, seed_training):
    # The unfused kernel stores s x s softmax output (Korthikanti eq. 1's quadratic term) and
    # moves the scores through HBM; FlashAttention does neither and skips masked blocks.
    layout = LayoutSpec(tp=8, dp=64, zero_stage=1, sequence_parallel=True, recompute="none")
    flash = estimate_layout(seed_model, seed_cluster, seed_training, layout)
    unfused_training = seed_training.model_copy(update={"attention_kernel": "unfused"})
    unfused = estimate_layout(seed_model, seed_cluster, unfused_training, layout)
    assert unfused.step_time_s > flash.step_time_s
    # 2 bytes x (64/8 heads) x 8192^2 scores per layer x 80 layers, without dropout.
    extra = unfused.memory_per_gpu_bytes["activations"] - flash.memory_per_gpu_bytes["activations"]
    lse = 4 * 8192 * 8 * 80
    assert extra == pytest.approx(2 * 8 * 8192**2 * 80 - lse, rel=1e-9)
