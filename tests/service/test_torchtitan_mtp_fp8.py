"""torchtitan's multi-token prediction and FP8 grouped experts, as pytorch/torchtitan b5bcd76c
runs them (every name checked against tests/fixtures/frameworks/torchtitan.json, extracted by
benchmarks/extract_framework_options.py):

- MTP: DeepSeekV3Model is an MTPDecoder (torchtitan/models/deepseek_v3/mtp.py): its
  Config.mtp_layers are built by deepseek_v3/__init__.py _build_mtp_layers and trained with
  MTPLoss; MTPDecoder.Config.update_from_config raises at pipeline_parallel_degree > 1 and at
  context_parallel_degree > 1. The search keeps such a model at pp 1 and cp 1 on torchtitan
  (only there), the export writes the layers and the loss, and refuses pp > 1 / cp > 1.
- FP8 MoE: the rowwise recipe adds Float8GroupedExpertsConverter (float8.py), MXFP8 adds
  MXFP8GroupedExpertsConverter (mx.py) with pad_multiple 128 (config_registry.py
  deepseek_v3_debugmodel_mxfp8); the router gate, MTP eh_proj and LM head stay BF16, as the cost
  model charges them. Per-tensor 'fp8-current' MoE is refused up front.
Before this change the search refused both (model.mtp_layers; training.compute_precision).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from service.launchers import export_layout, rank_placement
from solver.errors import SpecError
from solver.model_parts import MLASpec, MoESpec
from solver.presets import load_model
from solver.search import search_layouts
from solver.search.options import SearchOptions
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from tests.search.test_experts import SMALL, cluster, cpsat, oracle
from tests.service.framework_options import fixture, torchtitan_module_problems, torchtitan_violations
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
TRAIN = TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 512, tokens=1e11, framework="torchtitan")
OPTIONS = {"top_k": 1, "time_limit_s": 5, "max_vpp": 2, "max_micro_batch": 2}


def _calls(module: str, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(module)) if isinstance(n, ast.Call) and ast.unparse(n.func) == name]


def _kwargs(call: ast.Call) -> dict:
    """The call's keyword arguments that are literals."""
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords
            if isinstance(k.value, ast.Constant | ast.List | ast.UnaryOp)}


def _rank1(model: ModelSpec, training: TrainingSpec, cluster_name: str, nodes: int) -> tuple[LayoutSpec, dict]:
    """The search's rank-1 layout and its torchtitan export, checked against the fixture."""
    clu = load_cluster(cluster_name).model_copy(update={"nodes": nodes})
    best = search_layouts(model, clu, training, OPTIONS, explain=False).as_dict()["layouts"][0]
    layout = LayoutSpec.model_validate({k: best[k] for k in LayoutSpec.model_fields if k in best}, strict=False)
    out = export_layout("torchtitan", model, training, layout, rank_placement(clu, layout), best.get("pipeline_split"))
    assert torchtitan_module_problems(out["module"]) == []
    assert torchtitan_violations(out["settings"], model.layers, layout.gpus, model.mtp_layers) == []
    return layout, out


def test_deepseek_v3_rank1_exports_its_mtp_layer_and_loss():
    model = load_model(str(HF / "deepseek-v3" / "config.json"))  # num_nextn_predict_layers 1
    layout, out = _rank1(model, TRAIN, "dgx-h100-superpod", 64)
    assert (layout.pp, layout.cp) == (1, 1)  # MTPDecoder refuses PP and CP
    built, = _calls(out["module"], "_build_mtp_layers")
    assert ast.unparse(built.args[0]) == "layers[-1]" and _kwargs(built) == {"dim": 7168, "num_mtp_layers": 1}
    assert "mtp_layers=mtp_layers" in out["module"]  # DeepSeekV3Model.Config(mtp_layers=...)
    loss, = _calls(out["module"], "MTPLoss.Config")
    scale = fixture("torchtitan")["classes"]["MTPLoss.Config"]["fields"]["mtp_scale"]["default"]
    assert _kwargs(loss)["mtp_scale"] == scale == 0.3  # torchtitan's default = DeepSeek-V3's first 10T tokens
    assert not _calls(out["module"], "ChunkedLossWrapper.Config")  # MTPDecoder refuses the skipped LM head
    assert any("mtp_scale" in n for n in out["notes"])


