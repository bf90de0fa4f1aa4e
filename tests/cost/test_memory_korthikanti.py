"""Activation memory against Korthikanti et al. 2022 (arXiv:2205.05198), exactly.

The paper's equations assume a GPT layer (FFN width 4h, no GQA, GeLU), the unfused
attention path with attention and hidden dropout, 2-byte activations and 1-byte masks.
Sec. 4.1 eq. 1: sbh(34 + 5as/h); Sec. 4.2.1 eq. 2 (TP): sbh(10 + 24/t + 5as/(ht));
Sec. 4.2.2 eq. 3 (TP + SP): sbh/t (34 + 5as/h); Sec. 5 selective recompute with SP:
34 sbh/t; full recompute: 2sbh per layer (the layer input), /t with SP.
"""
import pytest

from solver.cost.memory import (
    activation_bytes, in_flight_microbatches, layer_activation_bytes, layer_activation_parts,
)
from solver.cost.options import CostOptions
from solver.cost.terms import CostContext
from solver.specs import ModelSpec, TrainingSpec
from topology.catalog import load_cluster

# GPT-3 175B (Korthikanti Table 3): h 12288, a 96, L 96, s 2048.
GPT = ModelSpec(name="gpt-175b", layers=96, hidden=12288, ffn_hidden=4 * 12288, ffn_gated=False,
                heads=96, kv_heads=96, head_dim=128, vocab=51200, tied_embeddings=True,
                position_embedding="learned", norm="layernorm", bias=True)
S, H, A = 2048, 12288, 96


@pytest.fixture(scope="module")
def ctx():
    training = TrainingSpec(seq_len=S, global_batch_tokens=S * 64, attention_kernel="unfused")
    return CostContext(GPT, load_cluster("seed-512"), training, CostOptions(dropout=True))


def parts(tp, sp, b=1, kernel="unfused", dropout=True):
    return layer_activation_parts(GPT, S, tp=tp, cp=1, sp=sp, micro_batch=b, kernel=kernel, dropout=dropout)


