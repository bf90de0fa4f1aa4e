"""benchmarks/data/moe_runs.jsonl: published MoE training runs and the MoE accuracy benchmark.

Every row is a published run (its `source`: repository, file, commit and table) with every
choice the source did not print in `assumed`; rows load as specs, fit their cluster, and the
benchmark either scores them or reports the cost model's refusal naming the field it does
not model (FP8 rows state training.compute_precision). Issue 13's target: median |error|
<= 8%, max <= 20% on the scored runs.
"""
import json
from pathlib import Path

import pytest

from benchmarks.moe_accuracy import MOE_CASES, TARGET, evaluate, load_row
from solver.errors import PlannerError


@pytest.fixture(scope="module")
def report():
    return evaluate(MOE_CASES)


def rows():
    return [json.loads(t) for t in MOE_CASES.read_text().splitlines() if t.strip()]


def test_moe_runs_are_published_moe_runs_that_load():
    data = rows()
    assert len({r["id"] for r in data}) == len(data)
    bf16 = [r for r in data if r["published_precision"] == "bf16"]
    assert len(bf16) >= 8 and len(data) - len(bf16) >= 8
    for r in data:
        load_row(r)  # keys, precision, measured step time, specs, layout x cluster
        assert r["model"]["moe"] is not None, r["id"]
        assert r["confidence"] in ("high", "medium", "low"), r["id"]
        assert "commit" in r["source"], r["id"]
        if r["measured"]["step_time_is_derived"]:  # throughput rows show their arithmetic
            assert any(a.startswith("arithmetic:") for a in r["assumed"]), r["id"]


def test_derived_step_time_by_hand():
    # Megatron-Bridge 25.11 DGX-GB200 DeepSeekV3 BF16: 3139 tokens/s/GPU on 256 GPUs, GBS 4096
    # x 4096 tokens -> 16,777,216 / (3139 x 256 = 803,584 tokens/s) = 20.878 s per step.
    row = next(r for r in rows() if r["id"] == "mbridge2511_dsv3_gb200_bf16_256")
    assert row["measured"]["step_time_s"] == pytest.approx(20.878, abs=1e-3)


def test_every_row_is_scored_refused_or_pending_never_malformed(report):
    assert report["errors"] == []
    for case in report["cases"]:
        assert case["status"] in ("scored", "refused", "pending"), case
        if case["status"] != "scored":
            assert case["reason"], case  # a refusal names the unmodelled field


def test_the_cost_model_scores_the_bf16_moe_runs(report):
    # MoE step-time terms are on main, MLA attention too (DeepSeek-V3): every BF16 row is
    # scored; a refusal would have to name an unmodelled model field.
    summary = report["bf16"]
    assert summary["scored"] >= 8
    refused = [c for c in report["cases"] if c["precision"] == "bf16" and c["status"] == "refused"]
    assert all(c["confidence"] in ("high", "medium", "low") for c in report["cases"])
    assert all(c["reason"].startswith("model.mla") for c in refused), refused


def test_scored_bf16_runs_meet_the_issue_13_target(report):
    # Issue 13: median |error| <= 8%, max <= 20% over the BF16 runs of the target set
    # (confidence high or medium; the three low-confidence DGXC GB200 DeepSeek-V3 rows are
    # slowed by their software, see their `assumed`). Measured with MLA and the routing
    # collectives costed: 23 scored, median 7.7%, max 19.4% (Mixtral 8x22B on 1024 H100, GBS
    # 1024); Grok-1 -8% to -13% at its stated capacity factor 1.0, padded (no token-count
    # all-gather), DGXC DeepSeek-V3 H100 -7.2% / -9.4% (NeMo 25.04's MTP module, padded token drop
    # and first/last stage split stated), Megatron-Bridge
    # GB200 DeepSeek-V3 +0.1%, Qwen3-235B +16% (recipes' recompute modules stated).
    summary = report["bf16_target_set"]
    assert summary["refused"] == 0 and summary["scored"] >= 8
    assert summary["median_abs_error"] <= TARGET["median_abs_error"]
    assert summary["max_abs_error"] <= TARGET["max_abs_error"]


@pytest.mark.xfail(strict=True, reason=(
    "All 26 BF16 rows, the three low-confidence DGXC GB200 DeepSeek-V3 rows included: median 8.3% "
    "> 8% since the padded dispatcher's token-count all-gather, which Megatron does not run "
    "(token_dispatcher.py preprocess, core_v0.9.0 and d98e8a64), is no longer charged "
    "(training.moe_pad_to_capacity; was 7.2% with it). The Grok-1 rows' under-prediction has no "
    "cited cause (README); strict: this fails once the target is met, so the marker comes off then."))
def test_all_bf16_runs_meet_the_median_target(report):
    assert report["bf16"]["median_abs_error"] <= TARGET["median_abs_error"]


