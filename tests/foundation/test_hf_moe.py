"""Mixture-of-experts and MLA config.json readers: exact parameter counts against the published
totals (arithmetic by hand in each test), and refusal of what the readers do not understand.

Conventions: `active` counts every non-expert parameter (embedding and LM head included), the
shared experts and the top-k routed experts, as Mistral AI ("12.9B active") and Qwen ("3.3B
activated") count; DeepSeek leaves the input embedding out ("36.6B activated, including 0.9B
for the output head", DeepSeek-V3 README_WEIGHTS.md), `active_without_input_embedding`.
"""
import json
import math
from pathlib import Path

import pytest

from service.cli import main
from solver.cost.accounting import parameter_counts
from solver.errors import SpecError
from solver.presets import load_model

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def counts(folder):
    return parameter_counts(load_model(str(HF / folder / "config.json")))


def near(value, published, digits):
    """The published figure (in 1e9, `digits` after the point) is `value` rounded or cut at that
    digit: the publishers do both (Qwen3's 3.35B active is printed "3.3B")."""
    scaled = value / 1e9 * 10 ** digits
    return published * 10 ** digits in (round(scaled), math.floor(scaled))


def test_mixtral_8x7b_46_7b_total_12_9b_active():
    # Mixtral of Experts (Jiang et al. 2024; Mistral AI): 46.7B total, 12.9B active. D=4096, L=32,
    # 8 experts top-2 of width 14336, GQA 32/8 x 128, vocab 32000 untied. Per layer:
    # attention 2*4096*4096 + 2*4096*1024 = 41,943,040; expert 3*4096*14336 = 176,160,768;
    # router 8*4096 = 32,768; norms 8,192. All experts: 41,943,040 + 8*176,160,768 + 32,768 +
    # 8,192 = 1,451,270,144 x 32 = 46,440,644,608; + embedding and head 2*32000*4096 =
    # 262,144,000 + final norm 4,096 = 46,702,792,704. Active layer 41,943,040 + 2*176,160,768 +
    # 40,960 = 394,305,536 x 32 = 12,617,777,152 + 262,148,096 = 12,879,925,248.
    c = counts("mixtral-8x7b")
    assert (c.moe_layers, c.moe_ffn_per_layer) == (32, 8 * 176_160_768 + 32_768)
    assert c.total == 46_702_792_704 and near(c.total, 46.7, 1)
    assert c.active == 12_879_925_248 and near(c.active, 12.9, 1)


def test_mixtral_8x22b_141b_total_39b_active():
    # Mistral AI, Mixtral 8x22B (2024): 141B total, 39B active. D=6144, L=56, width 16384, GQA
    # 48/8 x 128, vocab 32000. Attention 2*6144^2 + 2*6144*1024 = 88,080,384; expert
    # 3*6144*16384 = 301,989,888; router 49,152; norms 12,288. Layer 88,080,384 +
    # 2,415,919,104 + 49,152 + 12,288 = 2,504,060,928 x 56 = 140,227,411,968; + 393,216,000
    # + 6,144 = 140,620,634,112. Active layer 88,080,384 + 603,979,776 + 61,440 = 692,121,600
    # x 56 = 38,758,809,600 + 393,222,144 = 39,152,031,744.
    c = counts("mixtral-8x22b")
    assert c.total == 140_620_634_112 and near(c.total, 141, 0)
    assert c.active == 39_152_031_744 and near(c.active, 39, 0)


def test_qwen3_30b_a3b_30_5b_total_3_3b_active():
    # Qwen3 technical report (2025) Table 2 / model card: 30.5B total, 3.3B activated. D=2048,
    # L=48, GQA 32/4 x 128 with per-head QK RMSNorm (2*128), 128 experts top-8 of width 768,
    # vocab 151936 untied. Attention 2048*4096*2 + 2048*512*2 = 18,874,368 + 256 = 18,874,624;
    # expert 3*2048*768 = 4,718,592; router 128*2048 = 262,144; norms 4,096. Layer 18,874,624
    # + 603,979,776 + 262,144 + 4,096 = 623,120,640 x 48 = 29,909,790,720; + 2*151936*2048 =
    # 622,329,856 + 2,048 = 30,532,122,624. Active 18,874,624 + 37,748,736 + 266,240 =
    # 56,889,600 x 48 = 2,730,700,800 + 622,331,904 = 3,353,032,704.
    c = counts("qwen3-30b-a3b")
    assert c.attention_per_layer == 18_874_624
    assert c.total == 30_532_122_624 and near(c.total, 30.5, 1)
    assert c.active == 3_353_032_704 and near(c.active, 3.3, 1)
    # The card's "29.9B non-embedding": total less embedding and LM head 30,532,122,624 -
    # 622,329,856 = 29,909,792,768.
    assert near(c.total - c.embedding - c.lm_head, 29.9, 1)


