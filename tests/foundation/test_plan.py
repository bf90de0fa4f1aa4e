"""The plan JSON carries the seed's golden numbers (reference/seed-70b-plan.md).

Hand derivations (also in tests/test_accounting_seed.py): N = 69,500,936,192; state
12 N = 834.0 GB; FLOPs 6 N T = 1.251e23 + 12 S T (H dh) L = 1.933e22 -> 1.444e23;
wall 1.444e23 / (512 x 1e15 x 0.5) = 5.64e5 s; 5.64e5 x 512 / 3600 = 80,238 GPU-hours;
64 x 1 x 8 x 8192 = 4,194,304 tokens/step, ceil(300e9 / 4,194,304) = 71,526 steps;
TP8 + ZeRO-1: 2N/8 + 2N/8 + 8N/512 = 35.84 GB; grad sync 2 (63/64) 17.375 GB / 45 = 0.760 s.
"""
import pytest

from solver.errors import InfeasibleError, SpecError
from solver.plan import (
    build_plan, estimate_accounting, ladder_layouts, largest_tp,
)
from solver.plan_stages import scaling_grid
from solver.presets import load_model, load_training
from solver.specs import LayoutSpec, TrainingSpec
from topology.catalog import load_cluster


@pytest.fixture(scope="module")
def plan(seed_model, seed_cluster, seed_training):
    return build_plan(seed_model, seed_cluster, seed_training)


def test_plan_golden_numbers(plan):
    assert plan["parameters"]["total"] == 69_500_936_192
    assert plan["memory"]["model_state_bytes"] == pytest.approx(834.0e9, rel=1e-3)
    assert plan["flops"]["parameter_matmul"] == pytest.approx(1.251e23, rel=1e-3)
    assert plan["flops"]["attention"] == pytest.approx(1.933e22, rel=1e-3)
    assert plan["flops"]["total"] == pytest.approx(1.444e23, rel=1e-3)
    assert plan["time"]["assumed_mfu"] == 0.5
    assert plan["time"]["wall_s"] == pytest.approx(5.64e5, rel=1e-3)
    assert plan["time"]["gpu_hours"] == pytest.approx(80_200, rel=2e-3)
    assert plan["batch"]["tokens_per_step"] == 4_194_304
    assert plan["batch"]["steps"] == 71_526
    # The seed's own layout (the ladder's choice): 8 accumulation steps, 0.76 s grad sync.
    seed = plan["ladder_choice"]
    assert seed["batch"]["grad_accum"] == 8
    assert seed["communication"]["dp_grad_sync_lower_bound_s"] == pytest.approx(0.76, abs=0.005)


def test_communication_check_follows_the_best_layout(plan):
    """2 (d-1)/d x (2 N / (TP x PP)) / 45 GB/s with d = DP x CP of the recommended layout."""
    b = plan["layouts"][0]
    d = b["dp"] * b["cp"]
    grads = 2 * 69_500_936_192 / (b["tp"] * b["pp"])
    expect = 2 * (d - 1) / d * grads / 45e9
    assert plan["communication"]["dp_grad_sync_lower_bound_s"] == pytest.approx(expect, rel=1e-9)
    assert plan["batch"]["dp"] == b["dp"]


def test_ladder_choice_is_the_seeds(plan):
    seed = plan["ladder_choice"]
    assert {k: seed["layout"][k] for k in ("tp", "pp", "dp", "cp", "zero_stage")} == \
        {"tp": 8, "pp": 1, "dp": 64, "cp": 1, "zero_stage": 1}
    # Megatron-Core's recipe (ZeRO-1 = distributed optimizer): N/8 x (2 + 4 + 12/64) bytes =
    # 53.75 GB, not the seed's 12-byte 35.84 GB (that stays in the capacity section).
    assert seed["memory_per_gpu_bytes"]["model_state"] == 8_687_617_024 * (6 + 12 / 64)
    assert seed["layout"]["framework"] == "megatron-core" and seed["framework_violations"] == []
    # Ladder: ZeRO-0 (104.3 GB) does not fit 80 GB, ZeRO-1 leaves 44.2 GB (seed: "about 44 GB").
    rungs = plan["ladder"]["rungs"]
    assert [r["fits"] for r in rungs] == [False, True, True, True]
    assert plan["ladder"]["memory_left_bytes"] == pytest.approx(44.16e9, rel=1e-3)
    # With activations (22.5 GB) the seed layout needs 80.2 GB: it does not fit 72 GB usable
    # in Megatron-Core (issue 10), so the search does not rank it.
    assert not seed["fits"] and seed["memory_per_gpu_bytes"]["total"] > 0.9 * 80e9
    assert "rank_min" not in seed
    assert seed["step_time_s"] >= plan["layouts"][0]["step_time_s"]
    # "why" explains the difference: its components add up to the step-time gap.
    gap = seed["step_time_s"] - plan["layouts"][0]["step_time_s"]
    assert sum(w["seconds"] for w in seed["why"]) == pytest.approx(gap, abs=0.05)