def nemo_segment(nodes: int, gpus_per_node: int) -> int | None:
    """NeMo's performance slurm_executor (scripts/performance/utils.py, NVIDIA/NeMo 7a8f1cc7 and
    v2.3.1 abddc854): a 4-GPU-node (GB200) job beyond one 18-tray rack gets sbatch --segment = the
    largest divisor of the node count up to 18; None otherwise (no segment)."""
    if gpus_per_node != 4 or nodes <= 18:
        return None
    return next(s for s in range(18, 0, -1) if nodes % s == 0)


def test_rows_placed_by_nemo_segments_state_those_segments_as_nvlink_domains():
    # By hand: 32, 64 and 128 trays -> 16 (18 and 17 do not divide them); 36 -> 18, 20 -> 10.
    assert [nemo_segment(n, 4) for n in (32, 64, 128, 36, 20, 18)] == [16, 16, 16, 18, 10, None]
    placed = [r for r in rows() if any("--segment" in a for a in r["assumed"])]
    assert len(placed) == 3  # the DGXC NeMo 25.04 GB200 DeepSeek-V3 rows
    for r in placed:
        c = r["cluster"]
        assert c["topology"] == {"kind": "nvlink_domain",
                                 "nodes_per_domain": nemo_segment(c["nodes"], c["gpus_per_node"])}, r["id"]


def test_rows_on_te_bee4649c_run_mla_unfused_on_blackwell_only():
    # Transformer Engine bee4649c (NeMo 25.04's manifest): FlashAttention is dropped when
    # head_dim_qk != head_dim_v (dot_product_attention/utils.py), and fused_attn.cpp has no BF16
    # backend on sm_arch >= 100 with a head dim > 128. DeepSeek-V3's MLA: d_qk = 128 + 64 = 192,
    # d_v = 128, so on GB200 (sm100) only UnfusedDotProductAttention is left; on H100 (sm90)
    # cuDNN takes head dims up to 256, and the same stack's H100 rows stay fused.
    cited = [r for r in rows() if any("bee4649c" in a for a in r["assumed"])]
    assert len(cited) == 3
    for r in cited:
        mla = r["model"]["mla"]
        d_qk = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        assert d_qk > 128 and d_qk != mla["v_head_dim"], r["id"]
        assert r["cluster"]["gpu"]["name"].startswith("gb200"), r["id"]
        assert r["training"]["attention_kernel"] == "unfused", r["id"]
    same_stack_h100 = [r for r in rows() if r["id"].startswith("dgxc_dsv3_h100")]
    assert same_stack_h100 and all(r["training"]["attention_kernel"] == "flash" for r in same_stack_h100)


@pytest.mark.xfail(strict=True, reason=(
    "over ALL rows max |error| misses the 20% target: the three low-confidence DGXC NeMo 25.04 "
    "GB200 DeepSeek-V3 rows are predicted 18.8-19.6 s against 34 s (-45% / -43% / -43%) while "
    "Megatron-Bridge 25.11's GB200 DeepSeek-V3 row (same model, same GPU) is within 1%. Cited and "
    "stated in the rows: the EP all-to-all inside 16-tray segments (NeMo's slurm_executor "
    "--segment=16), attention unfused (TE bee4649c has no fused MLA attention on Blackwell); the "
    "remaining 1.8x has no cited cause (README). Strict: this fails once the target is met, so "
    "the marker comes off then."))
def test_all_bf16_runs_meet_the_max_target(report):
    summary = report["bf16"]
    if summary["scored"] == 0:
        pytest.skip("the cost model refuses MoE models on this commit (no MoE step-time terms yet)")
    assert summary["max_abs_error"] <= TARGET["max_abs_error"]


def test_scored_fp8_runs_meet_the_max_target(report):
    # Issue 13's max on the FP8 runs of the target set (high + medium): 16 scored, max 16.4%
    # (the Grok-1 FP8 proxy on 8 H100). The Megatron-Bridge H100 recipes set the all-to-all
    # overlap (moe_a2a_overlap, cited per row); modelled as Megatron's combined 1F1B
    # (solver.cost.moe_comm), Qwen3-235B-A22B is +3.0% / +2.8% and DeepSeek-V3 +15.9% (were
    # +50% / +54% and +75% with the overlap taken as off).
    summary = report["fp8_target_set"]
    assert summary["refused"] == 0 and summary["scored"] >= 8
    assert summary["max_abs_error"] <= TARGET["max_abs_error"]