def test_deepseek_v3_671b_total_37b_active():
    # DeepSeek-V3 Technical Report (2024): 671B total, 37B activated; README_WEIGHTS.md: 36.6B
    # activated including the 0.9B output head, MTP 11.5B unique. D=7168, L=61 (3 dense),
    # 128 heads, MLA q_lora 1536, kv_lora 512, nope 128, rope 64, v 128.
    # MLA: q_a 7168*1536 = 11,010,048 + norm 1,536 + q_b 1536*128*192 = 37,748,736;
    #   kv_a 7168*576 = 4,128,768 + norm 512 + kv_b 512*128*256 = 16,777,216;
    #   o 128*128*7168 = 117,440,512 -> 187,107,328.
    # Dense layer: 187,107,328 + 14,336 + 3*7168*18432 = 396,361,728 -> 583,483,392 x 3.
    # MoE block: 256 x 3*7168*2048 = 256 x 44,040,192 = 11,274,289,152; shared 44,040,192;
    #   router 256*7168 = 1,835,008 + correction bias 256 -> 11,320,164,608.
    # MoE layer 187,107,328 + 14,336 + 11,320,164,608 = 11,507,286,272 x 58 = 667,422,603,776.
    # Total 1,750,450,176 + 667,422,603,776 + 2*129280*7168 = 1,853,358,080 + 7,168
    #   = 671,026,419,200.
    # Active MoE block 9 x 44,040,192 + 1,835,264 = 398,196,992; layer 585,318,656 x 58 =
    #   33,948,482,048; + 1,750,450,176 + 1,853,365,248 = 37,552,297,472; less the input
    #   embedding 926,679,040 = 36,625,618,432 (DeepSeek's 36.6B, "37B").
    # MTP: 2*7168 + 2*7168*7168 = 102,760,448 + one MoE layer + 7,168 = 11,610,068,224.
    c = counts("deepseek-v3")
    assert c.attention_per_layer == 187_107_328
    assert (c.dense_layers, c.moe_layers) == (3, 58)
    assert c.total == 671_026_419_200 and near(c.total, 671, 0)
    assert c.active == 37_552_297_472
    assert c.active_without_input_embedding == 36_625_618_432
    assert near(c.active_without_input_embedding, 36.6, 1) and near(c.active_without_input_embedding, 37, 0)
    assert c.mtp == 11_610_068_224  # reported apart: not in c.total above


def test_qwen1_5_moe_shared_expert_and_gate():
    # Qwen1.5-MoE-A2.7B (Qwen blog 2024): 14.3B total, 2.7B activated. D=2048, L=24, MHA 16 x
    # 128 with q/k/v biases (6,144), 60 experts top-4 of width 1408, one shared expert of width
    # 5632 with a D x 1 gate. Attention 4*2048^2 + 6,144 = 16,783,360; experts 60 x 8,650,752 =
    # 519,045,120; shared 3*2048*5632 = 34,603,008; gate 2,048; router 122,880; norms 4,096 ->
    # 570,560,512 x 24 = 13,693,452,288 + 622,329,856 + 2,048 = 14,315,784,192. Active layer
    # 16,783,360 + 34,603,008 + 34,603,008 + 2,048 + 122,880 + 4,096 = 86,118,400 x 24 +
    # 622,331,904 = 2,689,173,504.
    c = counts("qwen1.5-moe-a2.7b")
    assert c.total == 14_315_784_192 and near(c.total, 14.3, 1)
    assert c.active == 2_689_173_504 and near(c.active, 2.7, 1)


def test_deepseek_v2_lite_full_rank_query():
    # DeepSeek-V2-Lite (DeepSeek-V2 report, appendix): 15.7B total, 2.4B activated. No q_lora:
    # q_proj 2048*16*192 = 6,291,456; kv_a 2048*576 = 1,179,648 + 512; kv_b 512*16*256 =
    # 2,097,152; o 16*128*2048 = 4,194,304 -> 13,763,072. One dense layer (width 10944):
    # 13,763,072 + 4,096 + 67,239,936 = 81,007,104. MoE: 64 experts + 2 shared of width 1408
    # (8,650,752 each), router 131,072 -> 571,080,704; layer 584,847,872 x 26 =
    # 15,206,044,672; + 2*102400*2048 + 2,048 = 15,706,484,224. Active without the input
    # embedding: (13,767,168 + 8 x 8,650,752 + 131,072) x 26 + 81,007,104 + 209,717,248
    # = 2,451,435,008 ("2.4B").
    c = counts("deepseek-v2-lite")
    assert c.attention_per_layer == 13_763_072
    assert c.total == 15_706_484_224 and near(c.total, 15.7, 1)
    assert c.active_without_input_embedding == 2_451_435_008


def test_olmoe_full_qk_norm():
    # OLMoE (Muennighoff et al. 2024): 6.9B total, 1.3B active. D=2048, L=16, MHA 16 x 128 with
    # q_norm RMSNorm(2048) and k_norm RMSNorm(2048); 64 experts top-8 of width 1024.
    # Attention 4*2048^2 + 4,096 = 16,781,312; experts 64 x 6,291,456 = 402,653,184; router
    # 131,072; norms 4,096 -> 419,569,664 x 16 = 6,713,114,624 + 2*50304*2048 + 2,048 =
    # 6,919,161,856. Active (16,781,312 + 50,331,648 + 135,168) x 16 + 206,047,232 = 1,282,017,280.
    c = counts("olmoe-1b-7b")
    assert c.total == 6_919_161_856 and near(c.total, 6.9, 1)
    assert c.active == 1_282_017_280 and near(c.active, 1.3, 1)