@pytest.mark.parametrize(("update", "field"), [({"pp": 2, "dp": 512}, "layout.pp"),
                                               ({"cp": 2, "dp": 512}, "layout.cp")])
def test_mtp_at_pp_or_cp_above_1_is_refused_by_the_export_and_reported_by_estimate(update, field):
    from solver.layouts import estimate

    model = load_model("deepseek-v3")
    layout = LayoutSpec(tp=1, pp=1, dp=1024, ep=64, etp=1, zero_stage=1).model_copy(update=update)
    clu = load_cluster("dgx-h100-superpod").model_copy(update={"nodes": 128})
    with pytest.raises(SpecError) as e:
        export_layout("torchtitan", model, TRAIN, layout, rank_placement(clu, layout))
    assert field in {p.field for p in e.value.problems} and "deepseek_v3/mtp.py" in e.value.message
    found = estimate(model, clu, TRAIN, layout)["framework_violations"]
    assert field in [v["rule"] for v in found]
    mega = TRAIN.model_copy(update={"framework": "megatron-core"})  # Megatron places MTP on the last stage
    assert field not in [v["rule"] for v in estimate(model, clu, mega, layout)["framework_violations"]]


def _mtp_model() -> ModelSpec:
    """A DeepSeek-V3-shaped model small enough for the oracle: MLA, 1 dense then MoE layers with
    a shared expert as wide as a routed one, one MTP module."""
    moe = MoESpec(experts=8, experts_per_token=2, expert_ffn_hidden=256, shared_experts=1, first_dense_layers=1,
                  router="sigmoid", router_bias=True)
    mla = MLASpec(q_lora_rank=None, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32)
    return ModelSpec(name="tiny-dsv3", layers=4, hidden=256, ffn_hidden=1024, ffn_gated=True, heads=4, kv_heads=4,
                     head_dim=64, vocab=1000, tied_embeddings=False, moe=moe, mla=mla, mtp_layers=1)


def test_search_keeps_torchtitan_mtp_at_pp_1_and_cp_1_and_cpsat_equals_the_oracle():
    model, clu = _mtp_model(), cluster(2)
    options = SearchOptions(top_k=5, **SMALL)
    train = TRAIN.model_copy(update={"seq_len": 1024, "global_batch_tokens": 1024 * 16})
    found = oracle(model, clu, train, options, 80e9)
    assert found and all((e.layout.pp, e.layout.cp) == (1, 1) for e in found)
    got = cpsat(model, clu, train, options, 80e9)
    assert [r.objective_units for r in got] == pytest.approx([e.objective_units for e in found][:5], rel=1e-12)
    assert all((r.layout.pp, r.layout.cp) == (1, 1) for r in got)
    mega = oracle(model, clu, train.model_copy(update={"framework": "megatron-core"}), options, 80e9)
    assert any(e.layout.pp > 1 or e.layout.cp > 1 for e in mega)  # the rule is torchtitan's alone