def test_plan_prediction_is_consistent(plan):
    """Predicted run time = steps x predicted step time; MFU = model FLOPs / (time x peak)."""
    p, best = plan["prediction"], plan["layouts"][0]
    assert p["wall_s"] == pytest.approx(71_526 * best["step_time_s"])
    flops_per_step = plan["flops"]["total"] / 300e9 * 4_194_304
    assert p["mfu"] == pytest.approx(flops_per_step / (best["step_time_s"] * 512 * 1e15), rel=1e-6)
    assert sum(p["time_breakdown_s"].values()) == pytest.approx(p["step_time_s"], rel=1e-6)


def test_plan_reports_both_attention_conventions(plan):
    f = plan["flops"]
    assert f["attention_causal"] == pytest.approx(f["attention_non_causal"] / 2)
    assert f["total_causal"] < f["total_non_causal"] == f["total"]


def test_validation_stages_use_the_seed_grid(plan):
    stages = plan["validation_stages"]
    assert [s["stage"] for s in stages] == [1, 2, 3, 4]
    grid = stages[1]["grid"]
    # The seed's grid 8, 64, 128, 512, each size searched on its own.
    assert [g["gpus"] for g in grid] == [8, 64, 128, 512]
    fitting = [g for g in grid if g["step_time_s"] is not None]
    # The global batch is kept at every size: 4,194,304 = dp x mb x accum x 8192.
    assert all(g["tokens_per_step"] == 4_194_304 for g in fitting)
    assert all(g["tp"] * g["pp"] * g["dp"] * g["cp"] == g["gpus"] for g in fitting)
    # More GPUs, shorter steps (each size's own best layout).
    steps = [g["step_time_s"] for g in fitting]
    assert steps == sorted(steps, reverse=True)
    # 12 N = 834 GB does not fit 8 x 80 GB: the one-node stage uses a proxy.
    assert grid[0]["step_time_s"] is None and not stages[0]["full_model_fits_one_node"]
    # Issue 12: stage 1 quotes model state (18.7 GB for TP8 ZeRO-2 DP64), not total memory.
    best = plan["layouts"][0]
    assert stages[0]["expect"]["model_state_per_gpu_bytes_full_scale"] == best["memory_per_gpu_bytes"]["model_state"]
    assert stages[0]["expect"]["memory_per_gpu_bytes_full_scale"] == best["memory_per_gpu_bytes"]["total"]
    # Stage 4 GPU-hours at the predicted step time: 1% of the predicted run.
    assert stages[3]["gpu_hours"] == pytest.approx(0.01 * plan["prediction"]["gpu_hours"])
    # Checkpoint: weights + optimizer = 10 N bytes = 695.0 GB.
    assert stages[2]["checkpoint_bytes"] == 10 * 69_500_936_192


def test_grid_row_never_slower_than_search_at_its_size(plan, seed_model, seed_cluster, seed_training):
    """Issue 12: the grid showed 73.9 s at 64 GPUs where `search --gpus 64` finds 53.3 s. Each
    row is now that search's best (layout and step time)."""
    from solver.search import search_layouts

    for g in plan["validation_stages"][1]["grid"][1:3]:  # 64 and 128 GPUs
        top = search_layouts(seed_model, seed_cluster, seed_training, {"gpus": g["gpus"], "top_k": 1}).layouts[0]
        assert g["step_time_s"] <= top.estimate.step_time_s * (1 + 1e-12)
        assert (g["tp"], g["pp"], g["dp"], g["cp"]) == (top.layout.tp, top.layout.pp, top.layout.dp, top.layout.cp)


