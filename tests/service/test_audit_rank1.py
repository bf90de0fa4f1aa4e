"""The bar, enforced on a fixed grid: for dense and MoE problems on the three frameworks the
search's rank 1 exports and runs as exported at the memory predicted for it
(benchmarks/audit_rank1.py --quick; the checks are tests/service/framework_semantics.py), and
regression tests for the mismatches the full sweep found."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.audit_rank1 import FRAMEWORKS, audit, problems
from service.launchers import export_layout, rank_placement
from solver.presets import load_model
from solver.specs import LayoutSpec, TrainingSpec
from tests.service.deepspeed_options import deepspeed_config_problems
from tests.service.framework_semantics import _deepspeed_pipeline
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_rank1_runs_as_exported_at_the_predicted_memory(framework):
    rows = [audit(p, framework) for p in problems(quick=True)]
    assert [r for r in rows if r["mismatches"]] == []
    assert sum(r["outcome"] == "exported" for r in rows) >= 5, rows  # the grid tests something


def test_deepspeed_tp_under_pp_is_the_pipeline_topology_model_axis():
    """DeepSpeed TP 4 x PP 16: AutoTP's DP x TP mesh has no pipeline axis (utils/groups.py
    _init_tp_mesh_device) and PipelineModule(num_stages=16) alone gives the grid DP = 1024 / 16
    = 64, so pipe/engine.py's assert train_batch_size (2048) == 1 x 128 x grid DP failed for
    the old export (AutoTP + num_stages). Now: no AutoTP key, the topology's DP is the
    layout's 16 and 1 x 128 x 16 = 2048."""
    model = load_model("llama3-405b")
    training = TrainingSpec(seq_len=8192, global_batch_tokens=8192 * 2048, framework="deepspeed")
    layout = LayoutSpec(tp=4, pp=16, dp=16, recompute="full")
    cluster = load_cluster("dgx-h100-superpod")
    out = export_layout("deepspeed", model, training, layout, rank_placement(cluster, layout))
    assert "tensor_parallel" not in out["config"] and deepspeed_config_problems(out["config"]) == []
    assert out["pipeline"]["topology"] == {
        "class": "deepspeed.runtime.pipe.topology.PipeModelDataParallelTopology",
        "num_pp": 16, "num_mp": 4, "num_dp": 16}
    assert out["config"]["train_batch_size"] == 2048 == 1 * out["config"]["gradient_accumulation_steps"] * 16
    assert _deepspeed_pipeline(out["config"], out["pipeline"], layout) == []
    # without TP the pipeline is num_stages alone and the grid's DP is world / pp
    plain = LayoutSpec(tp=1, pp=16, dp=64, recompute="full")
    out = export_layout("deepspeed", model, training, plain, rank_placement(cluster, plain))
    assert out["pipeline"] == {"module": "deepspeed.pipe.PipelineModule", "num_stages": 16}
    assert _deepspeed_pipeline(out["config"], out["pipeline"], plain) == []


def _megatron_bytes(out: dict, d: int) -> float:
    from tests.service.framework_options import megatron_defaults, parse_megatron
    from tests.service.framework_semantics import megatron_state_bytes

    return megatron_state_bytes({**megatron_defaults(), **parse_megatron(out["args"])}, d)


def test_megatron_exports_the_stated_state_dtypes_it_is_charged():
    """DeepSeek-V3's recipe (BF16 weights, FP32 gradients and master weights, BF16 Adam moments)
    on Llama 3 70B, TP4 PP4 CP2 DP4 ZeRO-1. Charged: 2 + 4 + (4 + 2 x 2) / 8 = 7 bytes per
    parameter. The old export wrote only --bf16, so Megatron kept FP32 moments: 2 + 4 + 12 / 8
    = 7.5. Now --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16
    (optimizer_config.py L187-207 d98e8a64) gives the 7 charged."""
    from solver.cost.state import recipe_summary
    from solver.specs import PrecisionRecipe

    model, cluster = load_model("llama3-70b"), load_cluster("dgx-h100-superpod")
    p = PrecisionRecipe(weight_bytes=2, grad_bytes=4, optimizer_moment_bytes=2, master_weights=True)
    t = TrainingSpec(seq_len=8192, global_batch_tokens=8192 * 512, precision=p)
    layout = LayoutSpec(tp=4, pp=4, cp=2, dp=4, sequence_parallel=True, zero_stage=1)
    out = export_layout("megatron-core", model, t, layout, rank_placement(cluster, layout))
    assert "--use-precision-aware-optimizer" in out["args"] and "--grad-reduce-in-bf16" not in out["args"]
    assert recipe_summary(t, 1, 4, 4, 2)["bytes_per_param"] == 7.0 == _megatron_bytes(out, 8)
    # BF16 gradients: --grad-reduce-in-bf16, 2 + 2 + 8 / 8 = 5
    t2 = t.model_copy(update={"precision": p.model_copy(update={"grad_bytes": 2})})
    out = export_layout("megatron-core", model, t2, layout, rank_placement(cluster, layout))
    assert "--grad-reduce-in-bf16" in out["args"]
    assert recipe_summary(t2, 1, 4, 4, 2)["bytes_per_param"] == 5.0 == _megatron_bytes(out, 8)
    # ZeRO-0 has no precision-aware optimizer (optimizer/__init__.py L1057): FP32 moments are
    # charged, 2 + 4 + 4 + 8 = 18 (the old model charged the stated 2 + 4 + 4 + 4 = 14)
    zero0 = layout.model_copy(update={"zero_stage": 0})
    out = export_layout("megatron-core", model, t, zero0, rank_placement(cluster, zero0))
    assert "--use-precision-aware-optimizer" not in out["args"]
    assert recipe_summary(t, 0, 4, 4, 2)["bytes_per_param"] == 18.0 == _megatron_bytes(out, 8)


