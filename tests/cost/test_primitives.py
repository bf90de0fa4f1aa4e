"""GEMM, attention and collective primitives against hand derivations."""
import pytest

from solver.cost.communication import allgather_s, allreduce_s, bucketed_s, p2p_s, reduce_scatter_s
from solver.cost.compute import attention_core_s, gemm_efficiency, gemm_time_s, layer_shape
from solver.cost.options import CostOptions
from topology.groups import GroupLink
from topology.spec import GpuSpec

GPU = GpuSpec(name="g", memory_gb=80, peak_tflops=1000, hbm_gb_s=3350)
OPT = CostOptions(gemm_peak_fraction=0.8, attention_peak_fraction=0.5, hbm_fraction=1.0,
                gemm_concurrent_tiles=132)


def link(n, bw=100.0, lat=1e-5):
    return GroupLink("dp", n, 1, bw, lat, True, 1)


def test_ring_collectives():
    # All-reduce of 1 GB over 8 ranks at 100 GB/s busbw, 10 us per step:
    # 2*7*10us + 2*(7/8)*1e9/1e11 = 140 us + 17.5 ms.
    assert allreduce_s(1e9, link(8)) == pytest.approx(140e-6 + 0.0175)
    # Reduce-scatter / all-gather: half of that (Thakur et al. 2005).
    assert reduce_scatter_s(1e9, link(8)) == pytest.approx(70e-6 + 0.00875)
    assert allgather_s(1e9, link(8)) == reduce_scatter_s(1e9, link(8))
    assert allreduce_s(1e9, link(1)) == 0.0
    assert p2p_s(1e9, link(2)) == pytest.approx(1e-5 + 0.01)


def test_bucketing_pays_latency_per_bucket():
    # 1 GB in 100 MB buckets over 8 ranks: each bucket 2*7*10us + 2*(7/8)*1e8/1e11 = 140 us
    # + 1.75 ms; ten of them, every one paying the latency term.
    total, last = bucketed_s(1e9, 1e8, link(8), allreduce_s)
    assert total == pytest.approx(10 * (140e-6 + 1.75e-3))
    assert last == pytest.approx(140e-6 + 1.75e-3)


def test_tile_and_wave_quantization():
    # 132 x 128-by-128 tiles fill exactly one wave: no quantization loss.
    assert gemm_efficiency(128 * 12, 128 * 11, GPU, OPT) == pytest.approx(0.8)
    # One row past a tile boundary pads a whole tile row: 1537/ (13*128) of the rows are real,
    # and 13*11 = 143 tiles need 2 waves; the best tile shape is still worse than aligned.
    assert gemm_efficiency(128 * 12 + 1, 128 * 11, GPU, OPT) < 0.8 * 0.95


def test_gemm_roofline():
    # Large square GEMM is compute bound: 2*8192^3 / (0.8 * 1e15 * wave efficiency), where
    # 64 x 64 = 4096 tiles of 128x128 take 32 waves of 132: 4096 / 4224 of the last wave used.
    assert gemm_time_s(8192, 8192, 8192, GPU, OPT) == pytest.approx(2 * 8192**3 / (0.8e15 * 4096 / 4224))
    # A skinny GEMM (weight-read dominated) is HBM bound: bytes 2*(m k + k n + m n) over
    # 3.35 TB/s = 2.57 ms, against 2*128*65536^2 FLOPs / (0.8 PFLOP/s x 512/528) = 1.42 ms.
    m, n, k = 128, 65536, 65536
    assert gemm_time_s(m, n, k, GPU, OPT) == pytest.approx(2 * (m * k + k * n + m * n) / 3.35e12)


def test_flash_attention_causal_and_backward(seed_model):
    sh = layer_shape(seed_model, 8192, tp=8, cp=1, micro_batch=1)
    fwd, bwd = attention_core_s(sh, "flash", GPU, OPT)
    # Forward 4 * s^2 * (H/tp) * dh FLOPs, halved by the causal mask, at 50% of peak.
    assert fwd == pytest.approx(0.5 * 4 * 8192**2 * 8 * 128 / 0.5e15)
    assert bwd == pytest.approx(2.5 * fwd)    # FA-2: five matmuls against two
    ufwd, _ = attention_core_s(sh, "unfused", GPU, OPT)
    assert ufwd > fwd                         # no causal skip, plus s x s HBM traffic
