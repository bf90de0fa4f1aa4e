"""Routing details, RoPE scaling and Llama 4 attention reach each framework's export as the
framework's own flags (names checked against tests/fixtures/frameworks/*.json: Megatron-LM
d98e8a64, torchtitan b5bcd76c) or are refused up front naming the field; a config value the
reader does not understand is exit 2 on the CLI and a 422 over HTTP, naming the key."""
from __future__ import annotations

import json

import pytest

from service.cli import main
from solver.errors import SpecError
from solver.specs import LayoutSpec
from tests.service.conftest import problems
from solver.presets import load_model
from tests.service.framework_options import parse_megatron, torchtitan_module_problems
from tests.service.test_export_moe_frameworks import HF, _calls, _checked_torchtitan, _export, _model

SMALL = {"layers": 16}  # fewer layers: the same flags, a smaller pipeline
PP8 = LayoutSpec(tp=1, pp=8, dp=8, ep=8, etp=1, zero_stage=1)


def _megatron(model, layout=PP8) -> dict:
    return parse_megatron(_export("megatron-core", model, layout)["args"])


def test_megatron_writes_deepseek_v3_routing_and_yarn():
    # config.json: scoring_func sigmoid, norm_topk_prob true, routed_scaling_factor 2.5,
    # n_group 8, topk_group 4; rope_scaling yarn factor 40, mscale 1.0, mscale_all_dim 1.0.
    a = _megatron(_model("deepseek-v3").model_copy(update=SMALL))
    assert (a["moe_router_score_function"], a["moe_router_topk_scaling_factor"]) == ("sigmoid", 2.5)
    assert (a["moe_router_num_groups"], a["moe_router_group_topk"]) == (8, 4)
    assert "moe_router_pre_softmax" not in a and "moe_apply_probs_on_input" not in a
    assert (a["rope_type"], a["rotary_scaling_factor"], a["mscale"], a["mscale_all_dim"]) == ("yarn", 40.0, 1.0, 1.0)


def test_megatron_writes_softmax_without_renormalisation_as_pre_softmax():
    # DeepSeek-V2-Lite: softmax, norm_topk_prob false, no rope_scaling (MLA's default is yarn).
    a = _megatron(_model("deepseek-v2-lite").model_copy(update=SMALL))
    assert a["moe_router_pre_softmax"] is True and a["rope_type"] == "rope"
    assert "moe_router_topk_scaling_factor" not in a and "moe_router_num_groups" not in a


def test_megatron_refuses_llama4_chunked_attention_and_writes_the_rest():
    scout = _model("llama4-scout-text").model_copy(update=SMALL)
    with pytest.raises(SpecError) as e:
        _export("megatron-core", scout, PP8)
    assert {p.field for p in e.value.problems} == {"model.attention_chunk_tokens", "model.qk_norm"}
    # Without the chunks and the RoPE-layer-only L2 norm, the rest is Megatron's own flags.
    a = _megatron(scout.model_copy(update={"attention_chunk_tokens": None, "qk_norm": "none"}))
    assert (a["no_rope_freq"], a["moe_router_score_function"], a["moe_apply_probs_on_input"]) == ("4", "sigmoid", True)
    assert (a["use_rope_scaling"], a["rope_scaling_factor"]) == (True, 8.0)


def test_torchtitan_writes_deepseek_v3_routing_and_yarn():
    v3 = _model("deepseek-v3").model_copy(update={**SMALL, "mtp_layers": 0})
    out = _checked_torchtitan(v3, PP8)
    built, = _calls(out["module"], "build_mla_moe_layers")
    assert (built["router_route_norm"], built["router_route_scale"]) == (True, 2.5)
    assert (built["router_num_expert_groups"], built["router_num_limited_groups"], built["mscale"]) == (8, 4, 1.0)
    rope, = _calls(out["module"], "ComplexRoPE.Config")
    assert (rope["scaling"], rope["rope_factor"], rope["beta_fast"], rope["beta_slow"],
            rope["original_seq_len"]) == ("yarn", 40.0, 32, 1, 4096)


