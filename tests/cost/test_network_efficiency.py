"""Network efficiency per tier (CostOptions.intra_node_network_efficiency / inter_node_...):
applied to every link the cost model charges, fitted by `trainplan calibrate` with the
sensitivity saying when runs cannot pin it, set by `calibrate --measure` from collective sweeps;
and the per-framework DP-overlap trait fitted on runs of several frameworks."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from benchmarks.calibration_gain import HELDOUT, family
from service.cli import main
from service.measure import Backend, measure_profile, network_efficiency
from solver.cost.calibrate import FRAMEWORK_TRAITS, errors, fit_constants
from solver.cost.estimate import estimate_layout
from solver.cost.options import DEFAULT_OPTIONS
from solver.cost.profile import TRAITS, load_profile, parse_profile
from solver.cost.terms import CostContext, link
from solver.cost.validation import validate_case
from solver.cost.version import MODEL_VERSION
from solver.errors import SpecError
from solver.specs import LayoutSpec
from tests.cost.test_calibrate import synthetic_runs

ROWS = [json.loads(t) for t in HELDOUT.read_text(encoding="utf-8").splitlines() if t.strip()]
FOUNDRY = [r for r in ROWS if family(r) == "llmfoundry h100-sxm-80gb"]
DGXC = [r for r in ROWS if family(r) == "dgxc h100-sxm-80gb"]
SEED = ["--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b"]


def test_links_carry_each_tiers_efficiency(seed_model, seed_cluster, seed_training):
    """Seed: TP8 stays in a node (450 GB/s stated), the DP group of TP8 x DP64 leaves it (45):
    at 0.8 / 0.5 they get 360 and 22.5 GB/s; latencies are unchanged."""
    o = dataclasses.replace(DEFAULT_OPTIONS, intra_node_network_efficiency=0.8, inter_node_network_efficiency=0.5)
    ctx = CostContext(seed_model, seed_cluster, seed_training, o)
    base = CostContext(seed_model, seed_cluster, seed_training)
    assert link(ctx, "tp", tp=8).bandwidth_gb_s == pytest.approx(360.0)
    assert link(ctx, "dp", tp=8, dp=64).bandwidth_gb_s == pytest.approx(22.5)
    assert link(ctx, "dp", tp=8, dp=64).latency_s == link(base, "dp", tp=8, dp=64).latency_s
    assert link(base, "dp", tp=8, dp=64) is link(base, "dp", tp=8, dp=64)  # default: the routed link itself


@pytest.mark.parametrize("layout", [
    {"tp": 8, "pp": 1, "dp": 64, "zero_stage": 1},
    {"tp": 4, "pp": 4, "dp": 16, "cp": 2, "vpp": 2, "zero_stage": 1, "micro_batch": 1},
    {"tp": 2, "pp": 1, "dp": 256, "zero_stage": 3, "sequence_parallel": False},
])
def test_efficiency_equals_a_spec_with_the_achieved_busbw(seed_model, seed_cluster, seed_training, layout):
    """Independent path: efficiencies (0.7, 0.6) on the seed cluster predict the same step as the
    seed cluster with its stated busbw already multiplied (315 and 27 GB/s), every term included
    (TP, CP, PP, DP links)."""
    o = dataclasses.replace(DEFAULT_OPTIONS, intra_node_network_efficiency=0.7, inter_node_network_efficiency=0.6)
    slower = seed_cluster.model_copy(update={
        "intra_node": seed_cluster.intra_node.model_copy(update={"bandwidth_gb_s": 450 * 0.7}),
        "inter_node": seed_cluster.inter_node.model_copy(update={"bandwidth_gb_s": 45 * 0.6})})
    lo = LayoutSpec(**layout)
    scaled = estimate_layout(seed_model, seed_cluster, seed_training, lo, o)
    assert scaled.step_time_s == pytest.approx(estimate_layout(seed_model, slower, seed_training, lo).step_time_s)
    assert scaled.step_time_s > estimate_layout(seed_model, seed_cluster, seed_training, lo).step_time_s


def test_moe_expert_links_take_the_efficiency_too(seed_cluster, seed_training):
    """Mixtral 8x7B (tests/fixtures/hf) at TP 2, EP 8 (the EP group spans two nodes), expert-DP 64:
    the same equivalence holds for the all-to-all and the expert gradient links
    (solver.cost.moe_comm.expert_links)."""
    from pathlib import Path

    from solver.presets import load_model

    mixtral = load_model(str(Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "mixtral-8x7b" / "config.json"))
    o = dataclasses.replace(DEFAULT_OPTIONS, intra_node_network_efficiency=0.7, inter_node_network_efficiency=0.6)
    slower = seed_cluster.model_copy(update={
        "intra_node": seed_cluster.intra_node.model_copy(update={"bandwidth_gb_s": 450 * 0.7}),
        "inter_node": seed_cluster.inter_node.model_copy(update={"bandwidth_gb_s": 45 * 0.6})})
    lo = LayoutSpec(tp=2, pp=1, dp=256, ep=8, zero_stage=1)
    scaled = estimate_layout(mixtral, seed_cluster, seed_training, lo, o).step_time_s
    assert scaled == pytest.approx(estimate_layout(mixtral, slower, seed_training, lo).step_time_s)
    assert scaled > estimate_layout(mixtral, seed_cluster, seed_training, lo).step_time_s


def test_calibrate_recovers_the_inter_node_efficiency_of_multi_node_runs():
    """llm-foundry FSDP rows over 2-8 nodes (exposed ZeRO-3 traffic), measured steps made by the
    model at inter-node efficiency 0.7: the fit finds 0.70 and pins it down (its prior, 1.0 within
    1.2x at one s.d., leaves the runs within 2%)."""
    runs = synthetic_runs([r for r in FOUNDRY if r["cluster"]["nodes"] > 1][::3], inter_node_network_efficiency=0.7)
    fit = fit_constants(runs)
    assert fit.constants["inter_node_network_efficiency"] == pytest.approx(0.70, abs=0.02)
    assert "inter_node_network_efficiency" in fit.pinned
    assert fit.sensitivity["inter_node_network_efficiency"] > 0.5
    assert max(abs(e) for e in errors(runs, fit.options)) < 0.02


def test_single_node_runs_cannot_pin_the_inter_node_efficiency():
    """One-node runs send nothing across nodes: the step does not depend on the inter-node
    efficiency (sensitivity 0), which stays at the shipped 1.0 and is reported as not pinned, why."""
    runs = synthetic_runs([r for r in FOUNDRY if r["cluster"]["nodes"] == 1][::10], inter_node_network_efficiency=0.7)
    fit = fit_constants(runs)
    assert fit.constants["inter_node_network_efficiency"] == pytest.approx(1.0)
    assert fit.sensitivity["inter_node_network_efficiency"] < 0.05
    assert "hardly depend" in fit.not_pinned_reasons["inter_node_network_efficiency"]


def test_dp_overlap_is_fitted_per_framework_on_runs_of_two_frameworks():
    """torchtitan (llm-foundry FSDP) rows made with DP overlap 0.5, Megatron-Core (DGXC) rows with
    the shipped 1.0: each framework gets its own dp_overlap_fraction, the rest is shared; the
    DGXC rows' one-micro-batch windows hardly depend on it, so it stays near 1.0 for them."""
    multi = [r for r in FOUNDRY if r["cluster"]["nodes"] > 1][::3]
    runs = synthetic_runs(multi, dp_overlap_fraction=0.5) + synthetic_runs(DGXC[:3])
    fit = fit_constants(runs)
    assert set(fit.framework_constants) == {"torchtitan", "megatron-core"}
    assert fit.framework_constants["torchtitan"]["dp_overlap_fraction"] < 0.65
    assert fit.framework_constants["megatron-core"]["dp_overlap_fraction"] > 0.95
    assert "dp_overlap_fraction" not in fit.constants
    assert max(abs(e) for e in errors(runs, fit.options_for)) < 0.02
    assert TRAITS == FRAMEWORK_TRAITS


