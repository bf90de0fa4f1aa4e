"""Training FLOPs of MoE and MLA models: 6 N_active T plus attention with MLA's real shapes
(hand arithmetic; parameter counts derived in tests/foundation/test_hf_moe.py)."""
from pathlib import Path

import pytest

from solver.cost.accounting import (
    FLOP_CONVENTION, attention_flops_per_token, parameter_counts, training_flops,
)
from solver.presets import load_model, load_training

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def test_deepseek_v3_flops_per_token_use_active_parameters_and_mla_shapes():
    # DeepSeek-V3 at S = 4096 (the report's pre-training length). Attention: QK^T over
    # d_qk = 128 + 64 = 192, AV over d_v = 128, 128 heads, 61 layers:
    # 6 x 4096 x 128 x (192 + 128) x 61 = 61,404,610,560 per token (forward + backward).
    # Parameters: 6 x 37,552,297,472 = 225,313,784,832 -> 286,718,395,392 per token.
    m = load_model(str(HF / "deepseek-v3" / "config.json"))
    assert attention_flops_per_token(m, 4096) == 61_404_610_560
    training = load_training({"seq_len": 4096, "global_batch_tokens": 4096 * 15360, "tokens": 14.8e12})
    f = training_flops(m, training, parameter_counts(m).active)
    assert f.parameter_matmul == 6 * 37_552_297_472 * 14.8e12
    assert f.total == pytest.approx(286_718_395_392 * 14.8e12, rel=1e-12)
    # A dense reading of the same config (all 256 experts per token) would count 17.9x the
    # parameter FLOPs: 671,026,419,200 / 37,552,297,472.
    assert parameter_counts(m).total / parameter_counts(m).active == pytest.approx(17.87, abs=0.01)


def test_mixtral_flops_count_two_of_eight_experts():
    # Mixtral 8x7B, S = 4096: 6 x 12,879,925,248 = 77,279,551,488 plus attention
    # 12 x 4096 x 32 x 128 x 32 = 6,442,450,944 -> 83,722,002,432 per token.
    m = load_model(str(HF / "mixtral-8x7b" / "config.json"))
    t = load_training({"seq_len": 4096, "global_batch_tokens": 4096 * 1024, "tokens": 1e12})
    f = training_flops(m, t, parameter_counts(m).active)
    assert f.total == pytest.approx(83_722_002_432 * 1e12, rel=1e-12)


def test_dense_flops_unchanged_and_convention_printed(capsys):
    from service.cli import main

    m = load_model("seed-70b")
    c = parameter_counts(m)
    assert c.active == c.total and c.active_transformer_layers == c.transformer_layers
    assert main(["plan", "--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b",
                 "--format", "json"]) == 0
    import json
    plan = json.loads(capsys.readouterr().out)
    assert plan["flops"]["total"] == pytest.approx(1.444e23, rel=1e-3)  # the seed's golden number
    assert plan["parameters"]["active"] == plan["parameters"]["total"] == 69_500_936_192
    assert plan["flops"]["convention"] == FLOP_CONVENTION and "N_active" in FLOP_CONVENTION
