"""Run risk: checkpoint size and write time, Young/Daly interval, interruptions, goodput.

Hand-worked numbers for the seed plan (70B, 512 GPUs, 64 nodes, default storage/failures):
- N = 69,500,936,192 parameters; Megatron torch_dist saves 2 B weights + 8 B optimizer
  (seed recipe, no master copy) = 10 N = 695.009 GB.
- storage: 2,000 GB/s / 16,384 GPUs x 512 = 62.5 GB/s aggregate < 64 nodes x 25 GB/s, so
  write = 695.009 / 62.5 = 11.120 s (synchronous: blocking = write).
- rate = 419 / (16,384 x 54 x 24) = 1.97328e-5 per GPU-hour; M = 3600 x 41,472 / 419 =
  356,322.7 s (21,233,664 GPU-hours / 512 = 41,472).
- restart: the recommended layout has DP 64, so a restart reads 2N x 64 + 8N = 136 N =
  9,452.13 GB at 62.5 GB/s = 151.23 s; R = 300 + 600 + 151.23 = 1,051.23 s.
- a = 1 - (1,051.23 + 5.56) / 356,322.7 = 0.997034; tau* = sqrt(11.12^2 + 2 a 11.12 M) - 11.12
  = sqrt(123.7 + 7,901,195) - 11.12 = 2,799.8 s.
- wall / work = (1 + 11.12/2,799.8) / (1 - (1,051.23 + (2,799.8 + 11.12)/2) / M)
  = 1.0039717 / 0.9931054 = 1.010942: goodput 98.918%; interruptions = wall / M.
"""
from __future__ import annotations

import math

import pytest

from solver.cost.checkpoint import checkpoint_cost
from solver.cost.risk import FailureModel, optimal_interval_s, run_risk, wall_factor
from solver.specs import LayoutSpec, PrecisionRecipe
from topology.catalog import load_cluster

N_SEED = 69_500_936_192
M_SEED = 3600 * 41_472 / 419


@pytest.fixture(scope="module")
def risk(seed_model, seed_cluster, seed_training):
    from solver.plan import build_plan

    return build_plan(seed_model, seed_cluster, seed_training)["run_risk"]


def test_seed_plan_run_risk_by_hand(risk):
    c, f, e = risk["checkpoint"], risk["failures"], risk["expected"]
    assert c["bytes"] == 10 * N_SEED
    assert c["write_gb_s"] == pytest.approx(62.5)
    assert c["write_s"] == pytest.approx(11.120, abs=1e-3) == c["blocking_s"]
    assert f["mtbi_s"] == pytest.approx(M_SEED, rel=1e-9)
    assert c["load_s"] == pytest.approx(151.23, abs=0.01)
    assert f["restart_s"] == pytest.approx(1051.23, abs=0.01)
    assert risk["interval_s"] == pytest.approx(2799.8, abs=0.1)
    assert risk["goodput"] == pytest.approx(1 / 1.010942, rel=1e-5)
    assert risk["wall_s"] == pytest.approx(risk["work_s"] * 1.010942, rel=1e-5)
    assert e["interruptions"] == pytest.approx(risk["wall_s"] / M_SEED, rel=1e-9)
    assert risk["gpu_hours"] == pytest.approx(risk["wall_s"] * 512 / 3600)
    # The work is the recommended layout's predicted run (steps x step time).
    assert risk["layout"] == "recommended" and risk["work_basis"] == "predicted step time"


def test_seed_markdown_prints_the_run_risk(seed_model, seed_cluster, seed_training):
    from service.render_md import render_plan
    from solver.plan import build_plan

    priced = seed_training.model_copy(update={"price_per_gpu_hour": 2.5, "currency": "EUR"})
    plan = build_plan(seed_model, seed_cluster, priced)
    md = render_plan(plan)
    r = plan["run_risk"]
    section = md[md.index(". Run risk"):md.index(". Failure checks")]
    for text in ("695.0 GB", "11.1 s", f"{r['interval_s']:,.0f} s",
                 f"{r['expected']['interruptions']:.1f} interruptions",
                 f"{r['goodput']:.1%}", f"{r['gpu_hours']:,.0f} GPU-hours", f"{r['days']:,.2f} days", "EUR"):
        assert text in section, text
    assert r["cost"] == pytest.approx(2.5 * r["gpu_hours"])


