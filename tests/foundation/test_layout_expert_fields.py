"""LayoutSpec.ep / .etp: Megatron-Core's expert folding (NVIDIA/Megatron-LM d98e8a64,
megatron/core/parallel_state.py L874-883; megatron/training/arguments.py L587, L1657)."""
from typing import Any

import pytest
from pydantic import ValidationError

from solver.model_parts import MoESpec
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec, check_layout_fits_model

DENSE: dict[str, Any] = {"name": "m", "layers": 4, "hidden": 512, "ffn_hidden": 2048, "ffn_gated": True,
                         "heads": 8, "kv_heads": 8, "head_dim": 64, "vocab": 1000, "tied_embeddings": False}
MOE = ModelSpec(**DENSE, moe=MoESpec(experts=8, experts_per_token=2, expert_ffn_hidden=1024))
TRAIN = TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 64, tokens=1e9)


def test_etp_defaults_to_tp_and_expert_dp_folds() -> None:
    lay = LayoutSpec(tp=2, dp=8, ep=4)
    assert lay.expert_tp == 2
    # 2 x 1 x 8 = 16 ranks per stage; EP 4 x ETP 2 = 8 -> expert-DP 2.
    assert lay.expert_dp == 2
    assert LayoutSpec(tp=4, dp=4, ep=8, etp=1).expert_dp == 2  # 16 / (8 x 1)


def test_ep_etp_must_divide_the_stage_ranks() -> None:
    with pytest.raises(ValidationError, match="ep x etp"):
        LayoutSpec(tp=2, dp=3, ep=4)


def test_ep_needs_a_moe_model_and_divides_the_experts() -> None:
    dense = ModelSpec(**DENSE)
    assert any(e.startswith("layout.ep:") for e in check_layout_fits_model(dense, TRAIN, LayoutSpec(dp=8, ep=2)))
    assert any("does not divide model.moe.experts" in e
               for e in check_layout_fits_model(MOE, TRAIN, LayoutSpec(dp=16, ep=16)))
    assert check_layout_fits_model(MOE, TRAIN, LayoutSpec(dp=16, ep=8)) == []