@pytest.mark.parametrize(("name", "precision", "cluster_name", "nodes", "converters"), [
    ("mixtral-8x7b", "fp8-rowwise", "dgx-h100-superpod", 4,
     {"Float8LinearConverter.Config": {"recipe_name": "rowwise", "filter_fqns": ["lm_head", "router.gate", "eh_proj"]},
      "Float8GroupedExpertsConverter.Config": {}}),
    ("deepseek-v3", "fp8-rowwise", "dgx-h100-superpod", 64,
     {"Float8LinearConverter.Config": {"recipe_name": "rowwise", "filter_fqns": ["lm_head", "router.gate", "eh_proj"]},
      "Float8GroupedExpertsConverter.Config": {}}),
    ("qwen3-30b-a3b", "mxfp8", "hgx-b200-cluster", 2,
     {"MXFP8LinearConverter.Config": {"fqns": ["attention", "shared_experts", "feed_forward"]},
      "MXFP8GroupedExpertsConverter.Config": {"pad_multiple": 128}}),
])
def test_fp8_moe_rank1_exports_the_grouped_experts_converter(name, precision, cluster_name, nodes, converters):
    model = load_model(str(HF / name / "config.json"))
    _, out = _rank1(model, TRAIN.model_copy(update={"compute_precision": precision}), cluster_name, nodes)
    written = {ast.unparse(c.func): _kwargs(c) for c in ast.walk(ast.parse(out["module"]))
               if isinstance(c, ast.Call) and "Converter.Config" in ast.unparse(c.func)}
    assert written == converters
    classes = fixture("torchtitan")["classes"]
    for cls, kwargs in converters.items():
        assert set(kwargs) <= set(classes[cls]["fields"])
    assert "model=_converted(_model())" in out["module"]


def test_per_tensor_fp8_moe_and_mtp_without_mla_are_refused_up_front():
    clu = load_cluster("dgx-h100-superpod").model_copy(update={"nodes": 4})
    mixtral = load_model(str(HF / "mixtral-8x7b" / "config.json"))
    with pytest.raises(SpecError) as e:  # torchao has only rowwise / MXFP8 grouped GEMMs
        search_layouts(mixtral, clu, TRAIN.model_copy(update={"compute_precision": "fp8-current"}), OPTIONS)
    assert {p.field for p in e.value.problems} == {"training.compute_precision"}
    qwen3 = load_model(str(HF / "qwen3-30b-a3b" / "config.json")).model_copy(update={"mtp_layers": 1})
    with pytest.raises(SpecError) as e:  # the Qwen3 decoder has no MTP layers
        search_layouts(qwen3, clu, TRAIN, OPTIONS)
    assert {p.field for p in e.value.problems} == {"model.mtp_layers"} and "qwen3/model.py" in e.value.message


def test_the_export_writes_the_unchunked_loss_the_memory_model_charges():
    """torchtitan's logit_bytes (12 per logit, 16 under TP) is the unchunked cross_entropy_loss;
    llama3_8b's ChunkedLossWrapper (components/loss.py L501-540) would hold about 1/8 of it, so
    the export writes CrossEntropyLoss itself (and the notes say how to chunk)."""
    for name in ("llama3-8b", "mixtral-8x7b"):
        model = load_model(name if name == "llama3-8b" else str(HF / name / "config.json"))
        layout = LayoutSpec(tp=1, pp=1, dp=32, ep=8 if model.moe else 1, etp=1 if model.moe else None, zero_stage=3)
        clu = load_cluster("dgx-h100-superpod").model_copy(update={"nodes": 4})
        out = export_layout("torchtitan", model, TRAIN, layout, rank_placement(clu, layout))
        assert not _calls(out["module"], "ChunkedLossWrapper.Config")
        assert _calls(out["module"], "CrossEntropyLoss.Config")
        assert torchtitan_module_problems(out["module"]) == []
        assert any("ChunkedLossWrapper" in n for n in out["notes"])