def test_failure_checks_carry_numbers(plan):
    by = {c["check"]: c for c in plan["failure_checks"]}
    # Issue 12: the check watches the PREDICTED exposed DP time of the recommended layout
    # (0.25 s), not the unoverlapped ring bound (0.76 s), which it only quotes.
    sync = by["exposed gradient sync"]
    assert sync["layout"] == "recommended"
    assert sync["predicted_s"] == plan["prediction"]["time_breakdown_s"]["dp_exposed"]
    assert sync["unoverlapped_s"] == plan["communication"]["dp_grad_sync_lower_bound_s"]
    assert sync["predicted_s"] < sync["threshold_s"] < sync["unoverlapped_s"]
    # Peak memory: the threshold is the predicted total (71.2 GB), the headroom capacity minus it.
    mem = by["peak memory"]
    assert mem["threshold_bytes"] == plan["prediction"]["memory_per_gpu_bytes"]["total"]
    assert mem["headroom_bytes"] == pytest.approx(80e9 - mem["threshold_bytes"])
    # At 40% MFU: 5.64e5 s x 0.5/0.4 = 7.05e5 s = 8.16 days.
    assert by["MFU below assumption"]["if_lower"][0]["days"] == pytest.approx(8.16, abs=0.01)


def test_cost_when_priced(seed_model, seed_cluster, seed_training):
    priced = seed_training.model_copy(update={"price_per_gpu_hour": 2.0})
    plan = build_plan(seed_model, seed_cluster, priced)
    assert plan["time"]["cost"] == pytest.approx(2.0 * plan["time"]["gpu_hours"])


def test_largest_tp_respects_heads_and_kv_rule():
    assert largest_tp(load_model("seed-70b"), 8) == 8
    m = load_model({"layers": 2, "hidden": 768, "ffn_hidden": 3072, "ffn_gated": False,
                    "heads": 12, "kv_heads": 12, "head_dim": 64, "vocab": 100,
                    "tied_embeddings": True})
    assert largest_tp(m, 8) == 4  # 8 does not divide 12 heads
    gqa = m.model_copy(update={"kv_heads": 3})
    # Divisors of 8 dividing 12 heads: 1, 2, 4; with 3 KV heads neither 2 nor 4 divides 3
    # or is a multiple of it, so only TP 1 remains.
    assert largest_tp(gqa, 8) == 1


def test_ladder_goes_to_zero3_for_405b():
    # 405.9e9 x 2 / 8 = 101.5 GB of weights per GPU: only ZeRO-3 (4.8 GB) fits 80 GB.
    _, layouts = ladder_layouts(load_model("llama3-405b"), load_cluster("dgx-h100-superpod"),
                                load_training("llama3-405b-15t"))
    assert layouts[0]["zero_stage"] == 3 and layouts[0]["tp"] == 8


def test_ladder_infeasible_explains():
    tiny = {"name": "tiny", "nodes": 1, "gpus_per_node": 1,
            "gpu": {"name": "g", "memory_gb": 1, "peak_tflops": 100, "hbm_gb_s": 1000},
            "intra_node": {"bandwidth_gb_s": 100, "latency_us": 3},
            "inter_node": {"bandwidth_gb_s": 10, "latency_us": 10}}
    with pytest.raises(InfeasibleError) as e:
        ladder_layouts(load_model("seed-70b"), load_cluster(tiny), load_training("seed-300b"))
    assert e.value.explanation["tried"]


def test_scaling_grid_generalises():
    assert scaling_grid(load_cluster("dgx-h100-superpod"), 8) == [8, 64, 256, 1024]
    assert scaling_grid(load_cluster("dgx-a100-superpod"), 8) == [8, 64, 280, 1120]


