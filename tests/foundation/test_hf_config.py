"""Hugging Face config.json fixtures (tests/fixtures/hf, written from the model cards)."""
from pathlib import Path

import pytest

from solver.cost.accounting import parameter_counts
from solver.errors import SpecError
from solver.presets import load_model

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


@pytest.mark.parametrize("folder,published", [
    # Meta Llama 3 8B model card: 8.03B.
    ("llama3-8b", 8.03e9),
    # Mistral 7B v0.1 (Hugging Face safetensors metadata): 7.24B.
    ("mistral-7b", 7.24e9),
    # Qwen2-7B (Hugging Face safetensors metadata): 7.62B; exact count in test_qwen2_qkv_bias_exact.
    ("qwen2-7b", 7.62e9),
    # Gemma 2B (Hugging Face safetensors metadata): 2.51B, tied; exact in test_gemma_missing_tie_means_tied.
    ("gemma-2b", 2.51e9),
    # GPT-2 small (Radford et al. 2019; HF openai-community/gpt2): 124M, exactly 124,439,808.
    ("gpt2", 124.44e6),
])
def test_hf_parameter_totals(folder, published):
    total = parameter_counts(load_model(str(HF / folder / "config.json"))).total
    assert abs(total - published) / published < 0.005


def test_hf_llama_maps_to_the_native_preset():
    hf = load_model(str(HF / "llama3-8b" / "config.json"))
    native = load_model("llama3-8b")
    fields = ("layers", "hidden", "ffn_hidden", "ffn_gated", "heads", "kv_heads", "head_dim",
              "vocab", "tied_embeddings", "position_embedding", "norm", "bias")
    assert {f: getattr(hf, f) for f in fields} == {f: getattr(native, f) for f in fields}


def test_gpt2_exact():
    # embedding 50257*768 = 38,597,376; positions 1024*768 = 786,432;
    # layer: attention 4*768^2 + 4*768 = 2,362,368; MLP 8*768^2 + 5*768 = 4,722,432;
    # two LayerNorms 4*768 = 3,072 -> 7,087,872 x 12 = 85,054,464; final LayerNorm 1,536.
    m = load_model(str(HF / "gpt2" / "config.json"))
    assert (m.position_embedding, m.norm, m.bias, m.tied_embeddings) == ("learned", "layernorm", True, True)
    assert parameter_counts(m).total == 124_439_808


def test_qwen2_qkv_bias_exact():
    # Qwen/Qwen2-7B: 7,615,616,512 parameters (safetensors metadata, "7.62B"). By hand:
    # embedding and untied LM head 152,064 x 3,584 = 544,997,376 each;
    # attention: q and o 3,584 x 3,584 = 12,845,056 each, k and v 3,584 x (4 x 128) = 1,835,008
    #   each -> 29,360,128, plus biases on q, k, v only 3,584 + 512 + 512 = 4,608 -> 29,364,736;
    # SwiGLU 3 x 3,584 x 18,944 = 203,685,888; two RMSNorms 7,168 -> 233,057,792 per layer
    #   x 28 = 6,525,618,176; final norm 3,584. Total 1,089,994,752 + 6,525,618,176 + 3,584.
    m = load_model(str(HF / "qwen2-7b" / "config.json"))
    assert (m.bias, m.qkv_bias) == (False, True)
    counts = parameter_counts(m)
    assert counts.attention_per_layer == 29_364_736
    assert counts.total == 7_615_616_512


def test_qkv_bias_is_implied_by_bias():
    base = dict(load_model(str(HF / "qwen2-7b" / "config.json")).model_dump(), qkv_bias=False)
    plain = parameter_counts(load_model(base)).attention_per_layer
    assert parameter_counts(load_model({**base, "qkv_bias": True})).attention_per_layer == plain + 4_608
    # `bias` adds the output projection's bias (3,584) too; with it qkv_bias changes nothing.
    both = parameter_counts(load_model({**base, "bias": True, "qkv_bias": True})).attention_per_layer
    assert both == parameter_counts(load_model({**base, "bias": True})).attention_per_layer == plain + 8_192


def test_qwen2_megatron_args_add_qkv_bias():
    from service.launchers import megatron_args
    from solver.presets import load_layout, load_training

    m = load_model(str(HF / "qwen2-7b" / "config.json"))
    args = megatron_args(m, load_training("seed-300b"), load_layout({"tp": 4}))
    assert "--disable-bias-linear" in args and "--add-qkv-bias" in args
    assert "--add-qkv-bias" not in megatron_args(load_model("llama3-8b"), load_training("seed-300b"),
                                                 load_layout({"tp": 4}))


def test_gemma_missing_tie_means_tied():
    # google/gemma-2b's config.json has no tie_word_embeddings: GemmaConfig's default (True).
    # By hand: embedding 256,000 x 2,048 = 524,288,000 (no LM head: tied); per layer q and o
    # 2,048 x 2,048 = 4,194,304 each, k and v 2,048 x 256 = 524,288 each (MQA) -> 9,437,184,
    # GeGLU 3 x 2,048 x 16,384 = 100,663,296, two RMSNorms 4,096 -> 110,104,576 x 18 =
    # 1,981,882,368; final norm 2,048. Non-embedding 1,981,884,416 = the Gemma report's Table 2
    # (Gemma Team 2024); total 2,506,172,416 ("2.51B" on the Hub). Untied would be 3.03B.
    m = load_model(str(HF / "gemma-2b" / "config.json"))
    assert m.tied_embeddings and (m.kv_heads, m.head_dim, m.ffn_gated) == (1, 256, True)
    counts = parameter_counts(m)
    assert counts.total - counts.embedding == 1_981_884_416
    assert counts.total == 2_506_172_416


def test_missing_tie_of_unknown_model_type_is_refused():
    # A model_type no reader knows is refused outright (issue 13: never planned as something
    # else), with or without tie_word_embeddings; without a model_type the tie must be stated.
    cfg = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "model_type": "somethingnew"}
    for extra in ({}, {"tie_word_embeddings": False}):
        with pytest.raises(SpecError) as e:
            load_model({**cfg, **extra})
        assert [p.field for p in e.value.problems] == ["model.model_type"]
    bare = {k: v for k, v in cfg.items() if k != "model_type"}
    with pytest.raises(SpecError) as e:
        load_model(bare)
    assert [p.field for p in e.value.problems] == ["model.tie_word_embeddings"]
    assert not load_model({**bare, "tie_word_embeddings": False}).tied_embeddings


def test_hf_config_missing_key_names_it():
    with pytest.raises(SpecError) as e:
        load_model({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                    "vocab_size": 100})
    assert [str(p) for p in e.value.problems] == ["model.intermediate_size: required field is missing"]


def test_hf_config_bad_value_is_reported_on_native_field():
    with pytest.raises(SpecError) as e:
        load_model({"num_hidden_layers": "32", "hidden_size": 64, "num_attention_heads": 4,
                    "intermediate_size": 128, "vocab_size": 100, "model_type": "llama"})
    assert [p.field for p in e.value.problems] == ["model.layers"]
