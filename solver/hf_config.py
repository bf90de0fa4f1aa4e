"""Hugging Face config.json -> ModelSpec.

Llama/Mistral/Qwen2 keys: num_hidden_layers, hidden_size, intermediate_size,
num_attention_heads, num_key_value_heads, head_dim, vocab_size, tie_word_embeddings,
rope_theta, rms_norm_eps.
GPT-2 keys: n_layer, n_embd, n_head, n_inner (default 4 x n_embd), vocab_size, n_positions,
layer_norm_epsilon.

Mixture-of-experts and MLA families (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2/V3,
Llama 4 text) are read by solver.hf_moe, which refuses any key it does not know. A model_type
no reader knows is refused, and so is a config of a dense family that carries expert or
latent-attention keys (MOE_SIGNS): it is never planned as a dense model.

A key a config.json leaves out takes its model class's default (transformers writes only the
keys that differ from them), so `tie_word_embeddings` and the attention biases depend on
`model_type`; see _TIED_DEFAULT and _QKV_BIAS below.
"""
from __future__ import annotations

from typing import Any

from solver.errors import Problem, SpecError
from solver.hf_moe import KNOWN_KEYS, read_moe_config
from solver.hf_routing import rope_scaling
from solver.specs import ModelSpec
from topology.spec import parse_spec

_LLAMA_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads")
_GPT2_KEYS = ("n_layer", "n_embd", "n_head")

# `tie_word_embeddings` default of each config class (huggingface/transformers 008e5743,
# src/transformers/models/<type>/configuration_<type>.py): LlamaConfig, MistralConfig,
# Qwen2Config, Qwen3Config False; GemmaConfig, Gemma2Config True. GPT-2 keeps PretrainedConfig's
# True. Another model_type without the key is refused rather than guessed.
_TIED_DEFAULT = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False,
                 "gemma": True, "gemma2": True, "gpt2": True}
# Bias on the Q, K and V projections only: Qwen2Attention builds q/k/v_proj with bias=True and
# o_proj, gate/up/down_proj with bias=False (transformers 00d4b3d2, models/qwen2/modeling_qwen2.py).
_QKV_BIAS = ("qwen2",)
# Qwen3Attention: q_norm and k_norm are RMSNorm(head_dim) (transformers 008e5743,
# models/qwen3/modeling_qwen3.py).
_QK_NORM_HEAD = ("qwen3",)
# Keys that mark experts or latent attention (any family's spelling); a dense reader that met
# one would misread the model.
MOE_SIGNS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
             "moe_intermediate_size", "num_experts_per_tok", "n_shared_experts",
             "shared_expert_intermediate_size", "kv_lora_rank", "q_lora_rank", "text_config")


def is_hf_config(data: dict[str, Any]) -> bool:
    """True when the object looks like a Hugging Face config (Llama- or GPT-2-style keys, or a
    model_type / text_config, which no native ModelSpec carries)."""
    return (all(k in data for k in _LLAMA_KEYS) or all(k in data for k in _GPT2_KEYS)
            or "model_type" in data or "text_config" in data)


def _need(data: dict[str, Any], key: str) -> Any:
    if key not in data:
        raise SpecError(f"model.{key}: required field is missing",
                        [Problem(f"model.{key}", "required field is missing")])
    return data[key]


