"""The bar, enforced on a fixed grid: for dense and MoE problems on the three frameworks the
search's rank 1 exports and runs as exported at the memory predicted for it
(benchmarks/audit_rank1.py --quick; the checks are tests/service/framework_semantics.py), and
regression tests for the mismatches the full sweep found."""
from __future__ import annotations

from service.launchers import export_layout, rank_placement
from solver.presets import load_model
from solver.specs import LayoutSpec, TrainingSpec
from tests.service.framework_options import deepspeed_config_problems
from tests.service.framework_semantics import _deepspeed_pipeline
from topology.catalog import load_cluster


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
