"""Megatron-Core's per-module selective recompute for MoE models (solver.cost.recompute): the
module set follows the megatron-core profile (moe_selective_modules: mla_up_proj layernorm
moe_act, the MoE README's recipe, NVIDIA/Megatron-LM d98e8a64) less what Megatron refuses;
the memory each module frees, its time and HFU FLOPs, and the --recompute-modules the export
writes, against hand-derived numbers.

DeepSeek-V3 (deepseek-v3 preset): h 7168, 128 heads, d_qk 128 + 64 = 192, d_v 128, r_q 1536,
r_kv 512, expert width 2048, 256 experts top-8, one shared expert, 61 layers + 1 MTP.
Layout TP1 EP64 mb1 at seq 4096: s b = 4096 tokens; each expert gets 4096 x 8 x 64 / 256 = 8192
rows on average, the busiest rank 1.25x that (the default imbalance) = 10240 rows for each of its
256 / 64 = 4 local experts: R = 40960.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from service.launchers import export_layout, rank_placement
from solver.cost import memory as M
from solver.cost.estimate import estimate_layout, make_context
from solver.cost.moe_memory import moe_layer_activation_extra_bytes
from solver.cost.recompute import modules_for, selective_modules
from solver.errors import SpecError
from solver.frameworks import load_framework
from solver.presets import load_model, load_training
from solver.specs import LayoutSpec
from tests.service.framework_options import megatron_violations, parse_megatron
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
DSV3 = load_model("deepseek-v3")
FP8 = load_training("deepseek-v3-14.8t")  # fp8-blockwise, seq 4096
BF16 = FP8.model_copy(update={"compute_precision": "bf16"})
MEGATRON = load_framework("megatron-core")


def _ctx(training=FP8, model=DSV3):
    return make_context(model, load_cluster("h800-2048"), training)


def _layer(ctx, recompute):
    return M.layer_activation_bytes(ctx, tp=1, cp=1, sp=False, recompute=recompute, micro_batch=1)


def _moe_extra(ctx, recompute):
    return moe_layer_activation_extra_bytes(ctx, tp=1, cp=1, recompute=recompute, micro_batch=1, ep=64, etp=1)


def test_module_set_follows_the_profile_and_megatrons_refusals():
    mixtral = load_model(str(HF / "mixtral-8x7b" / "config.json"))
    dense = DSV3.model_copy(update={"moe": None, "mla": None, "mtp_layers": 0})
    assert modules_for(DSV3, FP8, MEGATRON) == {"mla_up_proj", "layernorm", "moe_act"}
    assert modules_for(mixtral, FP8, MEGATRON) == {"layernorm", "moe_act"}  # mla_up_proj needs MLA
    delayed = FP8.model_copy(update={"compute_precision": "fp8-delayed"})
    assert modules_for(DSV3, delayed, MEGATRON) == {"mla_up_proj"}  # delayed refuses moe_act, layernorm
    assert modules_for(mixtral, delayed, MEGATRON) == {"core_attn"}  # nothing left: the default
    assert modules_for(dense, FP8, MEGATRON) == {"core_attn"}
    assert modules_for(DSV3, FP8, load_framework("torchtitan")) == {"core_attn"}  # no MoE set cited


@pytest.mark.parametrize("training, layernorm_bytes", [(FP8, 1), (BF16, 2)])
def test_dense_part_drops_qkv_and_norm_outputs(training, layernorm_bytes):
    ctx = _ctx(training)
    # mla_up_proj: Q, K (128 x 192 each) and V (128 x 128) per token, BF16:
    # 2 x 4096 x 128 x (2 x 192 + 128) = 536,870,912 bytes.
    # layernorm: two norm outputs of 4096 x 7168 at 1 byte (FP8 saved inputs) or 2:
    # 58,720,256 or 117,440,512 bytes. core_attn is not in the set: the log-sum-exp stays.
    dropped = 536_870_912 + 2 * 4096 * 7168 * layernorm_bytes
    assert _layer(ctx, "none") - _layer(ctx, "selective") == pytest.approx(dropped, abs=1)


def test_moe_layer_drops_the_routed_activation_output():
    ctx = _ctx()
    # moe_act: R x F' = 40960 x 2048 at 1 byte (fc2's input, FP8) = 83,886,080; layernorm under
    # FP8: the norm output's BF16 byte the router kept (4096 x 7168 = 29,360,128) and the
    # shared experts' fc1 FP8 copy (4096 x 7168 x 1 = 29,360,128): 142,606,336 in all.
    assert _moe_extra(ctx, "none") - _moe_extra(ctx, "selective") == pytest.approx(142_606_336, abs=1)
    bf16 = _ctx(BF16)  # BF16: 40960 x 2048 x 2 = 167,772,160 (no FP8 add-backs)
    assert _moe_extra(bf16, "none") - _moe_extra(bf16, "selective") == pytest.approx(167_772_160, abs=1)


def test_hfu_charges_the_up_projections_again():
    layout = LayoutSpec(tp=1, pp=16, dp=128, ep=64, etp=1, zero_stage=1, recompute="selective",
                        sequence_parallel=False)
    est = estimate_layout(DSV3, load_cluster("h800-2048"), FP8, layout)
    # per token and layer: 2 x 128 x (1536 x 192 + 512 x (128 + 128)) = 109,051,904 FLOPs,
    # over 61 layers + 1 MTP layer; no attention core (core_attn is not recomputed).
    extra = 109_051_904 * 62 * est.tokens_per_step
    assert est.hardware_flops_per_step - est.model_flops_per_step == pytest.approx(extra, rel=1e-12)
    none = estimate_layout(DSV3, load_cluster("h800-2048"), FP8, layout.model_copy(update={"recompute": "none"}))
    assert est.time_breakdown_s["compute"] > none.time_breakdown_s["compute"]  # the recompute is timed


def test_megatron_export_writes_the_charged_modules():
    layout = LayoutSpec(tp=2, pp=1, dp=1024, ep=64, etp=1, zero_stage=1, sequence_parallel=True,
                        recompute="selective")
    cluster = load_cluster("h800-2048")
    args = export_layout("megatron-core", DSV3, FP8, layout, rank_placement(cluster, layout))["args"]
    assert megatron_violations(args) == []
    assert parse_megatron(args)["recompute_modules"] == ["moe_act", "layernorm", "mla_up_proj"]
    assert set(parse_megatron(args)["recompute_modules"]) == selective_modules(_ctx())
    dense = DSV3.model_copy(update={"moe": None, "mla": None, "mtp_layers": 0, "head_dim": 128})
    args = export_layout("megatron-core", dense, BF16, layout.model_copy(update={"ep": 1}),
                         rank_placement(cluster, layout))["args"]
    assert "--recompute-modules" not in args  # Megatron's default core_attn, as charged
    stated = BF16.model_copy(update={"recompute_modules": ("core_attn", "layernorm")})
    args = export_layout("megatron-core", dense, stated, layout.model_copy(update={"ep": 1}),
                         rank_placement(cluster, layout))["args"]
    assert parse_megatron(args)["recompute_modules"] == ["core_attn", "layernorm"]


def test_training_states_the_modules_and_megatrons_refusals_name_the_field():
    mixtral = load_model(str(HF / "mixtral-8x7b" / "config.json"))
    stated = FP8.model_copy(update={"recompute_modules": ("mla_up_proj",)})
    assert modules_for(DSV3, stated, MEGATRON) == {"mla_up_proj"}
    cases = [(mixtral, stated, "multi-head latent attention"),
             (DSV3, stated.model_copy(update={"framework": "torchtitan"}), "torchtitan"),
             (DSV3, stated.model_copy(update={"compute_precision": "fp8-delayed", "recompute_modules": ("moe_act",)}),
              "delayed FP8")]
    for model, training, reason in cases:
        with pytest.raises(SpecError, match=reason) as exc:
            modules_for(model, training, MEGATRON)
        assert exc.value.problems[0].field == "training.recompute_modules"


def test_mlp_checkpoints_the_dense_mlp_only():
    ctx = _ctx(BF16.model_copy(update={"recompute_modules": ("mlp",)}))
    # dense layer: the SwiGLU FFN's two up outputs and the product, 2 x 4096 x 18432 x 3 =
    # 452,984,832 bytes (core_attn not stated: the log-sum-exp stays); a MoE layer's MLP is not a
    # dense MLP, so its extra over the dense layer grows by the same amount.
    assert _layer(ctx, "none") - _layer(ctx, "selective") == pytest.approx(452_984_832, abs=1)
    assert _moe_extra(ctx, "selective") - _moe_extra(ctx, "none") == pytest.approx(452_984_832, abs=1)
    fp8 = _ctx(FP8.model_copy(update={"recompute_modules": ("mlp",)}))  # FFN-down input already 1 byte
    assert _layer(fp8, "none") - _layer(fp8, "selective") == pytest.approx(452_984_832 - 4096 * 18432, abs=1)
    layout = LayoutSpec(tp=1, pp=16, dp=128, ep=64, etp=1, zero_stage=1, recompute="selective")
    est = estimate_layout(DSV3, load_cluster("h800-2048"), fp8.training, layout)
    # HFU: the 3 dense layers' FFN again, 2 x 3 x 7168 x 18432 x 3 = 2,378,170,368 FLOPs per token
    extra = 2 * 3 * 7168 * 18432 * 3 * est.tokens_per_step
    assert est.hardware_flops_per_step - est.model_flops_per_step == pytest.approx(extra, rel=1e-12)