def test_torchtitan_is_charged_its_own_state_recipe():
    """torchtitan's export sets no optimizer-state dtype: a stated FP32-weight, BF16-gradient,
    no-master recipe (4 + 2 + 8) used to be charged as stated (with FSDP2's sharding: 1.375
    bytes per parameter at d = 16, ZeRO-2), below the 2 + (4 + 4 + 8) / 16 = 3 bytes FSDP2 keeps
    (BF16 gathered weights, FP32 sharded parameters, gradients and moments); now its own recipe
    is charged and the export computes in BF16 as that recipe does."""
    from solver.cost.state import recipe_summary
    from solver.specs import PrecisionRecipe

    p = PrecisionRecipe(weight_bytes=4, grad_bytes=2, optimizer_moment_bytes=4, master_weights=False)
    t = TrainingSpec(seq_len=8192, global_batch_tokens=8192 * 256, precision=p, framework="torchtitan")
    assert recipe_summary(t, 2, 1, 16, 1)["bytes_per_param"] == 3.0
    layout = LayoutSpec(dp=16, zero_stage=2)
    out = export_layout("torchtitan", load_model("llama3-8b"), t, layout,
                        rank_placement(load_cluster("dgx-h100-superpod"), layout))
    assert out["settings"]["training"]["mixed_precision_param"] == "bfloat16"


def test_deepspeed_exports_the_bf16_master_and_optimizer_state_it_is_charged():
    """DeepSpeed's BF16 ZeRO optimizer keeps FP32 master weights, master gradients and moments
    (16 bytes, sharded); bf16_master_weights_and_grads makes the first two BF16 (2 + 2 + 8 = 12),
    bf16_optimizer_states the moments too (2 + 2 + 4 = 8) (runtime/config.py L1041-1049
    edaa7221). The seed's 2 + 2 + 8 recipe without master weights on ZeRO-2 over 16 ranks used to
    be charged 2 + (2 + 8) / 16 = 2.625 with a config that keeps 2 + (2 + 16) / 16 = 3.125; now
    bf16_master_weights_and_grads is exported and 2 + (2 + 12) / 16 = 2.875 charged. BF16
    moments add bf16_optimizer_states: 2 + (2 + 8) / 16 = 2.625. ZeRO-0 has neither: its own
    recipe."""
    from solver.cost.state import recipe_summary
    from solver.specs import PrecisionRecipe

    p = PrecisionRecipe(weight_bytes=2, grad_bytes=2, optimizer_moment_bytes=4, master_weights=False)
    t = TrainingSpec(seq_len=8192, global_batch_tokens=8192 * 256, precision=p, framework="deepspeed")
    layout, cluster = LayoutSpec(dp=16, zero_stage=2), load_cluster("dgx-h100-superpod")
    assert recipe_summary(t, 2, 1, 16, 1)["bytes_per_param"] == 2.875
    out = export_layout("deepspeed", load_model("llama3-8b"), t, layout, rank_placement(cluster, layout))
    assert out["config"]["bf16"] == {"enabled": True, "bf16_master_weights_and_grads": True}
    assert deepspeed_config_problems(out["config"]) == []
    t2 = t.model_copy(update={"precision": p.model_copy(update={"optimizer_moment_bytes": 2})})
    assert recipe_summary(t2, 2, 1, 16, 1)["bytes_per_param"] == 2.625
    out = export_layout("deepspeed", load_model("llama3-8b"), t2, layout, rank_placement(cluster, layout))
    assert out["config"]["bf16"] == {"enabled": True, "bf16_master_weights_and_grads": True,
                                     "bf16_optimizer_states": True}
    zero0 = LayoutSpec(dp=16, zero_stage=0)
    out = export_layout("deepspeed", load_model("llama3-8b"), t2, zero0, rank_placement(cluster, zero0))
    assert out["config"]["bf16"] == {"enabled": True}
    assert recipe_summary(t2, 0, 1, 16, 1)["bytes_per_param"] == 16.0  # 2 + 2 + 12, unsharded


