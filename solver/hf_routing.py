"""Routing, RoPE-scaling and Llama 4 attention keys of Hugging Face MoE configs, read into
MoESpec / ModelSpec fields; a value the planner does not model is refused naming the key.

Meanings follow huggingface/transformers 008e5743:
- norm_topk_prob: the top-k routing weights are divided by their sum (Qwen2MoeSparseMoeBlock,
  Qwen3MoeSparseMoeBlock, OlmoeSparseMoeBlock, DeepseekV3MoE.route_tokens_to_experts);
  MixtralSparseMoeBlock always divides (no key).
- routed_scaling_factor, n_group, topk_group, topk_method: DeepseekV3TopkRouter /
  DeepseekV3MoE (noaux_tc: sigmoid scores plus the correction bias, groups ranked by the sum
  of their two best scores, the best topk_group kept); DeepSeek-V2's "greedy" ignores the
  groups; its "group_limited_greedy" ranks groups by their best score, which no framework
  export writes, and is refused.
- Llama4TextMoe.forward: top-k of the router logits, then a sigmoid of the kept logits (no
  renormalisation), the weight multiplying the expert's INPUT (routed_in = hidden * scores).
- Llama4TextAttention / Llama4TextDecoderLayer: a layer uses RoPE when no_rope_layers[i] is 1
  (default: every no_rope_layer_interval-th layer is NoPE), QK L2 norm (use_qk_norm) only on
  RoPE layers, chunked attention (attention_chunk_size) on RoPE layers, global attention on
  NoPE layers.
- rope_scaling: modeling_rope_utils.py (_compute_yarn_parameters: factor, beta_fast,
  beta_slow, mscale, mscale_all_dim, original_max_position_embeddings;
  _compute_llama3_parameters: factor, low_freq_factor, high_freq_factor,
  original_max_position_embeddings).
"""
from __future__ import annotations

from typing import Any

from solver.errors import Problem, SpecError

_YARN = {"factor": "factor", "original_max_position_embeddings": "original_max_positions",
         "beta_fast": "beta_fast", "beta_slow": "beta_slow", "mscale": "mscale",
         "mscale_all_dim": "mscale_all_dim"}
_LLAMA3 = {"factor": "factor", "original_max_position_embeddings": "original_max_positions",
           "low_freq_factor": "low_freq_factor", "high_freq_factor": "high_freq_factor"}
_SCALINGS = {"yarn": _YARN, "llama3": _LLAMA3}


def refuse(key: str, reason: str) -> SpecError:
    """A SpecError naming model.<key>."""
    return SpecError(f"model.{key}: {reason}", [Problem(f"model.{key}", reason)])


def _required(data: dict[str, Any], key: str, kind: str) -> Any:
    if data.get(key) is None:
        raise refuse(key, f"required field is missing (the {kind} reader does not guess its default)")
    return data[key]


def rope_scaling(data: dict[str, Any]) -> dict[str, Any] | None:
    """ModelSpec.rope_scaling of the config's rope_scaling (None when absent or 'default')."""
    rs = data.get("rope_scaling")
    if rs is None:
        return None
    if not isinstance(rs, dict):
        raise refuse("rope_scaling", f"{rs!r}: expected an object")
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "default":
        return None
    if kind not in _SCALINGS:
        raise refuse("rope_scaling.rope_type", f"{kind!r}: known are {', '.join(sorted(_SCALINGS))}")
    names = _SCALINGS[kind]
    unknown = sorted(k for k in rs if k not in names and k not in ("rope_type", "type"))
    if unknown:
        raise refuse(f"rope_scaling.{unknown[0]}", f"not a {kind} scaling key the reader understands")
    for key in ("factor", "original_max_position_embeddings"):
        _required(rs, key, f"rope_scaling {kind}")
    return {"kind": kind, **{names[k]: v for k, v in rs.items() if k in names}}


def topk_norm(data: dict[str, Any], kind: str) -> Any:
    """router_topk_norm: norm_topk_prob, required (its default differs between families)."""
    value = _required(data, "norm_topk_prob", kind)
    if not isinstance(value, bool):
        raise refuse("norm_topk_prob", f"{value!r}: expected true or false")
    return value


def deepseek_routing(data: dict[str, Any], kind: str) -> dict[str, Any]:
    """Routing fields of a DeepSeek-V2/V3 config: renormalisation, scale and expert groups."""
    method = data.get("topk_method", "greedy")
    groups, limit = data.get("n_group") or 1, data.get("topk_group") or 1
    if method == "greedy":  # DeepSeek-V2 greedy top-k ignores n_group / topk_group
        groups = limit = 1
    elif method == "group_limited_greedy" and groups != limit:
        raise refuse("topk_method", "'group_limited_greedy' ranks expert groups by their best score; "
                                    "not modelled (noaux_tc's sum of the two best is)")
    scale = data.get("routed_scaling_factor")
    return {"router_topk_norm": topk_norm(data, kind), "router_scale": 1.0 if scale is None else scale,
            "router_groups": groups, "router_group_topk": limit}


def _nope_interval(data: dict[str, Any], layers: int) -> int | None:
    """Every n-th layer without RoPE, from no_rope_layers (1: RoPE) or no_rope_layer_interval."""
    flags = data.get("no_rope_layers")
    if flags is None:
        return _required(data, "no_rope_layer_interval", "llama4_text")
    if not isinstance(flags, list) or len(flags) != layers or any(f not in (0, 1) for f in flags):
        raise refuse("no_rope_layers", f"expected {layers} flags of 0 (NoPE) or 1 (RoPE)")
    if all(flags):
        return None
    n = flags.index(0) + 1
    if flags != [int((i + 1) % n != 0) for i in range(layers)]:
        raise refuse("no_rope_layers", "NoPE layers other than every n-th layer are not modelled")
    return n


def llama4_fields(data: dict[str, Any], layers: Any) -> dict[str, Any]:
    """ModelSpec fields of Llama 4's attention (QK L2 norm, NoPE layers, chunked attention) and
    MoESpec routing fields (sigmoid of the top-k logits, on the expert input, no renormalisation)."""
    if not isinstance(layers, int):
        raise refuse("num_hidden_layers", f"{layers!r}: expected an integer")
    qk = _required(data, "use_qk_norm", "llama4_text")
    if not isinstance(qk, bool):
        raise refuse("use_qk_norm", f"{qk!r}: expected true or false")
    return {"qk_norm": "l2" if qk else "none", "nope_layer_interval": _nope_interval(data, layers),
            "attention_chunk_tokens": _required(data, "attention_chunk_size", "llama4_text"),
            "moe": {"router": "sigmoid", "router_topk_norm": False, "router_on_input": True}}