@pytest.mark.xfail(strict=True, reason=(
    "FP8 target-set median 10.9% > 8%: the nine Grok-1 FP8 rows are -8.6% to -16.4% (their BF16 "
    "twins -8% to -13%: a non-GEMM gap of 1.4-3.2 ms per layer and micro-batch, the same in BF16 "
    "and FP8, growing with the local experts; no cited mechanism, README) and the two "
    "Megatron-Bridge 25.09 H100 Qwen3 rows +13.0% / +13.0%; strict: this fails once the target is "
    "met, so the marker comes off then."))
def test_scored_fp8_runs_meet_the_median_target(report):
    assert report["fp8_target_set"]["median_abs_error"] <= TARGET["median_abs_error"]


def test_grok1_fp8_saving_is_predicted_on_every_gpu_count(report):
    # DGXC Grok-1 runs each layout in BF16 and FP8 (delayed scaling) on the same software, so
    # measured BF16 - FP8 step time is what FP8 saves; the prediction's difference is the FP8
    # GEMMs, casts and weight copies (solver.cost.moe_fp8). E.g. 8 H100: measured 24.03 - 19.89 =
    # 4.14 s, predicted 20.84 - 16.65 = 4.20 s (+1.4%); 32 H100: 10.64 - 8.30 = 2.34 s against
    # 2.10 s (-10.3%, the widest). Within 12% on all nine pairs: the rows' common under-prediction
    # (BF16 -6% to -13%) is not in the FP8 GEMM costs (README, "Why Grok-1 stays under-predicted").
    cases = {c["id"]: c for c in report["cases"]}
    for gpus in (8, 16, 32, 64, 128, 256, 512, 1024, 2048):
        bf16, fp8 = cases[f"dgxc_grok1_bf16_{gpus}"], cases[f"dgxc_grok1_fp8_{gpus}"]
        measured = bf16["measured_step_time_s"] - fp8["measured_step_time_s"]
        predicted = bf16["predicted_step_time_s"] - fp8["predicted_step_time_s"]
        assert predicted == pytest.approx(measured, rel=0.12), gpus


def test_the_low_confidence_qwen3_30b_rows_have_a_twin_twice_as_fast(report):
    # Megatron-Bridge's archive page runs Qwen3-30B-A3B on the same 16-H100 layout (GBS 512,
    # MBS 2, TP1 PP2 VP24 EP8) at 10494 tokens/s/GPU in 25.09 and 5275 in 25.11: 24.848 s against
    # 12.490 s per step (ratio 10494 / 5275 = 1.989). The 25.09 run is predicted within the
    # target's max; the 25.11 and 26.02 rows are low confidence for that reason, said in `assumed`.
    cases = {c["id"]: c for c in report["cases"]}
    twin, row = cases["mbridge2509_qwen3_30b_h100_fp8cs_16"], cases["mbridge2511_qwen3_30b_h100_fp8cs_16"]
    assert row["measured_step_time_s"] / twin["measured_step_time_s"] == pytest.approx(10494 / 5275, rel=1e-4)
    assert abs(twin["error"]) <= TARGET["max_abs_error"] < abs(row["error"])
    data = {r["id"]: r for r in rows()}
    for rid in ("mbridge2511_qwen3_30b_h100_fp8cs_16", "mbridge2602_qwen3_30b_h100_fp8_16"):
        assert data[rid]["confidence"] == "low" and "10494" in data[rid]["assumed"][0]


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_malformed_rows_are_errors(tmp_path):
    good = rows()[0]
    fp8 = next(r for r in rows() if r["published_precision"] != "bf16")
    no_step = {**good, "id": "x", "measured": {"step_time_s": 0}}
    bad_precision = {**good, "id": "y", "published_precision": "fp4"}
    unstated = {**fp8, "id": "z", "training": {k: v for k, v in fp8["training"].items()
                                               if k != "compute_precision"}}
    path = _write(tmp_path, [json.dumps(good), json.dumps(fp8), json.dumps(no_step),
                             json.dumps(bad_precision), "{not json", json.dumps(unstated)])
    report = evaluate(path)
    assert [c["id"] for c in report["cases"]] == [good["id"], fp8["id"], "z"]
    assert report["cases"][1]["status"] == "scored"  # FP8 + MoE: costed for Megatron-Core (moe_fp8)
    # an FP8 run that does not state its recipe would be scored as BF16: held back instead
    assert report["cases"][2]["status"] == "pending"
    assert "compute_precision" in report["cases"][2]["reason"]
    assert [e["line"] for e in report["errors"]] == [3, 4, 5]
    assert "measured.step_time_s" in report["errors"][0]["errors"][0]
    assert "published_precision" in report["errors"][1]["errors"][0]


def test_a_layout_that_does_not_match_its_cluster_is_refused_by_name():
    row = {**rows()[0]}
    row["layout"] = {**row["layout"], "dp": row["layout"]["dp"] // 2}
    with pytest.raises(PlannerError, match="layout"):
        load_row(row)