def test_torchtitan_and_deepspeed_place_pipeline_stages_outermost():
    """torchtitan unflattens its world mesh as (pp, batch, cp, tp) (parallel_dims.py L284-290
    b5bcd76c) and DeepSpeed's pipeline topologies put the pipe axis outermost (runtime/pipe/
    topology.py L240-248 edaa7221): neither can place PP ranks inside a DP replica. Mixtral 8x7B
    on 128 H100 with both rank orders searched: torchtitan's rank 1 used to be TP1 PP4 VPP8 DP32
    EP8 in order tp-cp-pp-dp, costed with a placement torchtitan cannot make."""
    from solver.cost.estimate import framework_violations
    from solver.errors import SpecError
    from solver.search import search_layouts

    model = load_model(str(HF / "mixtral-8x7b" / "config.json"))
    cluster = load_cluster("dgx-h100-superpod").model_copy(update={"nodes": 16})
    t = TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 512, tokens=1e11, framework="torchtitan")
    orders = ["tp-cp-dp-pp", "tp-cp-pp-dp"]
    res = search_layouts(model, cluster, t, {"top_k": 3, "time_limit_s": 5, "rank_orders": orders}, explain=False)
    assert all(r.layout.pp == 1 or r.layout.rank_order == "tp-cp-dp-pp" for r in res.layouts)
    with pytest.raises(SpecError) as exc:
        search_layouts(model, cluster, t, {"rank_orders": ["tp-cp-pp-dp"]}, explain=False)
    assert exc.value.problems[0].field == "options.rank_orders" and "parallel_dims.py" in exc.value.message
    inside = LayoutSpec(pp=2, vpp=8, dp=64, ep=8, etp=1, zero_stage=1, rank_order="tp-cp-pp-dp")
    for framework in ("torchtitan", "deepspeed"):
        tf = t.model_copy(update={"framework": framework})
        assert "pp_inside_dp" in {v["rule"] for v in framework_violations(tf, inside, 4, moe=True)}
        with pytest.raises(SpecError, match="outermost"):
            export_layout(framework, model, tf, inside, rank_placement(cluster, inside))


def test_deepspeed_zero3_holds_the_two_gathered_layers_it_is_charged():
    """Llama 3 8B on DeepSpeed ZeRO-3: the profile charges two gathered layers; DeepSpeed's
    defaults (stage3_max_reuse_distance 1e9 elements, stage3_max_live_parameters 1e9) would
    keep up to about 1e9 / 218,112,000 = 4.6 layers. The export now sets reuse distance and
    prefetch to one layer and the live limit to two. Layer: attention 4096 x (4096 + 2 x 1024
    + 4096) = 41,943,040, FFN 3 x 4096 x 14,336 = 176,160,768, two norms 8,192: 218,112,000."""
    from service.launchers.deepspeed import zero3_limits

    model = load_model("llama3-8b")
    t = TrainingSpec(seq_len=8192, global_batch_tokens=8192 * 256, framework="deepspeed")
    layout = LayoutSpec(dp=8, zero_stage=3)
    out = export_layout("deepspeed", model, t, layout, rank_placement(load_cluster("dgx-h100-superpod"), layout))
    zero = out["config"]["zero_optimization"]
    assert zero["stage3_max_live_parameters"] == 2 * 218_112_000
    assert zero["stage3_max_reuse_distance"] == zero["stage3_prefetch_bucket_size"] == 218_112_000
    assert deepspeed_config_problems(out["config"]) == []
    assert zero3_limits(model, t, layout.model_copy(update={"zero_stage": 2})) == {}


def test_an_uneven_interleaved_rank1_exports_its_chunks():
    """Qwen1.5-MoE-A2.7B (24 layers) on 32 H800, FP32 training, split stages: rank 1 is PP2 x VPP5 with
    chunks [6, 2 x 9] (the layout's pipeline_layers). The search result's pipeline_split is per
    rank, [14, 10], and the exports took it: Megatron refused its own rank 1 ('give the layers of
    all pp x vpp (10) model chunks') and the CLI export fell to rank 2. The exports now take the
    layout's chunks: --pipeline-model-parallel-layout with 10 virtual stages."""
    from solver.search import search_layouts
    from tests.service.framework_options import megatron_violations

    model = load_model(str(HF / "qwen1.5-moe-a2.7b" / "config.json"))
    cluster = load_cluster("h800-2048").model_copy(update={"nodes": 4})
    from solver.specs import PrecisionRecipe

    fp32 = PrecisionRecipe(weight_bytes=4, grad_bytes=4, optimizer_moment_bytes=4, master_weights=False)
    t = TrainingSpec(seq_len=8192, global_batch_tokens=8192 * 256, tokens=1e11, compute_precision="fp8-blockwise",
                     precision=fp32)
    best = search_layouts(model, cluster, t, {"top_k": 1, "time_limit_s": 5, "split_stages": True},
                          explain=False).as_dict()["layouts"][0]
    layout = LayoutSpec.model_validate({k: best[k] for k in LayoutSpec.model_fields if k in best}, strict=False)
    assert (layout.pp, layout.vpp, len(best["pipeline_split"])) == (2, 5, 2)
    assert list(layout.pipeline_layers) == [6] + [2] * 9
    out = export_layout("megatron-core", model, t, layout, rank_placement(cluster, layout), best["pipeline_split"])
    text = out["args"][out["args"].index("--pipeline-model-parallel-layout") + 1]
    assert text == "Et*6|" + "|".join(["t*2"] * 8) + "|t*2L" and megatron_violations(out["args"]) == []
