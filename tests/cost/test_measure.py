"""`trainplan calibrate --measure` (service/measure.py): runs on CPU with tiny shapes, numpy when
torch is absent, and writes a profile that --profile accepts."""
from __future__ import annotations

import json

from service.cli import main
from service.measure import Backend, gemm_shapes, measure_copy, pick_backend
from solver.cost.profile import load_profile
from solver.specs import LayoutSpec

SEED = ["--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b"]


def test_gemm_shapes_are_the_models_by_hand(seed_model, seed_training):
    """Seed 70B at TP8, micro-batch 1, seq 8192: QKV 8192 -> (64 + 2 x 8) x 128 / 8 = 1280;
    projection 64 x 128 / 8 = 1024 -> 8192; FC1 8192 -> 2 x 28672 / 8 = 7168 (gated); FC2
    28672 / 8 = 3584 -> 8192."""
    shapes = gemm_shapes(seed_model, seed_training, LayoutSpec(tp=8, pp=1, dp=64), None)
    assert shapes == [(8192, 8192, 1280), (8192, 1024, 8192), (8192, 8192, 7168), (8192, 3584, 8192)]
    assert max(max(s) for s in gemm_shapes(seed_model, seed_training, LayoutSpec(tp=8, pp=1, dp=64), 32)) == 32


def test_copy_counts_read_and_write():
    out = measure_copy(Backend("numpy", "cpu", __import__("numpy")), 1000, 2)
    assert out["bytes_moved"] == 2 * 4 * 1000 and out["achieved_gb_s"] > 0


def test_measure_writes_a_profile_estimate_accepts(tmp_path, capsys):
    path = tmp_path / "measured.json"
    assert main(["calibrate", "--measure", *SEED, "--max-dim", "32", "--repeats", "2",
                 "-o", str(path), "--format", "json"]) == 0
    profile = json.loads(path.read_text())
    assert profile["method"] == "measure"
    assert profile["fitted_on"]["backend"] == pick_backend().name  # says which backend measured
    assert set(profile["constants"]) == {"gemm_peak_fraction", "attention_peak_fraction", "hbm_fraction"}
    assert load_profile(str(path)) is not None
    capsys.readouterr()
    assert main(["estimate", *SEED, "--layout", '{"tp": 8, "pp": 1, "dp": 64}', "--profile", str(path)]) == 0


def test_measure_needs_the_model_and_cluster(tmp_path, capsys):
    assert main(["calibrate", "--measure", "-o", str(tmp_path / "p.json")]) == 2
    assert "--model" in capsys.readouterr().err
