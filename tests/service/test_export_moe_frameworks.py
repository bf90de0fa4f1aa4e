"""torchtitan and DeepSpeed exports of mixture-of-experts models, each checked against the
framework's own names (tests/fixtures/frameworks/*.json, extracted from pytorch/torchtitan
b5bcd76c and deepspeedai/DeepSpeed edaa7221 by benchmarks/extract_framework_options.py) and
checks (tests/service/framework_options.py); models a framework cannot express are refused by
the search up front, naming the field (CLI exit 2, HTTP 4xx), never ranked then refused."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from service.cli import main
from service.launchers import export_layout, rank_placement
from solver.errors import SpecError
from solver.presets import load_model
from solver.search import search_layouts
from solver.specs import LayoutSpec, TrainingSpec
from tests.service.framework_options import parse_megatron, torchtitan_module_problems, torchtitan_violations
from tests.service.deepspeed_options import deepspeed_config_problems, deepspeed_moe_problems
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
TRAIN = TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 1024, tokens=1e12)


def _model(name: str):
    return load_model(str(HF / name / "config.json"))


def _export(framework: str, model, layout: LayoutSpec, training: TrainingSpec = TRAIN):
    cluster = load_cluster("dgx-h100-superpod").model_copy(update={"nodes": layout.gpus // 8})
    return export_layout(framework, model, training.model_copy(update={"framework": framework}), layout,
                         rank_placement(cluster, layout))


def _calls(module: str, name: str) -> list[dict]:
    """Keyword arguments (literals only) of every call to `name` in the module text."""
    out = []
    for node in ast.walk(ast.parse(module)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == name:
            out.append({k.arg: ast.literal_eval(k.value) for k in node.keywords
                        if isinstance(k.value, ast.Constant | ast.List | ast.UnaryOp)})
    return out


def _checked_torchtitan(model, layout: LayoutSpec) -> dict:
    out = _export("torchtitan", model, layout)
    assert torchtitan_module_problems(out["module"]) == []
    assert torchtitan_violations(out["settings"], model.layers, layout.gpus) == []
    assert out["settings"]["parallelism"]["expert_parallel_degree"] == layout.ep
    return out


def test_torchtitan_writes_mixtral_with_its_qwen3_moe_blocks():
    # Mixtral 8x22B config.json: 8 experts of 16384, top-2, softmax, every layer MoE, no shared.
    out = _checked_torchtitan(_model("mixtral-8x22b"), LayoutSpec(tp=2, pp=8, dp=8, ep=8, etp=1, zero_stage=1))
    router, = _calls(out["module"], "make_router_config")
    assert (router["num_experts"], router["top_k"], router["score_func"]) == (8, 2, "softmax")
    experts, = _calls(out["module"], "make_routed_experts_config")
    assert (experts["hidden_dim"], experts["comm_backend"]) == (16384, "standard")
    moe, = _calls(out["module"], "make_moe_config")
    assert moe["load_balance_coeff"] is None and moe["shared_experts"] is None  # no bias, no shared
    assert 'model_registry("30B-A3B")' in out["module"] and "qk_norm=None" in out["module"]


def test_torchtitan_writes_qwen3_moe_with_per_head_qk_norm():
    # Qwen3-30B-A3B config.json: 128 experts of 768, top-8, per-head q/k RMSNorm (head_dim 128).
    out = _checked_torchtitan(_model("qwen3-30b-a3b"), LayoutSpec(tp=1, pp=2, vpp=2, dp=16, ep=8, etp=1,
                                                                  zero_stage=1))
    experts, = _calls(out["module"], "make_routed_experts_config")
    assert (experts["num_experts"], experts["top_k"], experts["hidden_dim"]) == (128, 8, 768)
    assert "qk_norm=_norm(128)" in out["module"]
    assert out["settings"]["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"


def test_torchtitan_writes_deepseek_v2_lite_with_its_mla_builder():
    # DeepSeek-V2-Lite config.json: full-rank queries (q_lora_rank null -> 0), kv_lora_rank 512,
    # 1 dense layer then 26 MoE layers of 64 experts (1408), top-6, 2 shared experts of 1408.
    out = _checked_torchtitan(_model("deepseek-v2-lite"), LayoutSpec(tp=1, pp=1, dp=16, ep=8, etp=1,
                                                                     zero_stage=2))
    built, = _calls(out["module"], "build_mla_moe_layers")
    assert (built["q_lora_rank"], built["kv_lora_rank"], built["n_dense_layers"]) == (0, 512, 1)
    assert (built["num_experts"], built["router_top_k"], built["num_shared_experts"]) == (64, 6, 2)
    assert (built["moe_hidden_dim"], built["dense_hidden_dim"]) == (1408, 10944)
    assert "block.moe.load_balance_coeff = None" in out["module"]  # no score-correction bias


def test_deepspeed_writes_the_native_moe_layer_arguments():
    layout = LayoutSpec(tp=2, pp=1, dp=32, ep=8, etp=2, zero_stage=2)
    out = _export("deepspeed", _model("mixtral-8x7b"), layout)
    moe = out["moe"]
    assert deepspeed_moe_problems(moe) == [] and deepspeed_config_problems(out["config"]) == []
    a = moe["arguments"]
    assert (a["num_experts"], a["ep_size"], a["k"], a["hidden_size"]) == (8, 8, 2, 4096)
    assert a["drop_tokens"] is False and a["enable_expert_tensor_parallelism"] is True  # dropless; ETP = TP
    assert a["top2_2nd_expert_sampling"] is False and moe["layers"] == [[0, 31]]
    capped = _export("deepspeed", _model("mixtral-8x7b"), layout,
                     TRAIN.model_copy(update={"moe_capacity_factor": 1.25}))["moe"]["arguments"]
    assert capped["drop_tokens"] is True and capped["capacity_factor"] == 1.25
    with pytest.raises(SpecError, match=r"not offered with expert layers.*engine\.py"):  # no ZeRO-3 with MoE
        _export("deepspeed", _model("mixtral-8x7b"), LayoutSpec(tp=1, dp=64, ep=8, etp=1, zero_stage=3))


def test_megatron_writes_per_head_qk_norm():
    out = _export("megatron-core", _model("qwen3-30b-a3b"),
                  LayoutSpec(tp=2, pp=1, dp=16, ep=8, etp=1, zero_stage=1, sequence_parallel=True))
    assert parse_megatron(out["args"])["qk_layernorm"] is True


@pytest.mark.parametrize(("name", "framework", "fields"), [
    ("deepseek-v3", "deepspeed", {"model.mtp_layers", "model.mla", "model.moe.router", "model.moe.router_bias",
                                  "model.moe.shared_experts", "model.moe.router_scale", "model.moe.router_groups",
                                  "model.rope_scaling"}),
    ("olmoe-1b-7b", "megatron-core", {"model.qk_norm"}),
    ("qwen1.5-moe-a2.7b", "torchtitan", {"model.bias", "model.moe.shared_expert_gate"}),
])
def test_search_refuses_what_the_framework_cannot_express_up_front(name, framework, fields):
    cluster = load_cluster("dgx-h100-superpod").model_copy(update={"nodes": 4})
    with pytest.raises(SpecError) as e:
        search_layouts(_model(name), cluster, TRAIN.model_copy(update={"framework": framework}), {"top_k": 1})
    assert {p.field for p in e.value.problems} == fields
    assert all(".py" in p.reason for p in e.value.problems)  # each names the framework source file


def test_refusal_is_exit_2_on_the_cli_and_4xx_over_http(capsys, client):
    # torchtitan's MTP layers are DeepSeek-V3's (MTPDecoder): a Qwen3-shaped MoE model with one is refused
    qwen3_mtp = _model("qwen3-30b-a3b").model_copy(update={"mtp_layers": 1}).model_dump_json()
    args = ["search", "--model", qwen3_mtp, "--cluster", "dgx-h100-superpod",
            "--training", TRAIN.model_dump_json(), "--framework", "torchtitan"]
    assert main(args) == 2 and "model.mtp_layers" in capsys.readouterr().err
    body = {"model": json.loads(_model("deepseek-v3").model_dump_json()), "cluster": "dgx-h100-superpod",
            "training": {**json.loads(TRAIN.model_dump_json()), "framework": "deepspeed"}, "options": {"top_k": 1}}
    r = client.post("/v1/layouts", json=body)
    assert 400 <= r.status_code < 500 and "model.moe.router" in r.text


def test_estimate_reports_the_model_rule_as_a_violation():
    from solver.layouts import estimate

    cluster = load_cluster("dgx-h100-superpod").model_copy(update={"nodes": 8})
    out = estimate(_model("olmoe-1b-7b"), cluster, TRAIN, LayoutSpec(tp=1, pp=1, dp=64, ep=8, etp=1, zero_stage=1))
    assert not out["runs_in_framework"]
    assert [v["rule"] for v in out["framework_violations"]] == ["model.qk_norm"]


def test_interleaved_moe_layers_and_sigmoid_bias_router():
    """Dense layers anywhere (first_dense_layers 1, layer_step 2: layers 1, 3, 5 are MoE of 6),
    a sigmoid router with its score-correction bias (torchtitan: load_balance_coeff 1e-3, the
    expert_bias_E of models/common/moe.py) and one shared expert; DeepSpeed gets the same MoE
    layer ranges and refuses the sigmoid router and shared expert up front."""
    from solver.model_parts import MoESpec
    from solver.specs import ModelSpec

    moe = MoESpec(experts=8, experts_per_token=2, expert_ffn_hidden=512, shared_experts=1, first_dense_layers=1,
                  layer_step=2, router="sigmoid", router_bias=True)
    model = ModelSpec(name="interleaved", layers=6, hidden=256, ffn_hidden=1024, ffn_gated=True, heads=4, kv_heads=2,
                      head_dim=64, vocab=1000, tied_embeddings=True, moe=moe)
    out = _checked_torchtitan(model, LayoutSpec(tp=1, pp=1, dp=8, ep=4, etp=1, zero_stage=3))
    assert "MOE_LAYERS = [False, True, False, True, False, True]" in out["module"]
    experts, = _calls(out["module"], "make_moe_config")
    assert experts["load_balance_coeff"] == 1e-3 and 'score_func="sigmoid"' in out["module"]
    shared = [c for c in _calls(out["module"], "make_ffn_config") if c.get("hidden_dim") == 512]
    assert len(shared) == 1  # the shared expert: 1 x 512 wide
    with pytest.raises(SpecError) as e:
        _export("deepspeed", model, LayoutSpec(tp=1, pp=1, dp=8, ep=4, etp=1, zero_stage=1))
    assert {p.field for p in e.value.problems} == {"model.moe.router", "model.moe.router_bias",
                                                   "model.moe.shared_experts"}
    from service.launchers.deepspeed_moe import moe_layer_ranges

    assert moe_layer_ranges(model) == [[1, 1], [3, 3], [5, 5]]
