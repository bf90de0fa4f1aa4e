"""Megatron's --overlap-moe-expert-parallel-comm (training.moe_a2a_overlap): which micro-batch
slots the combined 1F1B schedule pairs and what a paired MoE layer still exposes
(solver.cost.moe_comm; NVIDIA/Megatron-LM d98e8a64 schedules.py get_pp_rank_microbatches,
combined_1f1b.py, model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.moe_accuracy import MOE_CASES
from solver.cost import terms as T
from solver.cost.estimate import make_context
from solver.cost.moe_comm import (_dense_ffn, block_times, moe_a2a_exposure, moe_layer_comm, paired_fraction,
                                  slot_comm_s)
from solver.cost.step import step_time
from solver.presets import load_layout, load_model, load_training
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
LAYER = {"tp": 1, "cp": 1, "sp": False, "recompute": "none", "micro_batch": 1, "ep": 8, "etp": 1, "dp": 128, "pp": 4}


def test_paired_fraction_follows_megatrons_warmup():
    # PP 8, VPP 4, 128 micro-batches (Megatron-Bridge's DeepSeek-V3 H100 layout): 512 chunk
    # passes; rank 0 warms up 2 x 7 + 3 x 8 + 1 (the overlap's extra forward) = 39 alone.
    assert paired_fraction(pp=8, vpp=4, grad_accum=128) == pytest.approx((512 - 39) / 512)
    # PP 1: the first forward and the last backward alone, 3 of 4 paired.
    assert paired_fraction(pp=1, vpp=1, grad_accum=4) == pytest.approx(0.75)
    # PP > 1 without VPP: Megatron refuses the flag, nothing is paired; too few micro-batches
    # to leave the warm-up: nothing either.
    assert paired_fraction(pp=4, vpp=1, grad_accum=64) == 0.0
    assert paired_fraction(pp=8, vpp=2, grad_accum=8) == 0.0  # 16 passes, warm-up 14 + 8 + 1
    # the average slot: paired exposure + the unpaired rest in the unpaired fraction
    assert slot_comm_s(1.0, 3.0, True, 1, 1, 4) == pytest.approx(1.0 + 0.25 * 3.0)
    assert slot_comm_s(1.0, 3.0, False, 1, 1, 4) == pytest.approx(4.0)


def _ctx(overlap: bool, link_gb_s: float):
    model = load_model(str(HF / "mixtral-8x7b" / "config.json"))
    cluster = load_cluster("seed-512")
    slow = cluster.model_copy(update={"intra_node": cluster.intra_node.model_copy(
        update={"bandwidth_gb_s": link_gb_s})})
    return make_context(model, slow, load_training("seed-300b").model_copy(update={"moe_a2a_overlap": overlap}))


def test_paired_layer_exposes_each_phase_beyond_its_compute():
    # Without the flag both exposures are the whole all-to-all time.
    off = _ctx(False, 450.0)
    full = moe_layer_comm(off, **LAYER).a2a_s
    assert moe_a2a_exposure(off, **LAYER) == (full, full)
    # With it, the four phases (combine bwd | attention fwd, dispatch fwd | MoE dgrad, dispatch
    # bwd | MoE wgrad + fwd, combine fwd | attention bwd) each expose max(0, a - c):
    for gb_s in (450.0, 5.0):  # NVLink: hidden; a 5 GB/s link: a exceeds every phase
        ctx = _ctx(True, gb_s)
        c = moe_layer_comm(ctx, **LAYER)
        a = c.a2a_s / 4
        lt = T._layer(ctx, 1, 1, False, 1)
        dense_f, dense_b = _dense_ffn(ctx, 1, 1, 1)
        blk = block_times(ctx, tp=1, cp=1, micro_batch=1, ep=8, etp=1)
        phases = [lt.forward_s - dense_f, blk.backward_s / 2, blk.backward_s / 2 + blk.forward_s,
                  lt.backward_s - dense_b]
        paired, unpaired = moe_a2a_exposure(ctx, **LAYER)
        assert unpaired == pytest.approx(c.a2a_s)
        assert paired == pytest.approx(sum(max(0.0, a - p) for p in phases))
        if gb_s == 450.0:
            assert paired == 0.0 < unpaired
        else:  # every phase exposed: the whole all-to-all less the paired layer's compute
            assert max(phases) < a
            assert paired == pytest.approx(c.a2a_s - sum(phases))


def test_the_qwen3_235b_h100_recipe_row_hides_most_of_its_all_to_all():
    # Megatron-Bridge 25.11 H100 Qwen3-235B FP8 (PP 8, VPP 4, EP 32 over the NICs; the recipe
    # sets moe_a2a_overlap): the exposed all-to-all falls by more than half with the flag,
    # and the step by more than a quarter; with VPP 1 (refused by Megatron) nothing is credited.
    row = next(json.loads(t) for t in MOE_CASES.read_text().splitlines()
               if t.strip() and json.loads(t)["id"] == "mbridge2511_qwen3_235b_h100_fp8cs_256")
    model, cluster, layout = load_model(row["model"]), load_cluster(row["cluster"]), load_layout(row["layout"])
    on = load_training(row["training"])
    assert on.moe_a2a_overlap
    m = on.global_batch_tokens // (on.seq_len * layout.micro_batch * layout.dp)
    with_flag = step_time(make_context(model, cluster, on), layout, m)
    without = step_time(make_context(model, cluster, on.model_copy(update={"moe_a2a_overlap": False})), layout, m)
    assert with_flag.breakdown_s["moe_comm"] < 0.5 * without.breakdown_s["moe_comm"]
    assert with_flag.step_time_s < 0.75 * without.step_time_s
    flat = layout.model_copy(update={"vpp": 1})
    assert (step_time(make_context(model, cluster, on), flat, m).breakdown_s["moe_comm"]
            == pytest.approx(step_time(make_context(model, cluster, on.model_copy(
                update={"moe_a2a_overlap": False})), flat, m).breakdown_s["moe_comm"]))


def test_the_estimate_says_what_the_overlap_hides_and_when_megatron_refuses_it():
    # DeepSeek-V3's preset sets moe_a2a_overlap; its published layout is PP 16 VPP 1, which
    # Megatron refuses the flag on: nothing paired, a note naming the field. The same training
    # at PP 1 (TP 8, DP 256, EP 128, micro-batch 1: m = 15360 / 256 = 60) pairs 59 of 60 slots.
    from solver.cost.estimate import estimate_layout
    from solver.cost.accounting import batch_plan
    model, cluster, train = load_model("deepseek-v3"), load_cluster("h800-2048"), load_training("deepseek-v3-14.8t")
    est = estimate_layout(model, cluster, train, train.reference.layout)
    assert est.moe["a2a_overlapped"] and est.moe["a2a_paired_fraction"] == 0.0
    assert est.moe["a2a_exposed_paired_s"] < est.moe["a2a_exposed_alone_s"]
    assert any(n.startswith("training.moe_a2a_overlap: Megatron refuses") and "vpp 1" in n for n in est.notes)
    flat = train.reference.layout.model_copy(update={"tp": 8, "pp": 1, "dp": 256, "sequence_parallel": True,
                                                      "ep": 128, "pipeline_layers": None})
    m = batch_plan(train, 256, 1).grad_accum
    assert m == 60
    est1 = estimate_layout(model, cluster, train, flat)
    assert est1.moe["a2a_paired_fraction"] == pytest.approx((m - 1) / m)
    assert not any("moe_a2a_overlap" in n for n in est1.notes)
