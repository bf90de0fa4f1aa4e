"""MoE and MLA exports: Megatron-LM's expert and latent-attention arguments, each checked
against the option fixture (tests/fixtures/frameworks/megatron.json, NVIDIA/Megatron-LM
d98e8a64) and Megatron's own MoE checks (tests/service/framework_options.py); the torchtitan
and DeepSpeed MoE exports are tested in test_export_moe_frameworks.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from service.launchers import export_layout, rank_placement
from service.launchers.megatron_moe import layer_freq
from solver.errors import SpecError
from solver.presets import load_model
from solver.specs import LayoutSpec, TrainingSpec
from tests.service.framework_options import megatron_violations, parse_megatron
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
TRAIN = TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 1024, tokens=1e12)
# Mixtral 8x22B on 512 GPUs: TP2 + SP, PP8 x VPP7 (56 layers), DP32, EP8, expert TP 1.
MIXTRAL_LAYOUT = LayoutSpec(tp=2, pp=8, vpp=7, dp=32, ep=8, etp=1, zero_stage=1, sequence_parallel=True)


def _export(model, layout, framework="megatron-core", training=TRAIN):
    cluster = load_cluster("dgx-h100-superpod").model_copy(update={"nodes": 256})
    return export_layout(framework, model, training, layout, rank_placement(cluster, layout))


def test_mixtral_megatron_arguments_are_megatrons_own():
    model = load_model(str(HF / "mixtral-8x22b" / "config.json"))
    out = _export(model, MIXTRAL_LAYOUT)
    a = parse_megatron(out["args"])  # every flag and value against the fixture
    assert megatron_violations(out["args"]) == []
    assert (a["num_experts"], a["moe_router_topk"], a["moe_ffn_hidden_size"]) == (8, 2, 16384)
    assert (a["expert_model_parallel_size"], a["expert_tensor_parallel_size"]) == (8, 1)
    assert a["moe_grouped_gemm"] and a["moe_token_dispatcher_type"] == "alltoall"
    assert a["moe_router_score_function"] == "softmax" and "moe_layer_freq" not in a  # every layer MoE
    assert "moe_shared_expert_intermediate_size" not in a and "multi_latent_attention" not in a


def test_deepseek_v3_megatron_arguments_carry_mla_shared_experts_and_dense_layers():
    model = load_model(str(HF / "deepseek-v3" / "config.json"))
    layout = LayoutSpec(tp=2, pp=1, dp=1024, ep=64, etp=1, zero_stage=1, sequence_parallel=True)
    train = TRAIN.model_copy(update={"moe_a2a_overlap": True})
    with pytest.raises(SpecError, match=r"training\.moe_a2a_overlap"):  # pp > 1 overlap needs vpp
        _export(model, layout.model_copy(update={"pp": 2, "dp": 512}), training=train)
    args = _export(model, layout)["args"]
    a = parse_megatron(args)
    assert megatron_violations(args) == []
    # DeepSeek-V3 config.json: 256 routed experts of 2048, top-8, one shared expert of 2048,
    # first_k_dense_replace 3 of 61 layers, sigmoid scores with e_score_correction_bias.
    assert (a["num_experts"], a["moe_router_topk"], a["moe_ffn_hidden_size"]) == (256, 8, 2048)
    assert a["moe_shared_expert_intermediate_size"] == 2048
    assert a["moe_layer_freq"] == "([0]*3+[1]*58)"
    assert a["moe_router_score_function"] == "sigmoid" and a["moe_router_enable_expert_bias"]
    # MLA: q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128.
    assert a["multi_latent_attention"]
    assert (a["q_lora_rank"], a["kv_lora_rank"], a["qk_head_dim"], a["qk_pos_emb_head_dim"], a["v_head_dim"]) == (
        1536, 512, 128, 64, 128)
    assert a["mtp_num_layers"] == 1  # num_nextn_predict_layers


def test_layer_freq_pattern_is_per_layer():
    model = load_model(str(HF / "deepseek-v3" / "config.json"))
    pattern = eval(layer_freq(model.moe, model.layers), {"__builtins__": {}})
    assert pattern == [int(model.moe.is_moe_layer(i)) for i in range(model.layers)]


def test_megatron_refuses_moe_with_tp_without_sequence_parallelism():
    model = load_model(str(HF / "mixtral-8x22b" / "config.json"))
    with pytest.raises(SpecError) as e:
        _export(model, MIXTRAL_LAYOUT.model_copy(update={"sequence_parallel": False}))
    assert [p.field for p in e.value.problems] == ["layout.sequence_parallel"]
    assert "moe_layer.py" in e.value.message


def test_padded_capacity_is_exported_with_its_capacity_factor():
    # training.moe_pad_to_capacity is Megatron's --moe-pad-expert-input-to-capacity, which
    # needs --moe-expert-capacity-factor (transformer_config.py d98e8a64); without it no pad flag.
    model = load_model(str(HF / "mixtral-8x22b" / "config.json"))
    padded = TRAIN.model_copy(update={"moe_capacity_factor": 1.0, "moe_pad_to_capacity": True})
    for train, pad in ((padded, True), (TRAIN.model_copy(update={"moe_capacity_factor": 1.0}), False)):
        args = _export(model, MIXTRAL_LAYOUT, training=train)["args"]
        a = parse_megatron(args)
        assert megatron_violations(args) == []
        assert a["moe_expert_capacity_factor"] == 1.0 and a.get("moe_pad_expert_input_to_capacity", False) == pad