def test_cli_profile_of_two_frameworks_applies_each_ones_traits(tmp_path, capsys):
    multi = [r for r in FOUNDRY if r["cluster"]["nodes"] > 1][::8]
    runs_path, out = tmp_path / "runs.jsonl", tmp_path / "p.json"
    runs_path.write_text("\n".join(json.dumps(r) for r in multi + DGXC[:1]), encoding="utf-8")
    assert main(["calibrate", str(runs_path), "-o", str(out), "--format", "md"]) == 0
    report = capsys.readouterr().out
    assert "dp_overlap_fraction[torchtitan]" in report and "inter_node_network_efficiency" in report
    data = json.loads(out.read_text())
    assert data["fitted_on"]["frameworks"] == {"torchtitan": len(multi), "megatron-core": 1}
    assert {r["framework"] for r in data["fitted_on"]["runs"]} == {"torchtitan", "megatron-core"}
    profile = load_profile(str(out))
    tt = profile.options_for("torchtitan").dp_overlap_fraction
    assert tt == pytest.approx(data["framework_constants"]["torchtitan"]["dp_overlap_fraction"])
    case = validate_case(multi[0], "x", profile.options, profile.framework_options)
    assert case.predicted_step_time_s == pytest.approx(
        validate_case(multi[0], "x", profile.options_for("torchtitan")).predicted_step_time_s)


def test_profile_refuses_bad_framework_constants():
    base = {"schema_version": 2, "model_version": MODEL_VERSION, "framework": None, "constants": {}}
    with pytest.raises(SpecError, match="framework_constants"):
        parse_profile({**base, "framework_constants": {"jax": {"dp_overlap_fraction": 0.5}}})
    with pytest.raises(SpecError, match=r"framework_constants\.torchtitan"):
        parse_profile({**base, "framework_constants": {"torchtitan": {"gemm_peak_fraction": 0.5}}})
    with pytest.raises(SpecError, match="inter_node_network_efficiency"):
        parse_profile({**base, "constants": {"inter_node_network_efficiency": 0}})
    old = parse_profile({**base, "schema_version": 1, "constants": {"gemm_peak_fraction": 0.7}})
    assert old.options.gemm_peak_fraction == 0.7  # schema 1 still reads