def _model(**kw) -> FailureModel:
    base = {"gpus": 1024, "interruptions_per_gpu_hour": 2e-5, "blocking_s": 30.0, "lag_s": 0.0, "restart_s": 600.0}
    return FailureModel(**{**base, **kw})


@pytest.mark.parametrize("kw", [{}, {"blocking_s": 200.0}, {"restart_s": 3000.0, "gpus": 16384},
                                {"lag_s": 50.0, "blocking_s": 2.0}])
def test_young_daly_interval_is_the_closed_form_and_the_minimum(kw):
    m = _model(**kw)
    M, d, R, lag = m.mtbi_s, m.blocking_s, m.restart_s, m.lag_s
    a = 1 - (R + d / 2 + lag) / M
    closed = max(math.sqrt(d * d + 2 * a * d * M) - d, lag)
    tau = optimal_interval_s(m)
    assert tau == pytest.approx(closed, rel=1e-12)
    best = wall_factor(m, tau)
    for step in (0.9, 0.99, 0.999, 1.001, 1.01, 1.1):
        assert wall_factor(m, tau * step) > best


def test_young_limit_when_checkpoints_and_restarts_are_short():
    # delta = 10 s, R = 0, M = 1e6 s: Young's sqrt(2 delta M) = 4,472 s; Daly's -delta term
    # and the a-correction move it by < 0.3%.
    m = FailureModel(gpus=1, interruptions_per_gpu_hour=3600 / 1e6, blocking_s=10.0, lag_s=0.0, restart_s=0.0)
    assert m.mtbi_s == pytest.approx(1e6)
    assert optimal_interval_s(m) == pytest.approx(math.sqrt(2 * 10 * 1e6), rel=3e-3)


def test_llama3_interruptions_by_construction():
    """The default rate is Llama 3 405B's (Dubey et al. 2024, Sec. 3.3.4): 16,384 H100 for
    54 days expect 419 interruptions (within 20% by construction: exactly, up to rounding)."""
    cluster = load_cluster("dgx-h100-superpod")
    m = _model(gpus=16_384, interruptions_per_gpu_hour=cluster.failures.interruptions_per_gpu_hour)
    assert 54 * 86_400 / m.mtbi_s == pytest.approx(419, rel=1e-9)
    assert abs(54 * 86_400 / m.mtbi_s - 419) <= 0.2 * 419


def test_no_progress_and_no_failures():
    stuck = _model(gpus=10**6, restart_s=10_000.0)  # M = 180 s < R: the run never ends
    assert math.isinf(run_risk(stuck, 1e6).wall_s) and run_risk(stuck, 1e6).goodput == 0.0
    safe = _model(interruptions_per_gpu_hour=0.0)
    r = run_risk(safe, 1e6)
    assert r.interruptions == 0 and r.goodput == 1.0 and math.isinf(r.interval_s)


def test_checkpoint_per_framework_and_async():
    """torchtitan with FP32 master weights saves them as the weights (4 + 8 B/param); Megatron
    and DeepSpeed save 2 B weights + 12 B optimizer (master + moments). DeepSpeed's weights
    come only from the DP writer ranks: TP8 PP2 -> 2 nodes x 25 GB/s = 50 GB/s for 2N bytes."""
    cluster = load_cluster("seed-512")
    recipe = PrecisionRecipe(master_weights=True)
    layout = LayoutSpec(tp=8, pp=2, dp=32, zero_stage=1)
    n = 10**9
    mc = checkpoint_cost(n, recipe, cluster, layout, "megatron-core")
    tt = checkpoint_cost(n, recipe, cluster, layout, "torchtitan")
    ds = checkpoint_cost(n, recipe, cluster, layout, "deepspeed")
    assert mc.bytes == ds.bytes == 14 * n and tt.bytes == 12 * n
    assert mc.write_s == pytest.approx(14 / 62.5)
    assert ds.write_s == pytest.approx(max(14 / 62.5, 2 / 50))
    # Asynchronous: training blocks for the per-GPU share (14 GB / 512) over 25 GB/s.
    am = checkpoint_cost(n, recipe, cluster, layout, "megatron-core", asynchronous=True)
    assert am.blocking_s == pytest.approx(14e9 / 512 / 25e9) and am.write_s == mc.write_s
