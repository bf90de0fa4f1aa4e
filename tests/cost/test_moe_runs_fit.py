"""Every published MoE run in benchmarks/data/moe_runs.jsonl ran, so its predicted memory must
be within its GPU's physical capacity (validate's `fits_device`, as
tests/cost/test_fit_verdict.py asks of the dense calibration and held-out runs).

The DeepSeek-V3 rows state the recipes' --recompute-modules (training.recompute_modules): with
the megatron-core profile's MoE set instead, or with no recompute where the Megatron-Bridge recipe
recomputes, two rows come out above their device (asserted below, so the rows' statements are what
makes them fit, not a loose model)."""
from __future__ import annotations

import json

from benchmarks.moe_accuracy import MOE_CASES
from solver.cost.validation import validate_case


def _rows() -> list[dict]:
    return [json.loads(t) for t in MOE_CASES.read_text().splitlines() if t.strip()]


def test_every_moe_run_is_consistent_with_having_fit():
    results = [validate_case(r, r["id"]) for r in _rows()]
    assert len(results) == 44  # 26 BF16 + 18 FP8 (the two Megatron-Bridge 25.09 Qwen3 H100 rows: moetime)
    assert [r.id for r in results if not r.fits_device] == []


def test_the_recipes_recompute_modules_are_what_fit_the_deepseek_rows():
    stated = {r["id"]: r for r in _rows() if r["training"].get("recompute_modules")}
    h100 = stated["mbridge2509_dsv3_h100_fp8cs_1024"]  # Megatron-Bridge: mla_up_proj + mlp
    assert h100["training"]["recompute_modules"] == ["mla_up_proj", "mlp"]
    gb200 = stated["mbridge2511_dsv3_gb200_bf16_256"]  # Megatron-Bridge: mla_up_proj
    for row in (h100, gb200):
        bare = dict(row, layout=dict(row["layout"], recompute="none"))
        assert not validate_case(bare, row["id"]).fits_device
    assert validate_case(h100, h100["id"]).fits_device and validate_case(gb200, gb200["id"]).fits_device
