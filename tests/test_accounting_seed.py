"""Seed plan arithmetic (reference/seed-70b-plan.md), each number derived by hand beside it."""
import pytest

from solver.cost.accounting import (
    batch_plan, model_state_bytes, parameter_counts, per_gpu_model_state_bytes,
    ring_allreduce_lower_bound_s, run_time, training_flops,
)
from solver.presets import load_model, load_training
from solver.specs import LayoutSpec

SEED_LAYOUT = LayoutSpec(tp=8, dp=64, zero_stage=1, sequence_parallel=True, recompute="selective")


@pytest.fixture(scope="module")
def seed():
    return load_model("seed-70b"), load_training("seed-300b")


def test_parameters_exact(seed):
    m, _ = seed
    p = parameter_counts(m)
    # per layer: FFN 3*8192*28672 = 704,643,072; attention 2*8192^2 + 2*8192*8*128 = 150,994,944;
    # norms 2*8192 = 16,384 -> 855,654,400; x80 = 68,452,352,000.
    assert p.ffn_per_layer == 704_643_072
    assert p.attention_per_layer == 150_994_944
    assert p.transformer_layers == 80 * (704_643_072 + 150_994_944 + 16_384)
    # embedding 128,000 * 8,192 = 1,048,576,000 (tied: no LM head); final norm 8,192.
    assert p.embedding == 1_048_576_000 and p.lm_head == 0
    assert p.total == 69_500_936_192


def test_model_state_and_flops(seed):
    m, t = seed
    n = parameter_counts(m).total
    # 12 bytes/param x 69.5B = 834.0 GB; the seed's 840 GB uses 70B (within 1%).
    state = model_state_bytes(n, t.precision).total
    assert state == pytest.approx(834.011e9, rel=1e-5)
    assert abs(state - 840e9) / 840e9 < 0.01
    f = training_flops(m, t, n)
    # 6 * 69.5e9 * 300e9 = 1.251e23; 12 * 8192 * 300e9 * 8192 * 80 = 1.933e22.
    assert f.parameter_matmul == pytest.approx(1.251e23, rel=1e-3)
    assert f.attention == pytest.approx(1.933e22, rel=1e-3)
    assert f.total == pytest.approx(1.444e23, rel=1e-3)
    assert f.attention_causal == pytest.approx(f.attention_full / 2)


def test_time_and_batch(seed):
    m, t = seed
    f = training_flops(m, t, parameter_counts(m).total)
    # 1.444e23 / (512 * 1e15 * 0.5) = 5.64e5 s = 6.5 days; x 512 / 3600 = 80,238 GPU-hours.
    r = run_time(f.total, 512, 1e15, t)
    assert r.wall_s == pytest.approx(5.64e5, rel=1e-3)
    assert r.days == pytest.approx(6.53, abs=0.01)
    assert r.gpu_hours == pytest.approx(80_200, rel=2e-3)
    # 64 x 1 x 8 x 8192 = 4,194,304 tokens; ceil(300e9 / 4,194,304) = 71,526 steps.
    b = batch_plan(t, dp=64, micro_batch=1)
    assert (b.grad_accum, b.tokens_per_step, b.steps) == (8, 4_194_304, 71_526)


def test_tp8_zero1_state_and_grad_sync(seed):
    m, t = seed
    n = parameter_counts(m).total
    s = per_gpu_model_state_bytes(n, t.precision, SEED_LAYOUT)
    # weights 2N/8 = 17.375 GB, grads 17.375 GB, Adam 8N/(8*64) = 1.086 GB -> 35.84 GB.
    assert s.weights == pytest.approx(17.375e9, rel=1e-3)
    assert s.total == pytest.approx(35.8e9, rel=2e-3)
    # 2 * 63/64 * 17.375 GB / 45 GB/s = 0.760 s (seed: "about 0.77 s" at 17.5 GB).
    assert ring_allreduce_lower_bound_s(s.gradients, 64, 45) == pytest.approx(0.76, abs=0.005)
