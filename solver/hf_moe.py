"""Hugging Face config.json readers for mixture-of-experts and MLA families.

Families (model_type): mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3,
llama4_text. Each reader knows every key its family's published config.json carries: the
keys it reads, and the keys that change neither parameter shapes nor training FLOPs
(token ids, initialisation, dropout, RoPE frequencies, router loss coefficients, inference
caches). Any other key, or a value the planner does not model (sliding-window attention,
explicit dense-layer lists, attention biases with MLA), is refused naming the key: a config
that is half understood is never planned as something else.

Key meanings follow huggingface/transformers 008e5743,
src/transformers/models/<type>/configuration_<type>.py and modeling_<type>.py.
"""
from __future__ import annotations

from typing import Any

from solver.errors import Problem, SpecError
from solver.hf_routing import deepseek_routing, llama4_fields, rope_scaling, topk_norm

# Keys that change neither parameter shapes nor training FLOPs (every family).
_INERT = frozenset({
    "architectures", "model_type", "_name_or_path", "transformers_version", "torch_dtype", "dtype",
    "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "rms_norm_eps",
    "rope_theta", "max_position_embeddings", "use_cache", "attention_dropout",
    "output_router_logits", "router_aux_loss_coef", "auto_map", "return_dict",
    "output_attentions", "output_hidden_states", "router_jitter_noise",
    # quantization_config describes how the published weights are stored (DeepSeek-V3: FP8
    # e4m3 128x128 blocks), not the architecture; training precision is training.precision.
    "quantization_config",
})
_DENSE_READ = frozenset({"rope_scaling", "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                         "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings",
                         "hidden_act", "attention_bias"})
_QWEN = frozenset({"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                   "mlp_only_layers", "use_sliding_window", "sliding_window", "max_window_layers",
                   "norm_topk_prob"})
_DEEPSEEK = frozenset({
    "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
    "first_k_dense_replace", "moe_layer_freq", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "scoring_func", "topk_method", "num_nextn_predict_layers",
    "n_group", "topk_group", "routed_scaling_factor", "norm_topk_prob",
    # aux-loss weights, the HF port's expert-parallel and pretraining-TP hints and RoPE layout
    # change no parameter, no FLOP count and not the model trained:
    "aux_loss_alpha", "seq_aux", "ep_size", "pretraining_tp", "rope_interleave"})
KNOWN_KEYS: dict[str, frozenset[str]] = {
    "mixtral": _DENSE_READ | {"num_local_experts", "num_experts_per_tok", "sliding_window"},
    "qwen2_moe": _DENSE_READ | _QWEN | {"shared_expert_intermediate_size", "qkv_bias"},
    "qwen3_moe": _DENSE_READ | _QWEN,
    "olmoe": _DENSE_READ | {"num_experts", "num_experts_per_tok", "clip_qkv", "norm_topk_prob"},
    "deepseek_v2": _DENSE_READ | _DEEPSEEK,
    "deepseek_v3": _DENSE_READ | _DEEPSEEK,
    # Llama 4: QK L2 norm, NoPE layers and chunked attention are read (solver.hf_llama4);
    # temperature tuning (a query scale on the NoPE layers) changes no parameter and no FLOP.
    "llama4_text": _DENSE_READ | {
        "num_local_experts", "num_experts_per_tok", "intermediate_size_mlp", "interleave_moe_layer_step",
        "moe_layers", "use_qk_norm", "no_rope_layers", "no_rope_layer_interval", "attention_chunk_size",
        "attn_temperature_tuning", "floor_scale", "attn_scale", "for_llm_compressor",
        "cache_implementation"},
}


# tie_word_embeddings default of each config class (transformers 008e5743): MixtralConfig,
# Qwen2MoeConfig, Qwen3MoeConfig, OlmoeConfig, DeepseekV2Config, DeepseekV3Config all False.
# llama4_text is absent: its published text_config omits the key (the wrapper carries it).
_TIED_DEFAULT = {"mixtral": False, "qwen2_moe": False, "qwen3_moe": False, "olmoe": False,
                 "deepseek_v2": False, "deepseek_v3": False}


