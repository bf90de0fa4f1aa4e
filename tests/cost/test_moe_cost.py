"""MoE cost terms against hand-derived numbers: per-expert tokens, all-to-all bytes and time
over the EP group's links (inside one NVLink domain vs across nodes), the grouped-GEMM
roofline, load imbalance, expert memory sharded by EP/ETP/expert-DP, the estimate, and
DeepSeek-V3's MLA shapes and multi-token-prediction module.

Model: Mixtral 8x7B (tests/fixtures/hf/mixtral-8x7b): D = 4096, L = 32 (all MoE), E = 8,
top-2, expert width 14336 (SwiGLU), 32 heads / 8 KV heads, vocab 32000 untied. Cluster
seed-512: 64 nodes x 8 GPUs, NVLink 450 GB/s and 3 us, inter-node 45 GB/s and 10 us.
Training seed-300b: seq 8192, 4,194,304 tokens per step.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from solver.cost import compute as C
from solver.cost import moe_layer as ML
from solver.cost.estimate import estimate_layout, make_context
from solver.cost.moe_comm import dense_and_expert_params, dispatch_bytes, expert_links, moe_layer_comm
from solver.cost.memory import mla_stored_bytes
from solver.cost.moe_memory import moe_layer_activation_extra_bytes, moe_model_state
from solver.cost.mtp import mtp_s
from solver.cost.options import DEFAULT_OPTIONS
from solver.cost.step import time_terms
from solver.presets import load_layout, load_model, load_training
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
MIXTRAL = load_model(str(HF / "mixtral-8x7b" / "config.json"))
SEED = load_cluster("seed-512")
TRAIN = load_training("seed-300b")


def ctx_of(training=TRAIN):
    return make_context(MIXTRAL, SEED, training)


def test_tokens_per_expert_per_micro_batch():
    # t = micro_batch x seq / (cp tp); M_e = t x k x ep x etp / E.
    # tp 1, ep 8: t = 8192, M_e = 8192 x 2 x 8 / 8 = 16,384 rows; busiest at 1.25: 20,480.
    sh = ML.expert_shape(MIXTRAL, 8192, 1.25, tp=1, cp=1, micro_batch=1, ep=8, etp=1)
    assert (sh.tokens, sh.rows_per_expert, sh.busy_rows, sh.local_experts) == (8192, 16384, 20480, 1)
    # tp 2 with SP, etp 1: each rank routes 4096 tokens: M_e = 4096 x 2 x 8 / 8 = 8,192;
    # etp 2 gathers its peer's too: 16,384, each GEMM 14336 / 2 = 7168 wide.
    assert ML.expert_shape(MIXTRAL, 8192, 1.0, tp=2, cp=1, micro_batch=1, ep=8, etp=1).rows_per_expert == 8192
    sh2 = ML.expert_shape(MIXTRAL, 8192, 1.0, tp=2, cp=1, micro_batch=1, ep=8, etp=2)
    assert (sh2.rows_per_expert, sh2.width) == (16384, 7168)
    # ep 2: 4 local experts, M_e = 8192 x 2 x 2 / 8 = 4,096 (the 16,384 routed rows / 4).
    sh3 = ML.expert_shape(MIXTRAL, 8192, 1.0, tp=1, cp=1, micro_batch=1, ep=2, etp=1)
    assert (sh3.local_experts, sh3.rows_per_expert) == (4, 4096)
    # ep 1: each rank runs all 8 experts on its own 16,384 routed rows: no rank to wait for.
    assert ML.expert_shape(MIXTRAL, 8192, 1.25, tp=1, cp=1, micro_batch=1, ep=1, etp=1).busy_rows == 2048


def test_a2a_bytes_and_time_inside_one_nvlink_domain():
    # Send buffer: 8192 tokens x 2 copies x 4096 x 2 bytes = 134,217,728; 7/8 leaves the rank.
    ctx = ctx_of()
    assert dispatch_bytes(ctx, tp=1, cp=1, micro_batch=1) == 134_217_728
    # tp 1, ep 8: the EP group is 8 neighbouring ranks, one node: all-to-all at 450 GB/s per
    # rank (7 NVLink peers sharing 450), (p-1) alpha + (p-1)/p n / B
    # = 7 x 3e-6 + 7/8 x 134,217,728 / 450e9 = 2.1e-5 + 2.60978e-4 = 2.81978e-4 s.
    c = moe_layer_comm(ctx, tp=1, cp=1, sp=False, recompute="none", micro_batch=1, ep=8, etp=1, dp=128, pp=4)
    assert c.a2a_one_s == pytest.approx(2.1e-5 + 7 / 8 * 134_217_728 / 450e9, rel=1e-9)
    assert c.a2a_count == 4 and c.etp_s == 0.0  # dispatch + combine, forward and backward
    # Routing: the FP32 probabilities' all-to-all (8192 x 2 x 4 = 65,536 bytes) forward and
    # backward, 7 x 3e-6 + 7/8 x 65,536 / 450e9 each; the token counts' all-gather over the
    # 8-rank TP x EP group (8 experts x 8 bytes x 8 ranks = 512 bytes) forward once.
    probs = 2.1e-5 + 7 / 8 * 65_536 / 450e9
    assert c.routing_s == pytest.approx(2 * probs + 2.1e-5 + 7 / 8 * 512 / 450e9, rel=1e-9)
    assert c.a2a_s == pytest.approx(4 * c.a2a_one_s + c.routing_s, rel=1e-12)
    full = moe_layer_comm(ctx, tp=1, cp=1, sp=False, recompute="full", micro_batch=1, ep=8, etp=1, dp=128, pp=4)
    assert full.a2a_count == 6  # full recompute repeats the two forward all-to-alls


def test_a2a_across_nodes_is_slower_than_inside_a_domain():
    # tp 8 (SP), etp 8: the EP group's 8 ranks sit at stride 8, one per node: each rank's 7
    # peers share its 45 GB/s NIC: 45 GB/s per rank, alpha 10 us. Send buffer 1024 tokens x 2
    # x 4096 x 2 = 16,777,216 bytes: 7 x 1e-5 + 7/8 x 16,777,216 / 45e9 = 3.96214e-4 s.
    ctx = ctx_of()
    links = expert_links(ctx, etp=8, ep=8, edp=8, pp=1)
    assert links["ep"].crosses_nodes and links["ep"].stride == 8
    c = moe_layer_comm(ctx, tp=8, cp=1, sp=True, recompute="none", micro_batch=1, ep=8, etp=8, dp=64, pp=1)
    assert c.a2a_one_s == pytest.approx(7e-5 + 7 / 8 * 16_777_216 / 45e9, rel=1e-9)
    # etp 1 keeps the same EP size on one node's NVLink: 7 x 3e-6 + 7/8 x 16,777,216 / 450e9.
    inside = moe_layer_comm(ctx, tp=8, cp=1, sp=True, recompute="none", micro_batch=1, ep=8, etp=1, dp=64, pp=1)
    assert inside.a2a_one_s == pytest.approx(2.1e-5 + 7 / 8 * 16_777_216 / 450e9, rel=1e-9)
    assert inside.a2a_one_s < c.a2a_one_s / 5
    # Expert-DP group of tp 8 x dp 64 with ep 8, etp 1: 64 ranks at stride 8 (ETP 1 x EP 8).
    edp = expert_links(ctx, etp=1, ep=8, edp=64, pp=1)["edp"]
    assert (edp.size, edp.stride, edp.crosses_nodes) == (64, 8, True)


def test_grouped_gemm_roofline_small_m_is_weight_bound():
    # 16 rows x 14336 x 4096 on the seed GPU (1000 TFLOP/s, 3350 GB/s): HBM bytes
    # 2 (16 x 4096 + 4096 x 14336 + 16 x 14336) = 118,030,336 at 3350e9 x 0.55 -> 6.4060e-5 s;
    # compute 2 x 16 x 14336 x 4096 = 1.879e9 FLOPs at 0.74 x (16/128 tile) x (112/132 wave)
    # of peak -> 2.394e-5 s. Memory-bound: the HBM time.
    gpu = SEED.gpu
    t = ML.grouped_gemm_time_s(1, 16, 14336, 4096, gpu, DEFAULT_OPTIONS)
    assert t == pytest.approx(118_030_336 / (3350e9 * 0.55), rel=1e-12)
    # 8192 rows: 2 x 8192 x 14336 x 4096 = 9.6207e11 FLOPs; tiles 64 x 112 = 7168 = 54.3 waves
    # of 132 -> wave efficiency 7168 / (55 x 132) = 0.98733; 0.74 x 0.98733 of 1e15 -> 1.31674e-3 s
    # (HBM 2 (33.5M + 58.7M + 117.4M) / 1.8425e12 = 2.27e-4 s: compute-bound).
    big = ML.grouped_gemm_time_s(1, 8192, 14336, 4096, gpu, DEFAULT_OPTIONS)
    assert big == pytest.approx(2 * 8192 * 14336 * 4096 / (1e15 * 0.74 * 7168 / (55 * 132)), rel=1e-12)
    # Eight groups of 16 rows read eight weight matrices: 8x the single time.
    assert ML.grouped_gemm_time_s(8, 16, 14336, 4096, gpu, DEFAULT_OPTIONS) == pytest.approx(8 * t, rel=1e-12)


def test_load_imbalance_basis_and_overrides():
    assert ML.load_imbalance(TRAIN) == (1.25, ML.LOAD_IMBALANCE_BASIS)
    cf = TRAIN.model_copy(update={"moe_capacity_factor": 1.0})
    assert ML.load_imbalance(cf)[0] == 1.0
    stated = TRAIN.model_copy(update={"moe_capacity_factor": 1.0, "moe_load_imbalance": 1.5})
    assert ML.load_imbalance(stated)[0] == 1.5
    # The busiest rank's rows set the expert GEMMs' time: more imbalance, slower MoE layer.
    lo = load_layout({"tp": 1, "pp": 4, "dp": 128, "ep": 8})
    times = [time_terms(ctx_of(t), lo, 4).moe_compute_s for t in (cf, TRAIN, stated)]
    assert times[0] < times[1] < times[2]


def test_expert_state_sharded_by_ep_etp_and_expert_dp():
    # Routed experts: 3 x 4096 x 14336 = 176,160,768 per expert x 8 x 32 layers =
    # 45,097,156,608; the rest (embedding + LM head 262,144,000, 32 x (attention 41,943,040
    # + router 32,768 + norms 8,192), final norm 4,096) = 1,605,636,096.
    ctx = ctx_of()
    assert dense_and_expert_params(ctx) == (1_605_636_096, 45_097_156_608)
    # Megatron-Core distributed optimizer (ZeRO-1): 2 (BF16 weights) + 4 (FP32 main grads)
    # whole, 12 (FP32 master + two moments) / d. tp 1, pp 4, dp 128, ep 8: experts
    # 45,097,156,608 / (8 x 4) = 1,409,286,144 per rank, d = expert-DP = 128 / 8 = 16;
    # dense 1,605,636,096 / 4 = 401,409,024, d = 128.
    s = moe_model_state(ctx, tp=1, pp=4, dp=128, cp=1, zero=1, ep=8, etp=1)
    assert s.weights == pytest.approx(2 * (1_409_286_144 + 401_409_024))
    assert s.gradients == pytest.approx(4 * (1_409_286_144 + 401_409_024))
    assert s.optimizer == pytest.approx(12 * 1_409_286_144 / 16 + 12 * 401_409_024 / 128)
    # etp 2 at tp 2 halves the expert share; expert-DP 256 / (8 x 2) = 16 again.
    s2 = moe_model_state(ctx, tp=2, pp=4, dp=128, cp=1, zero=1, ep=8, etp=2)
    assert s2.weights == pytest.approx(2 * (1_409_286_144 / 2 + 401_409_024 / 2))
    assert s2.optimizer == pytest.approx(12 * 1_409_286_144 / 2 / 16 + 12 * 401_409_024 / 2 / 128)


def test_moe_layer_activations_beyond_a_dense_layer():
    # tp 1, ep 8, seq 8192, mb 1, imbalance 1.25: t = 8192 tokens, R = 20,480 busy rows on the
    # one local expert. Router logits + probabilities FP32: 8 x 8192 x 8 = 524,288; dispatched
    # rows 2 x 20,480 x 4096 = 167,772,160; fc1 outputs (2) + activation output, SwiGLU:
    # 2 x 20,480 x 14336 x 3 = 1,761,607,680; probabilities per row 4 x 20,480 = 81,920; less the
    # dense FFN's 2 x 8192 x 14336 x 3 = 704,643,072 -> 1,225,342,976 bytes per layer.
    ctx = ctx_of()
    kw = {"tp": 1, "cp": 1, "micro_batch": 1, "ep": 8, "etp": 1}
    assert moe_layer_activation_extra_bytes(ctx, recompute="none", **kw) == 1_225_342_976
    assert moe_layer_activation_extra_bytes(ctx, recompute="full", **kw) == 0.0  # layer input only


def test_moe_estimate_reports_its_figures_and_dense_has_none():
    est = estimate_layout(MIXTRAL, SEED, TRAIN, load_layout({"tp": 1, "pp": 4, "dp": 128, "ep": 8, "zero_stage": 1,
                                                             "recompute": "full"}))
    m = est.moe
    assert (m["ep"], m["etp"], m["expert_dp"], m["tokens_per_expert_per_microbatch"]) == (8, 1, 16, 16384)
    assert m["a2a_bytes_leaving_rank"] == 134_217_728 * 7 / 8 and m["load_imbalance"] == 1.25
    assert not m["ep_group"]["crosses_nodes"] and m["moe_layers_on_busiest_rank"] == 8
    assert est.time_breakdown_s["moe_comm"] > 0
    assert sum(est.time_breakdown_s.values()) == pytest.approx(est.step_time_s, rel=1e-12)
    assert any("load imbalance" in n for n in est.notes)
    # MFU counts active FLOPs: 6 x 12.88e9 active parameters, not the 46.7B total.
    assert est.model_flops_per_step < 6 * 13e9 * est.tokens_per_step * 1.2
    dense = estimate_layout(load_model("seed-70b"), SEED, TRAIN, load_layout({"tp": 8, "pp": 1, "dp": 64}))
    assert dense.moe == {} and "moe_comm" not in dense.time_breakdown_s


DSV3 = load_model(str(HF / "deepseek-v3" / "config.json"))


def test_mla_gemms_are_mla_shapes_split_over_tp():
    # DeepSeek-V3 MLA: D 7168, r_q 1536, r_kv 512, d_rope 64, d_nope 128, d_v 128, H 128.
    # Weights per layer (no latent norms): q down 7168 x 1536 = 11,010,048; q up
    # 1536 x 128 x 192 = 37,748,736; kv down 7168 x 576 = 4,128,768; kv up 512 x 128 x 256 =
    # 16,777,216; output 128 x 128 x 7168 = 117,440,512; sum 187,105,280 = MACs per token.
    sh = C.layer_shape(DSV3, 4096, 1, 1, 1)
    assert sum(m * n * k for m, n, k in C.mla_gemms(DSV3, sh, 1)) == 4096 * 187_105_280
    # tp 8: the down projections run on the 512-token SP shard at full width, the others
    # column/row-split: every rank does 1/8 of the MACs.
    sh8 = C.layer_shape(DSV3, 4096, 8, 1, 1)
    assert sum(m * n * k for m, n, k in C.mla_gemms(DSV3, sh8, 8)) == 4096 * 187_105_280 // 8
    # Attention core: 4 M S (H/tp) dh with dh = (192 + 128) / 2 = 160 = 2 M S H (d_qk + d_v).
    assert (sh.head_dim, sh.heads, sh.q_width) == (160, 128, 128 * 192)
    # V2-Lite has no q latent: a full (M, H d_qk, D) query projection instead.
    lite = load_model(str(HF / "deepseek-v2-lite" / "config.json"))
    a = lite.mla
    g = C.mla_gemms(lite, C.layer_shape(lite, 4096, 1, 1, 1), 1)
    assert (4096, lite.heads * a.qk_head_dim, lite.hidden) in g and len(g) == 4


def test_mla_stored_activations():
    # Per token at tp 1 (rep 1): down outputs 1536 + 512 + 64 = 2,112; normed latents
    # 1536 + 512 = 2,048; Q and K 2 x 128 x 192 = 49,152; V and core output 2 x 128 x 128 =
    # 32,768; 86,080 BF16 values = 172,160 bytes.
    assert mla_stored_bytes(DSV3, 1.0, tp=1, rep=1.0) == 172_160


def test_mtp_modules_add_to_the_last_stage_and_their_params_to_the_state():
    train = load_training({"seq_len": 4096, "global_batch_tokens": 4096 * 1024})
    lo = load_layout({"tp": 1, "pp": 16, "dp": 32, "ep": 32})
    ctx = make_context(DSV3, SEED, train)
    no_mtp = make_context(DSV3.model_copy(update={"mtp_layers": 0}), SEED, train)
    with_mtp, without = time_terms(ctx, lo, 32), time_terms(no_mtp, lo, 32)
    extra = mtp_s(ctx, tp=1, cp=1, sp=False, recompute="none", micro_batch=1, ep=32, etp=1, dp=32, pp=16)
    assert extra > 0 and with_mtp.head_extra_s == pytest.approx(without.head_extra_s + extra, rel=1e-12)
    # It runs one more (MoE) layer and the LM head again: more than one layer's time.
    assert extra > with_mtp.layer_compute_s + with_mtp.moe_compute_s
    dense, routed = dense_and_expert_params(ctx)
    assert dense + routed == ctx.params.total + ctx.params.mtp
    assert routed == (58 + 1) * 256 * 3 * 7168 * 2048  # 58 MoE layers + the MTP layer's experts


def test_busiest_rank_moe_layers():
    # DeepSeek-style: 3 dense then MoE, 61 layers on pp 16: chunks of ceil(61/16) = 4; the
    # first rank holds layers 0-3 (1 MoE), every other full rank 4 MoE layers.
    mask = tuple(i >= 3 for i in range(61))
    assert ML.busiest_moe_layers(mask, 16, 1) == 4
    assert ML.moe_layers_per_rank(mask, (4,) * 15 + (1,), 16)[:2] == [1, 4]
    # Llama-4-Maverick-style interleave (every 2nd layer MoE), 48 layers on pp 4: 12 layers, 6 MoE.
    assert ML.busiest_moe_layers(tuple((i + 1) % 2 == 0 for i in range(48)), 4, 1) == 6
    assert ML.busiest_moe_layers((), 4, 1) == 0
