"""Step-time model: relative effects, decomposition agreement, the seed layout's fit."""
import dataclasses

import pytest

from solver.cost import terms as T
from solver.cost.estimate import estimate_layout, make_context
from solver.cost.step import compose_memory, compose_step_time, memory_terms, time_terms
from solver.cost.terms import layers_on_rank
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

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
    assert all(a > b for a, b in zip(rates, rates[1:])), rates


def test_seed_layout_fits_80gb_with_margin(seed_model, seed_cluster, seed_training, seed_layout):
    est = estimate_layout(seed_model, seed_cluster, seed_training, seed_layout)
    mem = est.memory_per_gpu_bytes
    # Model state: the seed's 36.1 GB (17.5 weights + 17.5 gradients + 1.1 optimizer), within 1%.
    assert mem["model_state"] == pytest.approx(36.1e9, rel=0.01)
    assert est.grad_accum == 8 and est.tokens_per_step == 4_194_304
    # Fits under 90% of 80 GB (options.memory_margin_fraction) with at least 5 GB to spare.
    assert est.fits
    assert est.memory_margin.usable_bytes == pytest.approx(72e9)
    assert est.memory_margin.headroom_bytes > 5e9
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
    ctx = make_context(seed_model, seed_cluster, seed_training)
    args = dict(tp=8, cp=1, dp=64, pp=1, grad_accum=8)
    z1, _ = T.dp_comm_s(ctx, zero=1, **args)
    z3, _ = T.dp_comm_s(ctx, zero=3, **args)
    z0, _ = T.dp_comm_s(ctx, zero=0, **args)
    assert z3 > z1 and z0 == pytest.approx(z1, rel=0.02)   # AR = RS + AG in volume (bf16 both)


def test_cost_options_reject_impossible_fractions():
    from solver.cost.options import CostOptions
    from solver.errors import SpecError
    with pytest.raises(SpecError):
        CostOptions(gemm_peak_fraction=1.5)
    assert dataclasses.replace(CostOptions(), hbm_fraction=0.9).hbm_fraction == 0.9


def test_zero_stages_expose_monotonically_more_dp_time(seed_model, seed_cluster, seed_training):
    ctx = make_context(seed_model, seed_cluster, seed_training)
    exposed = [T.dp_exposed_s(ctx, tp=4, cp=1, dp=128, pp=1, zero=z, grad_accum=8) for z in range(4)]
    assert exposed[0] == pytest.approx(exposed[1], rel=0.02)       # AR = RS + AG in volume
    assert exposed[1] <= exposed[2] <= exposed[3]


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