def test_llama4_scout_text():
    # Llama 4 Scout (Meta 2025): 17B active (109B total counts the vision encoder too; the text
    # model alone is 107.8B). D=5120, L=48 all MoE, GQA 40/8 x 128, 16 experts top-1 plus one
    # shared expert, both width 8192. Attention 62,914,560; expert 125,829,120; router 81,920;
    # norms 10,240. Layer 62,914,560 + 17 x 125,829,120 + 92,160 = 2,202,101,760 x 48 =
    # 105,700,884,480 + 2*202048*5120 + 5,120 = 107,769,861,120. Active (62,914,560 +
    # 2 x 125,829,120 + 92,160) x 48 + 2,068,976,640 = 17,172,894,720.
    c = counts("llama4-scout-text")
    assert c.total == 107_769_861_120
    assert c.active == 17_172_894_720 and near(c.active, 17, 0)


def test_interleaved_and_first_dense_layers():
    m = load_model(str(HF / "llama4-scout-text" / "config.json"))
    maverick = load_model({**m.model_dump(), "moe": {**m.moe.model_dump(), "experts": 128, "layer_step": 2}})
    c = parameter_counts(maverick)
    assert (c.dense_layers, c.moe_layers) == (24, 24)  # Llama 4 Maverick: layers 1, 3, 5, ...
    assert c.ffn_per_layer == 3 * 5120 * 16384  # dense layers use intermediate_size_mlp
    assert [m.moe.is_moe_layer(i) for i in range(3)] == [True, True, True]
    ds = load_model(str(HF / "deepseek-v3" / "config.json")).moe
    assert [ds.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]


def test_dense_models_keep_active_equal_total():
    c = parameter_counts(load_model("seed-70b"))
    assert c.active == c.total == 69_500_936_192 and "active" not in c.as_dict()


# ------------------------------------------------------------------ refusals


def mixtral():
    return json.loads((HF / "mixtral-8x7b" / "config.json").read_text())


@pytest.mark.parametrize("change, field", [
    ({"embedding_multiplier_scale": 78.4}, "model.embedding_multiplier_scale"),  # Grok-1 as "mixtral"
    ({"sliding_window": 4096}, "model.sliding_window"),
    ({"hidden_act": "gelu"}, "model.hidden_act"),
    ({"model_type": "phi3"}, "model.model_type"),
    ({"model_type": "llama"}, "model.num_local_experts"),  # experts in a dense family's config
    ({"model_type": "llama4"}, "model.model_type"),  # the multimodal wrapper
])
def test_not_understood_is_refused_naming_the_key(change, field):
    with pytest.raises(SpecError) as e:
        load_model({**mixtral(), **change})
    assert field in [p.field for p in e.value.problems]


def test_deepseek_values_not_modelled_are_refused():
    cfg = json.loads((HF / "deepseek-v3" / "config.json").read_text())
    for change, field in (({"moe_layer_freq": 2}, "model.moe_layer_freq"),
                          ({"scoring_func": "sparsemixer"}, "model.scoring_func"),
                          ({"attention_bias": True}, "model.attention_bias"),
                          ({"index_topk": 2048}, "model.index_topk")):  # DeepSeek-V3.2 sparse attention
        with pytest.raises(SpecError) as e:
            load_model({**cfg, **change})
        assert [p.field for p in e.value.problems] == [field]


def test_cli_plan_of_a_moe_model_exits_2_naming_it(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**mixtral(), "moe_capacity": 1.0}))
    code = main(["plan", "--model", str(path), "--cluster", "seed-512", "--training", "seed-300b"])
    assert code == 2 and "model.moe_capacity" in capsys.readouterr().err
    # Understood MoE configs are planned with expert parallelism (tests/search/test_experts*.py).


def test_dense_qwen3_counts_its_per_head_qk_norms():
    # Qwen3-8B (model card: 8.2B total, 6.95B non-embedding): D=4096, L=36, GQA 32/8 x 128,
    # q_norm/k_norm RMSNorm(128) per layer (Qwen3Attention), SwiGLU 12288, vocab 151936 untied.
    # Attention 2*4096*4096 + 2*4096*1024 = 41,943,040 + 256 = 41,943,296; FFN 150,994,944;
    # norms 8,192 -> 192,946,432 x 36 = 6,946,071,552; + final norm 4,096 = 6,946,075,648
    # non-embedding; + 2*151936*4096 = 1,244,659,712 -> 8,190,735,360.
    cfg = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "head_dim": 128,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12288,
           "vocab_size": 151936, "tie_word_embeddings": False, "hidden_act": "silu"}
    c = parameter_counts(load_model(cfg))
    assert c.attention_per_layer == 41_943_296
    assert c.total - c.embedding - c.lm_head == 6_946_075_648 and near(c.total, 8.2, 1)
    assert c.total == 8_190_735_360
