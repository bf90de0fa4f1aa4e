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
    # Qwen2-7B (Hugging Face safetensors metadata): 7.62B. Our spec has one `bias` flag for
    # all linears, so Qwen2's q/k/v-only biases (28 x 4,608 = 129,024) are not counted (0.002%).
    ("qwen2-7b", 7.62e9),
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


def test_hf_config_missing_key_names_it():
    with pytest.raises(SpecError) as e:
        load_model({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                    "vocab_size": 100})
    assert [str(p) for p in e.value.problems] == ["model.intermediate_size: required field is missing"]


def test_hf_config_bad_value_is_reported_on_native_field():
    with pytest.raises(SpecError) as e:
        load_model({"num_hidden_layers": "32", "hidden_size": 64, "num_attention_heads": 4,
                    "intermediate_size": 128, "vocab_size": 100})
    assert [p.field for p in e.value.problems] == ["model.layers"]