def _llama(data: dict[str, Any]) -> dict[str, Any]:
    hidden, heads = _need(data, "hidden_size"), _need(data, "num_attention_heads")
    whole = isinstance(hidden, int) and isinstance(heads, int) and heads
    head_dim = data.get("head_dim") or (hidden // heads if whole else hidden)
    return {
        "name": data.get("_name_or_path") or data.get("model_type") or "hf-model",
        "layers": _need(data, "num_hidden_layers"),
        "hidden": hidden,
        "ffn_hidden": _need(data, "intermediate_size"),
        "ffn_gated": data.get("hidden_act", "silu") in ("silu", "swiglu", "gelu_pytorch_tanh", "geglu")
        or data.get("model_type") in ("llama", "mistral", "qwen2", "qwen3", "gemma"),
        "heads": heads,
        "kv_heads": data.get("num_key_value_heads") or heads,
        "head_dim": head_dim,
        "vocab": _need(data, "vocab_size"),
        "tied_embeddings": _tied(data),
        "position_embedding": "rope",
        "norm": "rmsnorm",
        "bias": bool(data.get("attention_bias", False) or data.get("mlp_bias", False)),
        "qkv_bias": data.get("model_type") in _QKV_BIAS,
        "qk_norm": "head" if data.get("model_type") in _QK_NORM_HEAD else "none",
        "rope_base": data.get("rope_theta"),
        "rope_scaling": rope_scaling(data),  # Llama 3.1+: llama3; an unknown kind is refused
        "norm_eps": data.get("rms_norm_eps"),
    }


def _tied(data: dict[str, Any]) -> Any:
    """`tie_word_embeddings`, or its model class's default when the key is absent.

    Raises: SpecError when the key is absent and the model_type's default is not known.
    """
    if "tie_word_embeddings" in data:
        return data["tie_word_embeddings"]
    kind = data.get("model_type")
    if kind in _TIED_DEFAULT:
        return _TIED_DEFAULT[kind]
    reason = (f"required field is missing (model_type {kind!r} has no known default; "
              f"known: {', '.join(sorted(_TIED_DEFAULT))})")
    raise SpecError(f"model.tie_word_embeddings: {reason}", [Problem("model.tie_word_embeddings", reason)])


def _gpt2(data: dict[str, Any]) -> dict[str, Any]:
    hidden, heads = _need(data, "n_embd"), _need(data, "n_head")
    return {
        "name": data.get("_name_or_path") or data.get("model_type") or "gpt2",
        "layers": _need(data, "n_layer"),
        "hidden": hidden,
        "ffn_hidden": data.get("n_inner") or (4 * hidden if isinstance(hidden, int) else hidden),
        "ffn_gated": False,
        "heads": heads,
        "kv_heads": heads,
        "head_dim": hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else hidden,
        "vocab": _need(data, "vocab_size"),
        "tied_embeddings": data.get("tie_word_embeddings", _TIED_DEFAULT["gpt2"]),
        "position_embedding": "learned",
        "norm": "layernorm",
        "bias": True,
        "max_positions": data.get("n_positions") or data.get("n_ctx") or 1024,
        "norm_eps": data.get("layer_norm_epsilon"),
    }


def _refuse(key: str, reason: str) -> SpecError:
    return SpecError(f"model.{key}: {reason}", [Problem(f"model.{key}", reason)])


def _check_dense(data: dict[str, Any]) -> None:
    """Refuse a model_type no reader knows, and expert/latent-attention keys in a dense config."""
    kind = data.get("model_type")
    if kind == "llama4":
        raise _refuse("model_type", "'llama4' is the multimodal wrapper; pass its text_config "
                                    "(model_type 'llama4_text'): only the text model is planned")
    if kind is not None and kind not in _TIED_DEFAULT:
        known = ", ".join(sorted([*_TIED_DEFAULT, *KNOWN_KEYS]))
        raise _refuse("model_type", f"{kind!r} is not a model_type the reader understands (known: {known})")
    signs = [k for k in MOE_SIGNS if data.get(k) not in (None, 0, [], {})]
    if signs:
        problems = [Problem(f"model.{k}", f"mixture-of-experts or latent-attention key in a "
                                          f"{kind or 'model_type-less'} config; no reader for it")
                    for k in signs]
        raise SpecError("; ".join(map(str, problems)), problems)


def model_from_hf_config(data: dict[str, Any]) -> ModelSpec:
    """Map a Hugging Face config.json object to a ModelSpec. Raises: SpecError."""
    kind = data.get("model_type")
    if kind in KNOWN_KEYS:
        return parse_spec(ModelSpec, read_moe_config(kind, data), "model")
    _check_dense(data)
    native = _llama(data) if all(k in data for k in _LLAMA_KEYS) else _gpt2(data)
    return parse_spec(ModelSpec, native, "model")