def _refuse(key: str, reason: str) -> SpecError:
    return SpecError(f"model.{key}: {reason}", [Problem(f"model.{key}", reason)])


def _need(data: dict[str, Any], key: str) -> Any:
    if data.get(key) is None:
        raise _refuse(key, "required field is missing")
    return data[key]


def _tied(data: dict[str, Any], kind: str) -> Any:
    if data.get("tie_word_embeddings") is not None:
        return data["tie_word_embeddings"]
    if kind in _TIED_DEFAULT:
        return _TIED_DEFAULT[kind]
    raise _refuse("tie_word_embeddings", f"required field is missing ({kind} has no known default)")


def _check_keys(kind: str, data: dict[str, Any]) -> None:
    unknown = sorted(k for k in data if k not in KNOWN_KEYS[kind] and k not in _INERT)
    if unknown:
        problems = [Problem(f"model.{k}", f"key not understood by the {kind} reader; refusing to "
                                          "plan the model as something else") for k in unknown]
        raise SpecError("; ".join(map(str, problems)), problems)
    if data.get("hidden_act", "silu") != "silu":
        raise _refuse("hidden_act", f"{data['hidden_act']!r}: the {kind} reader models SwiGLU experts (silu)")
    if data.get("attention_bias"):
        raise _refuse("attention_bias", f"true is not modelled for {kind}")