def test_each_mtp_depth_keeps_its_fp32_loss_input_on_torchtitan():
    """torchtitan's MTPLoss keeps each depth's FP32 log-softmax (4 bytes per logit) beside the
    main head's 16 under TP (profile memory.mtp_logit_bytes); Megatron's depths keep their
    saved FP32 softmax, 4 bytes per logit too, beside the main head's 6 (process_mtp_loss).
    DeepSeek-V3, TP 2, micro-batch 1, 4096 tokens, by hand: LM-head input 2 x 4096 x 7168
    = 58,720,256; logits 4 x 4096 x 129,280 / 2 = 1,059,061,760 (main head: 6 x ... =
    1,588,592,640)."""
    from solver.cost import memory as M
    from solver.cost.estimate import make_context

    model, clu = load_model("deepseek-v3"), load_cluster("dgx-h100-superpod")
    titan = make_context(model, clu, TRAIN)
    assert M.mtp_logits_bytes(titan, tp=2, cp=1, micro_batch=1) == 58_720_256 + 1_059_061_760
    mega = make_context(model, clu, TRAIN.model_copy(update={"framework": "megatron-core"}))
    assert M.mtp_logits_bytes(mega, tp=2, cp=1, micro_batch=1) == 58_720_256 + 1_059_061_760
    assert M.logits_bytes(mega, tp=2, cp=1, micro_batch=1) == 58_720_256 + 1_588_592_640


@pytest.mark.parametrize(("framework", "zero", "tp", "ep", "ok"), [
    ("torchtitan", 0, 4, 2, False),   # efsdp = 4 / 2 = 2: torchtitan would shard the experts ZeRO-0 replicates
    ("torchtitan", 0, 4, 4, True),    # efsdp = 1
    ("torchtitan", 1, 4, 2, True),    # FSDP: expert state sharded over efsdp, as charged
    ("megatron-core", 0, 4, 2, True),
])
def test_torchtitan_zero0_experts_need_ep_to_span_tp_x_cp(framework, zero, tp, ep, ok):
    """torchtitan distributed/fsdp.py apply_fsdp_to_decoder fully_shards routed experts with
    EP > 1 over efsdp = dp_shard x cp x tp / ep (parallel_dims.py), also at dp_shard 1."""
    from solver.frameworks import load_framework
    from solver.frameworks.capability import expert_shard_ok, expert_violations

    fw = load_framework(framework)
    assert expert_shard_ok(fw, tp=tp, cp=1, dp=8, zero=zero, ep=ep, etp=1) is ok
    pp = 2 if zero == 1 and framework == "torchtitan" else 1
    found = expert_violations(fw, tp=tp, pp=pp, cp=1, dp=8, sp=True, zero=zero, ep=ep, etp=1)
    assert ("expert_ranks" in [v.rule for v in found]) is (not ok)


def test_fsdp_gathers_moe_blocks_not_dense_ones():
    """torchtitan FSDP2 units are transformer blocks (distributed/fsdp.py apply_fsdp_to_decoder);
    a MoE block gathers its attention, norms, router and shared experts / tp and its E / (ep etp)
    routed experts. Mixtral 8x7B (no dense layer), ZeRO-3 (2 prefetched blocks + the all-gather
    stream pool's block), tp 1, ep 1, by hand: attention 4096 x (4096 + 2 x 1024) + 4096 x 4096 =
    41,943,040; norms 8,192; router 4096 x 8 = 32,768; experts 8 x 3 x 4096 x 14336 =
    1,409,286,144: block 1,451,270,144 vs the dense-layer unit charged before, 41,943,040 + 8,192 +
    176,160,768 = 218,112,000: 3 x 1,233,158,144 x 2 bytes = 7,398,948,864 more."""
    from solver.cost.estimate import make_context
    from solver.cost.state import moe_gathered_delta_bytes

    model = load_model(str(HF / "mixtral-8x7b" / "config.json"))
    params = make_context(model, load_cluster("dgx-h100-superpod"), TRAIN).params
    routed = 8 * 3 * 4096 * 14336
    assert moe_gathered_delta_bytes(TRAIN, params, routed, tp=1, pp=1, zero=3, ep=1, etp=1) == 7_398_948_864
    # ep 8: one local expert per rank, block (41,943,040 + 8,192 + 32,768) + 176,160,768 = 218,144,768
    assert moe_gathered_delta_bytes(TRAIN, params, routed, tp=1, pp=1, zero=3, ep=8, etp=1) == 3 * 32_768 * 2
    assert moe_gathered_delta_bytes(TRAIN, params, routed, tp=1, pp=2, zero=0, ep=8, etp=1) == 0  # nothing gathered