def test_plan_needs_tokens(seed_model, seed_cluster):
    with pytest.raises(SpecError):
        build_plan(seed_model, seed_cluster, TrainingSpec(seq_len=8192, global_batch_tokens=4194304))


def test_estimate_seed_layout(seed_model, seed_cluster, seed_training, seed_layout):
    est = estimate_accounting(seed_model, seed_cluster, seed_training, seed_layout)
    m = est["memory_per_gpu_bytes"]
    assert set(m) == {"model_state", "weights", "gradients", "optimizer", "total"}
    assert m["total"] == pytest.approx(35.8e9, rel=2e-3)
    assert m["weights"] + m["gradients"] + m["optimizer"] == pytest.approx(m["model_state"])
    assert est["fits"] is True
    assert est["communication"]["dp_grad_sync_lower_bound_s"] == pytest.approx(0.76, abs=0.005)


def test_estimate_zero0_does_not_fit(seed_model, seed_cluster, seed_training):
    # 2N/8 + 2N/8 + 8N/8 = 104.3 GB > 80 GB.
    est = estimate_accounting(seed_model, seed_cluster, seed_training, LayoutSpec(tp=8, dp=64))
    assert est["memory_per_gpu_bytes"]["total"] == pytest.approx(104.25e9, rel=1e-3)
    assert est["fits"] is False


def test_estimate_rejects_bad_layouts(seed_model, seed_cluster, seed_training):
    with pytest.raises(SpecError) as e:
        estimate_accounting(seed_model, seed_cluster, seed_training,
                            LayoutSpec(tp=3, dp=512))
    fields = sorted(p.field for p in e.value.problems)
    assert fields == ["layout", "layout.tp", "layout.tp"]
    assert any("exceeds the cluster's 512" in p.reason for p in e.value.problems)


def test_plan_states_its_assumptions(plan):
    text = " ".join(plan["assumptions"])
    assert "50% MFU" in text and "45 GB/s" in text and "25% of GPU memory" in text


def test_layout_section_is_pluggable(seed_model, seed_cluster, seed_training):
    """A replacement ranking (the future search) drives batch, communication and stages."""
    def only_zero3(model, cluster, training):
        ladder, layouts = ladder_layouts(model, cluster, training)
        return ladder, [r for r in layouts if r["zero_stage"] == 3]

    plan = build_plan(seed_model, seed_cluster, seed_training, rank_layouts=only_zero3)
    assert plan["layouts"][0]["zero_stage"] == 3
    # ZeRO-3 at TP8 DP64: (2 + 2 + 8) N / 512 = 1.63 GB per GPU.
    assert plan["validation_stages"][0]["expect"]["model_state_per_gpu_bytes_full_scale"] == \
        pytest.approx(12 * 69_500_936_192 / 512)


def test_recommended_layout_is_one_megatron_core_runs(plan):
    """Issue 10: the seed's best layout used to be TP4 PP2 VPP8 DP64 ZeRO-2, which Megatron-Core
    cannot run (no ZeRO-2 with PP). Every ranked layout now passes the framework's rules."""
    from solver.frameworks import load_framework
    from solver.frameworks.capability import violations

    fw = load_framework("megatron-core")
    for lay in plan["layouts"]:
        assert lay["framework"] == "megatron-core"
        assert violations(fw, kernel="flash", tp=lay["tp"], pp=lay["pp"], cp=lay["cp"], vpp=lay["vpp"],
                          sp=lay["sequence_parallel"], zero=lay["zero_stage"], accum=lay["grad_accum"]) == []
    assert "megatron-core" in plan["memory"]["per_layout_recipe"]


def test_every_layout_in_the_plan_names_its_framework(plan):
    """Issue 10: ranked layouts, the ladder's rungs and its choice all say which framework
    (and which memory recipe) their figures are for."""
    def layouts(x):
        if isinstance(x, dict):
            if "tp" in x and "zero_stage" in x:
                yield x
            for v in x.values():
                yield from layouts(v)
        elif isinstance(x, list):
            for v in x:
                yield from layouts(v)

    found = list(layouts(plan))
    assert len(found) > 10 and all(d.get("framework") == "megatron-core" for d in found)
