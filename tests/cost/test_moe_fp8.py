"""FP8 GEMMs in MoE layers (solver.cost.moe_fp8) against hand-derived numbers: the grouped
expert GEMMs at the FP8 peak on the roofline (1-byte weight reads), the experts' cast bytes,
the saved-input saving, the cached FP8 copies of the rank's expert weights, and the refusal
for frameworks whose FP8 grouped-expert path is not modelled.

GPU g: 1000 TFLOPS BF16, 2000 FP8, 1000 GB/s HBM; options: BF16 fraction 0.8, FP8 0.5, HBM 0.5,
132 concurrent tiles (as tests/cost/test_fp8.py).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from solver.cost import moe_layer as ML
from solver.cost.compute import Fp8Work
from solver.cost.estimate import estimate_layout, make_context
from solver.cost.moe_fp8 import ExpertRows, expert_cast_s, moe_linear_weights_on_rank, moe_saved_input_delta_bytes
from solver.cost.moe_memory import moe_model_state
from solver.errors import SpecError
from solver.presets import load_model, load_training
from solver.specs import LayoutSpec
from tests.cost.test_fp8 import DELAYED_TE, GPU, OPTS
from topology.catalog import load_cluster

TORCHAO = Fp8Work(6.0, 6.0, False, False, True)
HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
MIXTRAL = load_model(str(HF / "mixtral-8x7b" / "config.json"))


def test_expert_gemm_compute_bound_at_the_fp8_peak():
    # One (2816, 3072, 8192) expert GEMM: 22 x 24 = 528 tiles of 128 x 128 = 4 full waves of
    # 132 (quantization 1). FP8: 2 x 2816 x 3072 x 8192 = 141,733,920,768 FLOPs / (2000e12 x 0.5)
    # = 141.73 us; its bytes 2816 x 8192 + 8192 x 3072 (1 byte) + 2 x 2816 x 3072 (BF16 out)
    # = 65,536,000 / 5e11 = 131.07 us < compute. BF16: HBM-bound, 2 x (23,068,672 + 25,165,824
    # + 8,650,752) = 113,770,496 B / 5e11 = 227.54 us (compute 141.73e9 / 0.8e15 = 177.17 us).
    assert ML.grouped_gemm_time_s(1, 2816, 3072, 8192, GPU, OPTS, fp8=True) == pytest.approx(141_733_920_768 / 1e15)
    assert ML.grouped_gemm_time_s(1, 2816, 3072, 8192, GPU, OPTS) == pytest.approx(113_770_496 / 5e11)


def test_small_per_expert_rows_read_one_byte_weights():
    # 8 local experts of 16 rows, (16, 8192, 4096): weight-read bound. FP8 bytes
    # 8 x (16 x 4096 + 4096 x 8192 + 2 x 16 x 8192) = 271,056,896 / 5e11 = 542.1 us
    # (compute: 8.59e9 FLOPs at 16/128 x 512/528 tile/wave efficiency = 70.9 us);
    # BF16 2 x 8 x (65,536 + 33,554,432 + 131,072) = 540,016,640 B / 5e11 = 1,080.0 us.
    assert ML.grouped_gemm_time_s(8, 16, 8192, 4096, GPU, OPTS, fp8=True) == pytest.approx(271_056_896 / 5e11)
    assert ML.grouped_gemm_time_s(8, 16, 8192, 4096, GPU, OPTS) == pytest.approx(540_016_640 / 5e11)


ROWS = ExpertRows(routed_rows=1000, local_experts=2, width=512, shard_tokens=256, full_tokens=512,
                  shared_width=128, hidden=256, gated=True)


def test_expert_cast_bytes_by_hand():
    # R = 1000 routed rows, F' = 512 (gated: fc1 out 1024), D = 256; shared S = 128 on s b = 512
    # tokens, shard t = 256. Inputs cast forward: routed 1000 x (256 + 512) = 768,000, shared
    # fc1 on the shard (TE casts before the SP gather) 256 x 256 = 65,536, shared fc2
    # 512 x 128 = 65,536: 899,072 elements. Output gradients: 1000 x (1024 + 256) = 1,280,000
    # + 512 x (256 + 256) = 262,144: 1,542,144. Delayed scaling, 4 bytes each, inputs saved in
    # FP8, weights cached per step: forward 3,596,288 B, backward 6,168,576 B over 5e11 B/s.
    fwd, bwd = expert_cast_s(ROWS, DELAYED_TE, 5e11)
    assert fwd == pytest.approx(3_596_288 / 5e11)
    assert bwd == pytest.approx(6_168_576 / 5e11)
    # torchao-like (6 bytes, BF16 saved inputs, weights per use): shared fc1 on all 512 tokens
    # (131,072): inputs 964,608; weights 2 x 256 x 512 x 3 + 256 x 128 x 3 = 884,736.
    fwd, bwd = expert_cast_s(ROWS, TORCHAO, 5e11)
    assert fwd == pytest.approx(6 * (964_608 + 884_736) / 5e11)
    assert bwd == pytest.approx(6 * (1_542_144 + 964_608 + 884_736) / 5e11)


def test_saved_input_delta_by_hand():
    # FP8-saved routed inputs 1000 x 768 + shared fc2 512 x 128 = 833,536 (-1 byte each); the
    # dense FFN-down input given back 512 x 1024 = 524,288 and the BF16 norm output 256 x 256
    # = 65,536 (+1 each); the shared fc1's FP8 copy of its shard 256 x 256 = 65,536 (+1):
    # 524,288 + 65,536 - 833,536 + 65,536 = -178,176 bytes.
    assert moe_saved_input_delta_bytes(ROWS, 1024, 256) == pytest.approx(-178_176)


def test_mixtral_expert_weights_on_rank_and_their_fp8_copies():
    # Mixtral 8x7B at tp 2, pp 4, ep 8, etp 1: attention per layer 4096 x (2048 + 2 x 512)
    # + 2048 x 4096 = 20,971,520; one local expert 4096 x 14336 x 3 = 176,160,768; no shared
    # experts; 32 layers / 4 = 8 per rank: 8 x 197,132,288 = 1,577,058,304 weights.
    assert moe_linear_weights_on_rank(MIXTRAL, tp=2, pp=4, ep=8, etp=1) == 1_577_058_304
    cluster, train = load_cluster("dgx-h100-superpod"), load_training("seed-300b")
    fp8 = make_context(MIXTRAL, cluster, train.model_copy(update={"compute_precision": "fp8-delayed"}))
    bf16 = make_context(MIXTRAL, cluster, train)
    kw = {"tp": 2, "pp": 4, "dp": 128, "cp": 1, "zero": 1, "ep": 8, "etp": 1}
    # TE caches row- and column-wise FP8 copies: 2 bytes per weight.
    assert (moe_model_state(fp8, **kw).weights - moe_model_state(bf16, **kw).weights
            == pytest.approx(2 * 1_577_058_304))


def test_mixtral_fp8_estimate_is_faster_and_torchtitan_is_refused():
    cluster, train = load_cluster("dgx-h100-superpod"), load_training("seed-300b")
    layout = LayoutSpec(tp=2, pp=4, dp=128, ep=8, etp=1, sequence_parallel=True, zero_stage=1,
                        recompute="selective")
    bf16 = estimate_layout(MIXTRAL, cluster, train, layout)
    fp8 = estimate_layout(MIXTRAL, cluster, train.model_copy(update={"compute_precision": "fp8-delayed"}), layout)
    assert fp8.step_time_s < bf16.step_time_s
    assert fp8.mfu_fp8_peak is not None
    assert any("all-to-all stays BF16" in n for n in fp8.notes)
    assert not any("all-to-all stays BF16" in n for n in bf16.notes)
    tt = train.model_copy(update={"compute_precision": "fp8-current", "framework": "torchtitan"})
    with pytest.raises(SpecError) as err:
        estimate_layout(MIXTRAL, cluster, tt, layout.model_copy(update={"ep": 1, "etp": None}))
    assert "training.compute_precision" in str(err.value) and "torchtitan" in str(err.value)