def test_torchtitan_writes_route_norm_as_the_config_says():
    lite, = _calls(_checked_torchtitan(_model("deepseek-v2-lite"), PP8)["module"], "build_mla_moe_layers")
    assert (lite["router_route_norm"], lite["router_num_expert_groups"]) == (False, None)
    qwen = _checked_torchtitan(_model("qwen3-30b-a3b"), LayoutSpec(tp=1, pp=2, dp=32, ep=8, etp=1, zero_stage=1))
    router, = _calls(qwen["module"], "make_router_config")
    assert (router["route_norm"], router["route_scale"], router["num_expert_groups"]) == (True, 1.0, None)


@pytest.mark.parametrize("framework, fields", [
    ("torchtitan", {"model.attention_chunk_tokens", "model.rope_scaling", "model.moe.router_on_input"}),
    ("deepspeed", {"model.qk_norm", "model.attention_chunk_tokens", "model.rope_scaling", "model.moe.router",
                   "model.moe.router_on_input", "model.moe.shared_experts"}),
])
def test_llama4_is_refused_by_frameworks_that_cannot_express_it(framework, fields):
    with pytest.raises(SpecError) as e:
        _export(framework, _model("llama4-scout-text").model_copy(update=SMALL), PP8)
    assert {p.field for p in e.value.problems} == fields


def _config(folder: str, **change) -> dict:
    return {**json.loads((HF / folder / "config.json").read_text()), **change}


def test_unknown_value_is_exit_2_on_the_cli(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config("deepseek-v3", rope_scaling={"type": "dynamic", "factor": 2.0})))
    code = main(["plan", "--model", str(path), "--cluster", "seed-512", "--training", "seed-300b"])
    assert code == 2 and "model.rope_scaling.rope_type" in capsys.readouterr().err


def test_unknown_value_is_422_over_http(client):
    body = {"cluster": "seed-512", "training": "seed-300b"}
    r = client.post("/v1/plans", json={**body, "model": _config("olmoe-1b-7b", norm_topk_prob="sometimes")})
    assert r.status_code == 422 and "model.norm_topk_prob" in problems(r)
    r = client.post("/v1/plans", json={**body, "model": _config("llama4-scout-text", no_rope_layers=[0] + [1] * 47)})
    assert r.status_code == 422 and "model.no_rope_layers" in problems(r)


def test_dense_llama3_rope_scaling_reaches_megatron_and_torchtitan():
    # Llama 3.1 8B's config.json: the Llama 3 8B model with rope_scaling llama3, factor 8,
    # low/high frequency factors 1 / 4, original 8192 positions.
    scaled = load_model(_config("llama3-8b", rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}))
    layout = LayoutSpec(tp=1, pp=1, dp=8, zero_stage=2)
    a = parse_megatron(_export("megatron-core", scaled, layout)["args"])
    assert (a["use_rope_scaling"], a["rope_scaling_factor"]) == (True, 8.0)
    module = _export("torchtitan", scaled, layout)["module"]
    assert torchtitan_module_problems(module) == []
    rope, = _calls(module, "ComplexRoPE.Config")
    assert (rope["scaling"], rope["scaling_factor"], rope["low_freq_factor"], rope["high_freq_factor"],
            rope["original_max_position_embeddings"]) == ("llama", 8.0, 1.0, 4.0, 8192)
    with pytest.raises(SpecError) as e:
        _export("deepspeed", scaled, layout)
    assert {p.field for p in e.value.problems} == {"model.rope_scaling"}
    with pytest.raises(SpecError) as e:  # another kind of scaling: refused by the reader
        load_model(_config("llama3-8b", rope_scaling={"rope_type": "dynamic", "factor": 2.0}))
    assert [p.field for p in e.value.problems] == ["model.rope_scaling.rope_type"]