def test_efficiency_from_all_reduce_busbw_by_hand(seed_cluster):
    """One host, 8 ranks, busbw 405 GB/s against the seed's 450: intra 0.9. Two hosts of 8,
    busbw 360: 360 / 8 = 45 GB/s per GPU against the stated 45: inter 1.0 (from-nccl-tests'
    per-GPU convention)."""
    assert network_efficiency(405.0, 8, 8, seed_cluster) == ("intra_node_network_efficiency", 405.0, 0.9)
    name, per_gpu, ratio = network_efficiency(360.0, 16, 8, seed_cluster)
    assert (name, per_gpu, ratio) == ("inter_node_network_efficiency", 45.0, 1.0)


class _FakeDist:
    """torch.distributed's surface for two ranks: the collectives return at once."""

    def get_world_size(self) -> int:
        return 2

    def all_reduce(self, x) -> None:
        np.multiply(x, 1.0, out=x)

    def all_gather(self, out, x) -> None:
        for o in out:
            np.copyto(o, x)


def test_measure_sets_the_tier_efficiency_from_the_sweep(seed_model, seed_cluster, seed_training):
    m = measure_profile(seed_model, seed_cluster, seed_training, LayoutSpec(tp=8, pp=1, dp=64), 16, 2,
                        backend=Backend("numpy", "cpu", np), dist=_FakeDist())
    coll = m["collectives"]
    sizes = [r["bytes"] for r in coll["sweep"]]
    assert sizes == sorted(sizes) and sizes[-1] == 16 * 16 * 4 and len(sizes) == 7
    assert coll["tier"] == "intra_node_network_efficiency" and coll["ranks"] == 2
    c = m["constants"]["intra_node_network_efficiency"]
    assert c["raw_fraction"] == pytest.approx(coll["all_reduce_bus_gb_s"] / 450)
    assert 0.25 <= c["value"] <= 1.25


def test_plan_communication_check_uses_the_achieved_dp_bandwidth(seed_model, seed_training):
    """The plan's gradient-sync lower bound under a profile at inter-node efficiency 0.5: the DP
    group of TP8 x DP64 leaves the node, so 45 -> 22.5 GB/s and twice the stated-busbw bound."""
    from solver.plan import _grad_sync
    from topology.catalog import load_cluster

    cluster, lo = load_cluster("seed-512"), LayoutSpec(tp=8, pp=1, dp=64)
    n = 70_000_000_000
    stated = _grad_sync(n, seed_training, cluster, lo)
    achieved = _grad_sync(n, seed_training, cluster, lo,
                          dataclasses.replace(DEFAULT_OPTIONS, inter_node_network_efficiency=0.5))
    assert (stated["dp_bandwidth_gb_s"], achieved["dp_bandwidth_gb_s"]) == (45, 22.5)
    assert achieved["dp_grad_sync_lower_bound_s"] == pytest.approx(2 * stated["dp_grad_sync_lower_bound_s"])


def test_framework_flag_fits_one_frameworks_runs_with_shared_constants(tmp_path, capsys):
    """--framework torchtitan on a file of two frameworks: only its runs, no per-framework copies,
    and the profile names the framework (refused for another framework's training)."""
    multi = [r for r in FOUNDRY if r["cluster"]["nodes"] > 1][::8]
    runs_path, out = tmp_path / "runs.jsonl", tmp_path / "p.json"
    runs_path.write_text("\n".join(json.dumps(r) for r in multi + DGXC[:1]), encoding="utf-8")
    assert main(["calibrate", str(runs_path), "--framework", "torchtitan", "-o", str(out), "--format", "json"]) == 0
    data = json.loads(out.read_text())
    assert data["framework"] == "torchtitan" and data["framework_constants"] == {}
    assert data["fitted_on"]["frameworks"] == {"torchtitan": len(multi)}
    assert "dp_overlap_fraction" in data["constants"]


def test_measured_profile_report_names_the_tier(seed_model, seed_cluster, seed_training):
    from service.commands.calibrate import render_measure

    m = measure_profile(seed_model, seed_cluster, seed_training, LayoutSpec(tp=8, pp=1, dp=64), 16, 2,
                        backend=Backend("numpy", "cpu", np), dist=_FakeDist())
    constants = {k: v["value"] for k, v in m.pop("constants").items()}
    text = render_measure({"constants": constants, "clipped": [], "fitted_on": {"measurements": m},
                           "shipped_constants": {k: getattr(DEFAULT_OPTIONS, k) for k in constants}})
    assert "intra_node_network_efficiency" in text and "of the cluster's stated busbw" in text