@pytest.mark.parametrize("b", [1, 4])
def test_eq1_single_gpu(b):
    sbh = S * b * H
    assert parts(1, False, b).total == pytest.approx(sbh * (34 + 5 * A * S / H), rel=1e-12)
    # eq. 1's split: attention 11sbh + 5as^2b, MLP 19sbh, norms 4sbh.
    p = parts(1, False, b)
    assert p.attention + p.attention_core == pytest.approx(11 * sbh + 5 * A * S * S * b, rel=1e-12)
    assert p.mlp == pytest.approx(19 * sbh, rel=1e-12)
    assert p.norms == pytest.approx(4 * sbh, rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_eq2_tensor_parallel(t):
    sbh = S * H
    assert parts(t, False).total == pytest.approx(sbh * (10 + 24 / t + 5 * A * S / (H * t)), rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_eq3_tensor_and_sequence_parallel(t):
    sbh = S * H
    assert parts(t, True).total == pytest.approx(sbh / t * (34 + 5 * A * S / H), rel=1e-12)


@pytest.mark.parametrize("t", [1, 8])
def test_selective_and_full_recompute(ctx, t):
    sbh = S * H
    sp = t > 1
    sel = layer_activation_bytes(ctx, tp=t, cp=1, sp=sp, recompute="selective", micro_batch=1)
    assert sel == pytest.approx(34 * sbh / t, rel=1e-12)          # Sec. 5: 34 sbh / t
    full = layer_activation_bytes(ctx, tp=t, cp=1, sp=sp, recompute="full", micro_batch=1)
    assert full == pytest.approx(2 * sbh / t, rel=1e-12)          # layer input only


def test_first_stage_holds_p_microbatches_of_l_over_p_layers(ctx):
    # 1F1B (Sec. 4.2.3): first stage = L/p layers x p micro-batches = L layers' worth.
    p, t = 8, 8
    per_layer = layer_activation_bytes(ctx, tp=t, cp=1, sp=True, recompute="selective", micro_batch=1)
    total = activation_bytes(ctx, tp=t, cp=1, sp=True, recompute="selective", micro_batch=1,
                             pp=p, vpp=1, grad_accum=64)
    embed = p * (8 * S + S * H / t)   # token ids + embedding dropout mask, per in-flight micro-batch
    assert total == pytest.approx(per_layer * GPT.layers + embed, rel=1e-12)


def test_interleaved_penalty():
    # Interleaved schedule multiplies by 1 + (p-1)/(p v) (Sec. 4.2.3; Megatron theoretical memory).
    assert in_flight_microbatches(8, 3, 64) == pytest.approx(8 * (1 + 7 / 24))
    # Interleaved with m = p: the first rank's warm-up, (v-1) p + 2 (p-1) + 1 = 23 chunks of
    # L/(p v) at p 8, v 2, would be 11.5 stage-equivalents, but the step has only m v = 16
    # chunks (Megatron get_pp_rank_microbatches caps the warm-up there): 8 micro-batches.
    assert in_flight_microbatches(8, 2, 8) == 8
    assert in_flight_microbatches(8, 2, 16) == pytest.approx(8 + 7 / 2)
    assert in_flight_microbatches(8, 1, 4) == 4          # fewer micro-batches than stages
    assert in_flight_microbatches(1, 1, 64) == 1


def test_flash_drops_the_quadratic_term():
    # FlashAttention keeps no s x s tensor: only an FP32 log-sum-exp per query and head.
    flash = parts(8, True, kernel="flash")
    assert flash.attention_core == pytest.approx(4 * S * A / 8)
    assert flash.total == pytest.approx(parts(8, True).total - parts(8, True).attention_core
                                        + 4 * S * A / 8)


def test_gqa_swiglu_extension():
    # Llama-style layer, no dropout, no TP: norms 4sbh; attention: QKV input 2sbh, Q 2sbh,
    # K and V 2 x 2 s b (K dh), projection input 2sbh; MLP: input 2sbh, gate and up 2 x 2sbF,
    # product 2sbF (derivation in solver/cost/memory.py).
    m = ModelSpec(name="llama", layers=2, hidden=4096, ffn_hidden=14336, ffn_gated=True, heads=32,
                  kv_heads=8, head_dim=128, vocab=128256, tied_embeddings=False)
    s, h, f, kv = 4096, 4096, 14336, 8 * 128
    p = layer_activation_parts(m, s, tp=1, cp=1, sp=False, micro_batch=1, kernel="flash", dropout=False)
    assert p.norms == 4 * s * h
    assert p.attention == 2 * s * h + 2 * s * h + 4 * s * kv + 2 * s * h
    assert p.mlp == 2 * s * h + 6 * s * f
    # CP halves every per-token term (sequence split over ranks).
    p2 = layer_activation_parts(m, s, tp=1, cp=2, sp=False, micro_batch=1, kernel="flash", dropout=False)
    assert p2.total == pytest.approx(p.total / 2)


def test_output_layer_and_loss_six_bytes_per_logit(ctx):
    # Sec. 4.3 counts 4 bytes per logit kept by the output layer and cross-entropy (the FP32
    # softmax); Megatron-Core's peak at the loss is 6: the BF16 logits (2) beside their FP32
    # copy (4) at the end of the forward, the FP32 gradient (4) beside autograd's BF16 cast
    # (2) at the start of the backward (profile memory.logit_bytes, cross_entropy.py
    # d98e8a64). Next to the 2 s b h BF16 input of the LM head. GPT-3 175B, b = 1, t = 8,
    # v = 51200: 2 x 2048 x 12288 + 6 x 2048 x 51200 / 8 = 50,331,648 + 78,643,200
    # = 128,974,848 bytes (102,760,448 at the paper's 4).
    from solver.cost.memory import logits_bytes
    assert logits_bytes(ctx, tp=8, cp=1, micro_batch=1) == 128_974_848
    assert logits_bytes(ctx, tp=8, cp=1, micro_batch=4) == 4 * 128_974_848
    assert logits_bytes(ctx, tp=8, cp=2, micro_batch=1) == 128_974_848 / 2
    paper = ctx.training.model_copy(update={"logit_bytes": 4})
    assert logits_bytes(CostContext(GPT, ctx.cluster, paper, ctx.options), tp=8, cp=1, micro_batch=1) == 102_760_448
