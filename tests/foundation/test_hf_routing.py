"""Routing details, RoPE scaling and Llama 4 attention read from the HF MoE configs (the
values are those printed in each fixture's config.json), refusal of values the readers do not
model, and the attention FLOPs of Llama 4's chunked local layers (arithmetic by hand)."""
import json
from pathlib import Path

import pytest

from solver.cost.accounting import attention_flops_per_token
from solver.errors import SpecError
from solver.presets import load_model

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def cfg(folder):
    return json.loads((HF / folder / "config.json").read_text())


# (router, top-k renormalised, routed scale, groups, groups kept, weights on expert input)
@pytest.mark.parametrize("folder, routing", [
    ("mixtral-8x7b", ("softmax", True, 1.0, 1, 1, False)),        # no key: always renormalised
    ("qwen3-30b-a3b", ("softmax", True, 1.0, 1, 1, False)),       # norm_topk_prob true
    ("qwen1.5-moe-a2.7b", ("softmax", False, 1.0, 1, 1, False)),  # norm_topk_prob false
    ("olmoe-1b-7b", ("softmax", False, 1.0, 1, 1, False)),        # norm_topk_prob false
    ("deepseek-v2-lite", ("softmax", False, 1.0, 1, 1, False)),   # greedy, n_group 1, scale 1.0
    ("deepseek-v3", ("sigmoid", True, 2.5, 8, 4, False)),         # noaux_tc, n_group 8, topk_group 4
    ("llama4-scout-text", ("sigmoid", False, 1.0, 1, 1, True)),   # sigmoid of the top-1 logit
])
def test_routing_fields_per_fixture(folder, routing):
    e = load_model(str(HF / folder / "config.json")).moe
    assert (e.router, e.router_topk_norm, e.router_scale, e.router_groups, e.router_group_topk,
            e.router_on_input) == routing


def test_llama4_attention_and_rope_scaling():
    m = load_model(str(HF / "llama4-scout-text" / "config.json"))
    # use_qk_norm true; no_rope_layers [1, 1, 1, 0] x 12; attention_chunk_size 8192
    assert (m.qk_norm, m.nope_layer_interval, m.attention_chunk_tokens) == ("l2", 4, 8192)
    assert (m.rope_scaling.kind, m.rope_scaling.factor, m.rope_scaling.original_max_positions,
            m.rope_scaling.low_freq_factor, m.rope_scaling.high_freq_factor) == ("llama3", 8.0, 8192, 1.0, 4.0)
    ds = load_model(str(HF / "deepseek-v3" / "config.json")).rope_scaling
    assert (ds.kind, ds.factor, ds.original_max_positions, ds.beta_fast, ds.beta_slow, ds.mscale,
            ds.mscale_all_dim) == ("yarn", 40, 4096, 32, 1, 1.0, 1.0)
    assert load_model(str(HF / "qwen3-30b-a3b" / "config.json")).rope_scaling is None
    # another regular pattern (every 2nd layer NoPE) and no NoPE layer at all
    assert load_model({**cfg("llama4-scout-text"), "no_rope_layers": [1, 0] * 24}).nope_layer_interval == 2
    assert load_model({**cfg("llama4-scout-text"), "no_rope_layers": [1] * 48}).nope_layer_interval is None


@pytest.mark.parametrize("folder, change, field", [
    ("llama4-scout-text", {"rope_scaling": {"rope_type": "longrope", "factor": 4.0}}, "model.rope_scaling.rope_type"),
    ("deepseek-v3", {"rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                                      "attention_factor": 0.5}}, "model.rope_scaling.attention_factor"),
    ("llama4-scout-text", {"no_rope_layers": [1, 1, 1, 0] * 11 + [0, 1, 1, 1]}, "model.no_rope_layers"),
    ("llama4-scout-text", {"use_qk_norm": None}, "model.use_qk_norm"),
    ("llama4-scout-text", {"attention_chunk_size": None}, "model.attention_chunk_size"),
    ("qwen3-30b-a3b", {"norm_topk_prob": None}, "model.norm_topk_prob"),
    ("deepseek-v3", {"topk_method": "group_limited_greedy", "topk_group": 3}, "model.topk_method"),
    ("deepseek-v3", {"n_group": 3}, "model.moe.router_groups"),  # 3 does not divide 256 experts
])
def test_values_not_modelled_are_refused_naming_the_key(folder, change, field):
    with pytest.raises(SpecError) as e:
        load_model({**cfg(folder), **change})
    assert field in [p.field for p in e.value.problems]


def test_chunked_attention_flops_by_hand():
    # Llama 4 Scout: H 40 x dh 128, 48 layers, every 4th NoPE (12 global layers), the other 36
    # chunked at C = 8192. Per token 12 H dh = 61,440 times the keys summed over layers:
    # S = 8192 (<= C): 48 x 8192 -> 24,159,191,040 (as without chunks).
    # S = 16384 = 2 C: 12 x 16384 + 36 x (2 x 8192^2 / 16384 = 8192) = 491,520 -> 30,198,988,800.
    # S = 20000 = 2 C + 3616: chunked mean (2 x 67,108,864 + 13,075,456) / 20000 = 7,364.6592;
    #   12 x 20000 + 36 x 7,364.6592 = 505,127.7312 -> 31,035,047,804.928.
    m = load_model(str(HF / "llama4-scout-text" / "config.json"))
    assert attention_flops_per_token(m, 8192) == 24_159_191_040
    assert attention_flops_per_token(m, 16384) == 30_198_988_800
    assert attention_flops_per_token(m, 20000) == pytest.approx(31_035_047_804.928, rel=1e-12)
    unchunked = m.model_copy(update={"attention_chunk_tokens": None})
    assert attention_flops_per_token(unchunked, 16384) == 61_440 * 48 * 16384


def test_deepseek_v3_preset_routes_as_its_config():
    # The preset is the config.json's model; only the YaRN context extension (applied after
    # the 4K pre-training, DeepSeek-V3 report sec. 4.3) is left out of it.
    preset, hf = load_model("deepseek-v3"), load_model(str(HF / "deepseek-v3" / "config.json"))
    assert preset.moe == hf.moe and preset.rope_scaling is None and hf.rope_scaling is not None