def _base(data: dict[str, Any], kind: str) -> dict[str, Any]:
    """The fields every family shares (attention as GQA; the dense FFN width F)."""
    hidden, heads = _need(data, "hidden_size"), _need(data, "num_attention_heads")
    whole = isinstance(hidden, int) and isinstance(heads, int) and heads
    return {
        "name": data.get("_name_or_path") or kind,
        "layers": _need(data, "num_hidden_layers"), "hidden": hidden,
        "ffn_hidden": _need(data, "intermediate_size"), "ffn_gated": True,
        "heads": heads, "kv_heads": data.get("num_key_value_heads") or heads,
        "head_dim": data.get("head_dim") or (hidden // heads if whole else hidden),
        "vocab": _need(data, "vocab_size"), "tied_embeddings": _tied(data, kind),
        "position_embedding": "rope", "norm": "rmsnorm", "bias": False,
        "rope_scaling": rope_scaling(data),
    }


def _no_window(data: dict[str, Any], kind: str) -> None:
    if data.get("use_sliding_window") or (kind == "mixtral" and data.get("sliding_window") is not None):
        key = "use_sliding_window" if data.get("use_sliding_window") else "sliding_window"
        raise _refuse(key, "sliding-window attention is not modelled")


def _routed(data: dict[str, Any], experts_key: str, expert_ffn_hidden: int) -> dict[str, Any]:
    """The routed-expert fields every MoE reader fills: expert count, top-k and width."""
    return {"experts": _need(data, experts_key), "experts_per_token": _need(data, "num_experts_per_tok"),
            "expert_ffn_hidden": expert_ffn_hidden}


def _mixtral(data: dict[str, Any]) -> dict[str, Any]:
    out = _base(data, "mixtral")
    out["moe"] = _routed(data, "num_local_experts", out["ffn_hidden"])
    return out


def _qwen(data: dict[str, Any], kind: str) -> dict[str, Any]:
    out = _base(data, kind)
    if data.get("mlp_only_layers"):
        raise _refuse("mlp_only_layers", "explicit dense-layer lists are not modelled")
    out["moe"] = {**_routed(data, "num_experts", _need(data, "moe_intermediate_size")),
                  "layer_step": data.get("decoder_sparse_step") or 1, "router_topk_norm": topk_norm(data, kind)}
    if kind == "qwen2_moe":  # Qwen2MoeAttention: q/k/v_proj bias=True; one gated shared expert
        out["qkv_bias"] = True
        out["moe"].update(shared_experts=1, shared_expert_gate=True,
                          shared_expert_ffn_hidden=_need(data, "shared_expert_intermediate_size"))
    else:
        out["qk_norm"] = "head"  # Qwen3MoeAttention q_norm/k_norm: RMSNorm(head_dim)
    return out


def _olmoe(data: dict[str, Any]) -> dict[str, Any]:
    out = _base(data, "olmoe")
    out["qk_norm"] = "full"  # OlmoeAttention: q_norm RMSNorm(D), k_norm RMSNorm(K dh)
    out["moe"] = {**_routed(data, "num_experts", out["ffn_hidden"]), "router_topk_norm": topk_norm(data, "olmoe")}
    return out


def _deepseek(data: dict[str, Any], kind: str) -> dict[str, Any]:
    out = _base(data, kind)
    if data.get("moe_layer_freq", 1) != 1:
        raise _refuse("moe_layer_freq", f"{data['moe_layer_freq']!r}: only every layer after "
                                        "first_k_dense_replace (1) is modelled")
    scoring = data.get("scoring_func", "softmax")
    if scoring not in ("softmax", "sigmoid"):
        raise _refuse("scoring_func", f"{scoring!r}: known are 'softmax' and 'sigmoid'")
    method = data.get("topk_method", "greedy")
    if method not in ("greedy", "group_limited_greedy", "noaux_tc"):
        raise _refuse("topk_method", f"{method!r}: known are greedy, group_limited_greedy, noaux_tc")
    nope, rope = _need(data, "qk_nope_head_dim"), _need(data, "qk_rope_head_dim")
    out.update(kv_heads=out["heads"], head_dim=nope + rope if isinstance(nope, int) and isinstance(rope, int) else nope,
               mtp_layers=data.get("num_nextn_predict_layers") or 0)
    out["mla"] = {"q_lora_rank": data.get("q_lora_rank"), "kv_lora_rank": _need(data, "kv_lora_rank"),
                  "qk_nope_head_dim": nope, "qk_rope_head_dim": rope,
                  "v_head_dim": _need(data, "v_head_dim")}
    out["moe"] = {**_routed(data, "n_routed_experts", _need(data, "moe_intermediate_size")),
                  "shared_experts": data.get("n_shared_experts") or 0,
                  "first_dense_layers": data.get("first_k_dense_replace") or 0,
                  "router": scoring, "router_bias": method == "noaux_tc",
                  **deepseek_routing(data, kind)}
    return out


def _llama4(data: dict[str, Any]) -> dict[str, Any]:
    out = _base(data, "llama4_text")
    step = data.get("interleave_moe_layer_step") or 1
    layers = out["layers"]
    if data.get("moe_layers") is not None and isinstance(layers, int) and isinstance(step, int) and step > 0 \
            and list(data["moe_layers"]) != list(range(step - 1, layers, step)):
        raise _refuse("moe_layers", "a list other than every interleave_moe_layer_step-th layer "
                                    "is not modelled")
    # Llama4TextMoe: experts and the one shared expert have width intermediate_size; dense
    # layers (Llama4TextMLP) intermediate_size_mlp.
    out["ffn_hidden"] = _need(data, "intermediate_size_mlp")
    extra = llama4_fields(data, layers)
    out["moe"] = {**_routed(data, "num_local_experts", _need(data, "intermediate_size")),
                  "shared_experts": 1, "layer_step": step, **extra.pop("moe")}
    return {**out, **extra}


def read_moe_config(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """Native ModelSpec fields of a MoE/MLA family's config.json. Raises: SpecError."""
    _check_keys(kind, data)
    _no_window(data, kind)
    if kind == "mixtral":
        return _mixtral(data)
    if kind in ("qwen2_moe", "qwen3_moe"):
        return _qwen(data, kind)
    if kind == "olmoe":
        return _olmoe(data)
    if kind == "llama4_text":
        return _llama4(data)
    return _deepseek(data, kind)
