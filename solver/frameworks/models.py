"""Which models (and model-level training options) each framework's exported configuration can
express, checked before any layout is searched or ranked: a model the framework's own model
code cannot build, or that trainplan's export for it does not write, is refused up front
(SpecError naming the field and the framework source), never ranked and then refused by the
export (service.launchers applies the same function).

Each rule cites the file of the framework that imposes it (repository, path, commit):
- Megatron-LM NVIDIA/Megatron-LM d98e8a64: megatron/core/transformer/attention.py L1712-1745
  (--qk-layernorm builds q_layernorm / k_layernorm of hidden_size_per_attention_head: a
  per-head norm only).
- torchtitan pytorch/torchtitan b5bcd76c: the dense export writes models/llama3 (no biases,
  RMSNorm + RoPE + SwiGLU, head_dim = dim / n_heads, no QK norm); a MoE model is written with
  models/qwen3's Qwen3TransformerBlock / Qwen3Model over models/common/config_utils.py
  (make_gqa_config: no bias, qk_norm an RMSNorm of head_dim; make_moe_config / moe.py MoE:
  shared experts summed ungated) or, with latent attention, models/deepseek_v3
  (build_mla_moe_layers: leading dense layers then MoE layers, each with
  num_shared_experts x moe_hidden_dim shared experts; mtp.py: MTP layers only in DeepSeekV3Model, and
  only at PP 1 and CP 1, model_degrees_ok); the "standard" token
  dispatcher (config_utils.make_token_dispatcher_config -> AllToAllTokenDispatcher) drops no
  tokens.
- DeepSpeed deepspeedai/DeepSpeed edaa7221: deepspeed/moe/layer.py MoE / sharded_moe.py
  TopKGate (softmax scores only; use_residual is a learned softmax mix of one dense MLP, not
  a shared expert; no score-correction bias); no latent attention, QK norm or MTP in the
  Hugging Face Llama config the export writes.
"""
from __future__ import annotations

from typing import Any

from solver.errors import Problem, SpecError
from solver.frameworks.capability import Violation
from solver.frameworks.profile import Source

MEGATRON = ("NVIDIA/Megatron-LM", "d98e8a64ddf34856e74b24714e3bedb2f5a39553")
TITAN = ("pytorch/torchtitan", "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a")
DEEPSPEED = ("deepspeedai/DeepSpeed", "edaa7221267243c7be7fb49c5d5f5c4fb97b4641")
TORCHAO = ("pytorch/ao", "36027d82d1ad9949597ea16002ff4940374b1b94")  # torchtitan's FP8 kernels


class _Rules(list):
    """(field, reason, Source) triples: one model part the framework cannot express each."""

    def add(self, field: str, reason: str, repo: tuple[str, str], path: str) -> None:
        self.append((field, reason, Source(repository=repo[0], path=path, commit=repo[1], note=reason)))


def _cite(repo: tuple[str, str], path: str) -> str:
    return f"{repo[0]} {path} @ {repo[1][:8]}"


def _found(framework: str, m: Any, t: Any | None) -> _Rules:
    rules = {"megatron-core": _megatron, "torchtitan": _torchtitan, "deepspeed": _deepspeed}[framework]
    out = rules(m)
    if t is not None:
        out += training_rules(framework, m, t)
    return out


def model_rules(framework: str, m: Any, t: Any | None = None) -> list[tuple[str, str]]:
    """(field, rule with its source) for every part of model `m` (and of training `t`'s
    model-level options) that `framework`'s exported configuration cannot express. Empty: it can."""
    return [(f, f"{r} ({_cite((s.repository, s.commit), s.path)})") for f, r, s in _found(framework, m, t)]


def model_violations(framework: str, m: Any, t: Any | None = None) -> list[Violation]:
    """The same rules as capability Violations (rule = the field), for `estimate`'s report."""
    return [Violation(f, f"{framework}: {f}: {r}", (s,)) for f, r, s in _found(framework, m, t)]


def refuse_model(framework: str, m: Any, t: Any | None = None) -> None:
    """Raise SpecError naming each field `framework` cannot run (nothing when it can)."""
    found = model_rules(framework, m, t)
    if found:
        problems = [Problem(f, r) for f, r in found]
        raise SpecError(f"{framework} cannot run this model as specified: "
                        + "; ".join(str(p) for p in problems), problems)


def _megatron(m: Any) -> _Rules:
    out = _Rules()
    if m.position_embedding == "rope" and m.rope_base is not None and m.rope_base != int(m.rope_base):
        out.add("model.rope_base", "Megatron-LM's --rotary-base takes an integer", MEGATRON,
                "megatron/training/arguments.py")
    if m.qk_norm == "full":
        out.add("model.qk_norm", "Megatron-LM's --qk-layernorm normalizes each attention head "
                "(q_layernorm/k_layernorm of hidden_size_per_attention_head), not the whole projection",
                MEGATRON, "megatron/core/transformer/attention.py")
    if m.attention_chunk_tokens is not None:
        out.add("model.attention_chunk_tokens", "Megatron-LM's TransformerConfig has no chunked local "
                "attention (only sliding windows)", MEGATRON, "megatron/core/transformer/transformer_config.py")
    if m.qk_norm == "l2" and (m.nope_layer_interval or m.mla is not None):
        out.add("model.qk_norm", "Megatron-LM's --qk-l2-norm puts an L2Norm on every layer's queries and "
                "keys (none with MLA); the model has it on its RoPE layers only", MEGATRON,
                "megatron/core/models/gpt/gpt_layer_specs.py")
    if m.rope_scaling is not None:
        _megatron_rope_scaling(m, out)
    if m.moe is not None:
        _megatron_routing(m.moe, out)
    return out


# Values Megatron-LM fixes (no argument): MLA YaRN (transformer_config.py L3315-3330) and the
# llama3 scaling of RotaryEmbedding._apply_scaling (rotary_pos_embedding.py L92-99).
_MEGATRON_FIXED = {"yarn": {"original_max_positions": 4096, "beta_fast": 32, "beta_slow": 1},
                   "llama3": {"original_max_positions": 8192, "low_freq_factor": 1, "high_freq_factor": 4}}


def _megatron_rope_scaling(m: Any, out: _Rules) -> None:
    r, path = m.rope_scaling, "megatron/core/transformer/transformer_config.py"
    if (r.kind == "yarn") != (m.mla is not None):
        out.add("model.rope_scaling", f"the export writes {r.kind} RoPE scaling "
                f"{'with latent attention only' if r.kind == 'yarn' else 'without latent attention only'}",
                MEGATRON, path)
        return
    if r.kind == "yarn" and (r.mscale is None or r.mscale_all_dim is None):
        out.add("model.rope_scaling.mscale", "Megatron-LM's MLA YaRN needs mscale and mscale_all_dim",
                MEGATRON, path)
    for key, value in _MEGATRON_FIXED[r.kind].items():
        if getattr(r, key) != value:
            out.add(f"model.rope_scaling.{key}", f"Megatron-LM fixes {r.kind} {key} at {value} (no argument)",
                    MEGATRON, path)


def _megatron_routing(e: Any, out: _Rules) -> None:
    """topk_routing_with_score_function (moe_utils.py L766-930): softmax after top-k renormalises,
    --moe-router-pre-softmax does not; sigmoid scores are renormalised exactly when topk > 1;
    groups are ranked by the sum of their best topk / group_topk scores (HF noaux_tc: best 2)."""
    path = "megatron/core/transformer/moe/moe_utils.py"
    if e.router == "sigmoid" and e.router_topk_norm != (e.experts_per_token > 1):
        out.add("model.moe.router_topk_norm", "Megatron-LM renormalises sigmoid top-k scores exactly "
                "when topk > 1 (no option)", MEGATRON, path)
    if e.router_on_input and e.experts_per_token > 1:
        out.add("model.moe.router_on_input", "Megatron-LM's --moe-apply-probs-on-input works with "
                "moe_router_topk 1 only (experts.py L918-921)", MEGATRON, "megatron/core/transformer/moe/experts.py")
    if e.group_limited and e.experts_per_token != 2 * e.router_group_topk:
        out.add("model.moe.router_group_topk", "Megatron-LM ranks expert groups by their best "
                "topk / group_topk scores; the model ranks them by their best 2", MEGATRON, path)


def _titan_dense(m: Any, out: _Rules) -> None:
    """The Llama 3 module (torchtitan/models/llama3/__init__.py _build_llama3_layers)."""
    path = "torchtitan/models/llama3/__init__.py"
    if m.qk_norm != "none":
        out.add("model.qk_norm", "torchtitan's Llama 3 layers have no query/key norm", TITAN, path)
    if m.head_dim * m.heads != m.hidden:
        out.add("model.head_dim", f"torchtitan's Llama 3 attention uses head_dim = dim / n_heads "
                f"({m.hidden // m.heads}), not {m.head_dim}", TITAN, path)
    if m.mla is not None:
        out.add("model.mla", "torchtitan builds latent attention only in DeepSeek-V3's MoE layers "
                "(build_mla_moe_layers)", TITAN, "torchtitan/models/deepseek_v3/__init__.py")
    if m.mtp_layers:
        out.add("model.mtp_layers", "torchtitan's multi-token prediction is DeepSeek-V3's (MLA + MoE "
                "blocks)", TITAN, "torchtitan/models/deepseek_v3/mtp.py")


def _titan_common(m: Any, out: _Rules) -> None:
    """What no torchtitan decoder block the export writes has (llama3, qwen3, deepseek_v3)."""
    path = "torchtitan/models/common/config_utils.py"
    if m.bias or m.qkv_bias:
        out.add("model.bias", "torchtitan's attention and FFN configs have no biases", TITAN, path)
    if m.norm != "rmsnorm" or m.position_embedding != "rope" or not m.ffn_gated:
        out.add("model.norm", "torchtitan's decoders are RMSNorm + RoPE + SwiGLU", TITAN, path)
    if m.dropout:
        out.add("model.dropout", "torchtitan's decoders have no dropout", TITAN, path)


def _titan_moe(m: Any, out: _Rules) -> None:
    e = m.moe
    if e.router_on_input:
        out.add("model.moe.router_on_input", "torchtitan's MoE applies the routing scores to the "
                "experts' outputs in the token dispatcher's combine, with no option to scale their inputs",
                TITAN, "torchtitan/models/common/moe.py")
    if e.shared_expert_gate:
        out.add("model.moe.shared_expert_gate", "torchtitan's MoE adds the shared experts' output "
                "without a gate (MoE.forward)", TITAN, "torchtitan/models/common/moe.py")
    if m.mla is None:
        if m.qk_norm == "full":
            out.add("model.qk_norm", "torchtitan's query/key norm is an RMSNorm of head_dim "
                    "(make_gqa_config qk_norm), not of the whole projection", TITAN,
                    "torchtitan/models/common/config_utils.py")
        return
    path = "torchtitan/models/deepseek_v3/__init__.py"
    if m.qk_norm != "none":
        out.add("model.qk_norm", "torchtitan's MLA attention has no query/key norm", TITAN, path)
    if e.layer_step != 1:
        out.add("model.moe.layer_step", "torchtitan's MLA builder makes the first n_dense_layers dense "
                "and every later layer MoE (build_mla_moe_layers)", TITAN, path)
    if e.shared_experts == 0 or e.shared_width != e.expert_ffn_hidden:
        out.add("model.moe.shared_experts", "torchtitan's MLA builder gives every MoE layer "
                "num_shared_experts x moe_hidden_dim of shared experts (at least one, as wide as a "
                "routed expert) (build_mla_moe_layers)", TITAN, path)


def _titan_rope_scaling(m: Any, out: _Rules) -> None:
    """The export writes YaRN in DeepSeek-V3's ComplexRoPE (rope.py L97-107: rope_factor,
    beta_fast, beta_slow, original_seq_len) and its softmax mscale (deepseek_v3/model.py L87-88:
    HF's mscale_all_dim; HF's cos/sin factor mscale / mscale_all_dim must then be 1)."""
    r = m.rope_scaling
    if r is None:
        return
    if m.moe is None and m.mla is None and r.kind == "llama3":
        if r.low_freq_factor is None or r.high_freq_factor is None:
            out.add("model.rope_scaling", "llama3 scaling needs low_freq_factor and high_freq_factor",
                    TITAN, "torchtitan/models/common/rope.py")
    elif m.mla is None or r.kind != "yarn":
        out.add("model.rope_scaling", "the export writes RoPE scaling as Llama 3's llama scaling (dense) or "
                "DeepSeek-V3's YaRN (MLA); qwen3's CosSinRoPE has no llama scaling (rope.py L283-284)",
                TITAN, "torchtitan/models/common/rope.py")
    elif None in (r.beta_fast, r.beta_slow, r.mscale_all_dim):
        out.add("model.rope_scaling", "the export writes beta_fast, beta_slow and mscale_all_dim as the "
                "model states them: state all three", TITAN, "torchtitan/models/common/rope.py")
    elif r.mscale != r.mscale_all_dim:
        out.add("model.rope_scaling.mscale", "torchtitan's DeepSeek-V3 has one mscale (the softmax scale's); "
                "the model's mscale differs from its mscale_all_dim", TITAN, "torchtitan/models/deepseek_v3/model.py")


def _torchtitan(m: Any) -> _Rules:
    out = _Rules()
    _titan_common(m, out)
    _titan_rope_scaling(m, out)
    if m.attention_chunk_tokens is not None or m.nope_layer_interval is not None or m.qk_norm == "l2":
        out.add("model.attention_chunk_tokens" if m.attention_chunk_tokens is not None else
                "model.nope_layer_interval" if m.nope_layer_interval is not None else "model.qk_norm",
                "the qwen3 / llama3 / deepseek_v3 blocks the export writes have no chunked attention, "
                "NoPE layers or QK L2 norm (Llama 4's iRoPE)", TITAN, "torchtitan/models/common/config_utils.py")
    if m.moe is None:
        _titan_dense(m, out)
        return out
    _titan_moe(m, out)
    if m.mtp_layers and m.mla is None:
        out.add("model.mtp_layers", "torchtitan's multi-token prediction is DeepSeek-V3's (DeepSeekV3Model is an "
                "MTPDecoder); the Qwen3 decoder the export writes for MoE models without latent attention is a "
                "plain Decoder with no MTP layers", TITAN, "torchtitan/models/qwen3/model.py")
    return out


# torchtitan's MTPDecoder.Config.update_from_config (torchtitan/models/deepseek_v3/mtp.py L176-206
# b5bcd76c) raises NotImplementedError when mtp_layers is set and pipeline_parallel_degree > 1 ("MTP
# does not support pipeline parallelism yet") or context_parallel_degree > 1 (same for CP); MTP.md
# sec. 5 keeps both unsupported until integrated.
_TITAN_MTP = "torchtitan/models/deepseek_v3/mtp.py"
_TITAN_DECODER = "torchtitan/models/common/decoder.py"


def _layout_found(framework: str, m: Any, pp: int, cp: int) -> _Rules:
    out = _Rules()
    if framework != "torchtitan":
        return out
    if m.tied_embeddings and pp > 1:
        out.add("layout.pp", f"torchtitan does not tie the embedding and the LM head under pipeline "
                f"parallelism (Decoder.Config.update_from_config L168-171 raises at "
                f"pipeline_parallel_degree {pp} > 1 with enable_weight_tying)", TITAN, _TITAN_DECODER)
    if not m.mtp_layers:
        return out
    if pp > 1:
        out.add("layout.pp", f"torchtitan's multi-token prediction does not support pipeline parallelism "
                f"(MTPDecoder raises at pipeline_parallel_degree {pp} > 1)", TITAN, _TITAN_MTP)
    if cp > 1:
        out.add("layout.cp", f"torchtitan's multi-token prediction does not support context parallelism "
                f"(MTPDecoder raises at context_parallel_degree {cp} > 1)", TITAN, _TITAN_MTP)
    return out


def model_degrees_ok(framework: str, m: Any, *, pp: int = 1, cp: int = 1) -> bool:
    """Whether `framework` runs model `m` at these pipeline and context degrees (the search's
    rule: torchtitan's MTP only at pp 1 and cp 1, its tied embeddings only at pp 1; every other
    model and framework: always)."""
    return not _layout_found(framework, m, pp, cp)


def layout_model_rules(framework: str, m: Any, pp: int, cp: int) -> list[tuple[str, str]]:
    """(field, rule with its source) for each degree of the layout `framework` cannot run model `m` at."""
    return [(f, f"{r} ({_cite((s.repository, s.commit), s.path)})") for f, r, s in _layout_found(framework, m, pp, cp)]


def layout_model_violations(framework: str, m: Any, pp: int, cp: int) -> list[Violation]:
    """The same as capability Violations (rule = the field), for `estimate`'s report."""
    return [Violation(f, f"{framework}: {f}: {r}", (s,)) for f, r, s in _layout_found(framework, m, pp, cp)]


def _deepspeed(m: Any) -> _Rules:
    """The DeepSpeed export: a Hugging Face Llama config for the model code, each MoE layer's
    FFN a native deepspeed.moe.layer.MoE (service.launchers.deepspeed_moe)."""
    out, gate = _Rules(), "deepspeed/moe/sharded_moe.py"
    if m.qk_norm != "none":
        out.add("model.qk_norm", "the DeepSpeed export's Hugging Face Llama config has no query/key norm",
                DEEPSPEED, "deepspeed/module_inject/auto_tp.py")
    if m.mtp_layers:
        out.add("model.mtp_layers", "DeepSpeed has no multi-token prediction module", DEEPSPEED,
                "deepspeed/moe/layer.py")
    if m.mla is not None:
        out.add("model.mla", "the DeepSpeed export's Hugging Face Llama config has no latent attention",
                DEEPSPEED, "deepspeed/module_inject/auto_tp.py")
    if m.attention_chunk_tokens is not None or m.nope_layer_interval is not None:
        out.add("model.attention_chunk_tokens", "the DeepSpeed export's Hugging Face Llama config has no "
                "chunked attention or NoPE layers", DEEPSPEED, "deepspeed/module_inject/auto_tp.py")
    if m.rope_scaling is not None:
        out.add("model.rope_scaling", "the DeepSpeed export's Hugging Face Llama config does not write "
                "rope_scaling", DEEPSPEED, "deepspeed/module_inject/auto_tp.py")
    e = m.moe
    if e is None:
        return out
    if e.router != "softmax":
        out.add("model.moe.router", "DeepSpeed's TopKGate scores experts with a softmax only "
                "(top1gating / top2gating / topkgating)", DEEPSPEED, gate)
    if e.router_bias:
        out.add("model.moe.router_bias", "DeepSpeed's TopKGate has no score-correction bias (its gate is "
                "one bias-free Linear)", DEEPSPEED, gate)
    if e.router_topk_norm != (e.experts_per_token > 1):
        out.add("model.moe.router_topk_norm", "DeepSpeed's top1gating keeps the softmax score, "
                "top2gating and topkgating renormalise the kept scores (L407-411, L497-501)", DEEPSPEED, gate)
    for field, on in (("router_scale", e.router_scale != 1.0), ("router_groups", e.group_limited),
                      ("router_on_input", e.router_on_input)):
        if on:
            out.add(f"model.moe.{field}", "DeepSpeed's TopKGate has no score scaling, expert groups or "
                    "routing weights on the expert input", DEEPSPEED, gate)
    if e.shared_experts:
        out.add("model.moe.shared_experts", "DeepSpeed's MoE has no shared experts: use_residual mixes one "
                "dense MLP with a learned softmax coefficient (Residual MoE), not an added shared expert",
                DEEPSPEED, "deepspeed/moe/layer.py")
    return out


def training_rules(framework: str, m: Any, t: Any) -> _Rules:
    """Model-level training options `framework` cannot honour for model `m`."""
    out = _Rules()
    if m.moe is not None and t.moe_a2a_overlap and framework != "megatron-core":
        out.add("training.moe_a2a_overlap", f"the expert all-to-all overlap is Megatron-LM's "
                f"--overlap-moe-expert-parallel-comm; {framework} has no such option", MEGATRON,
                "megatron/core/model_parallel_config.py")
    if m.moe is not None and t.moe_pad_to_capacity and framework != "megatron-core":
        out.add("training.moe_pad_to_capacity", f"padding every expert's input to its capacity is "
                f"Megatron-LM's --moe-pad-expert-input-to-capacity; {framework} has no such option", MEGATRON,
                "megatron/core/transformer/transformer_config.py")
    if framework == "torchtitan" and m.moe is not None and t.moe_capacity_factor is not None:
        out.add("training.moe_capacity_factor", "torchtitan's standard token dispatcher "
                "(AllToAllTokenDispatcher) drops no tokens: it has no capacity factor", TITAN,
                "torchtitan/models/common/config_utils.py")
    if framework == "torchtitan" and m.moe is not None and t.compute_precision == "fp8-rowwise" \
            and (m.hidden % 16 or m.moe.expert_ffn_hidden % 16):
        out.add("model.moe.expert_ffn_hidden", "torchtitan's Float8GroupedExpertsConverter runs torchao's FP8 "
                "rowwise grouped GEMM, which needs the hidden size and expert width divisible by 16 (L85-90)",
                TORCHAO, "torchao/prototype/moe_training/fp8_grouped_mm.py")
    if framework == "torchtitan" and t.compute_precision == "fp8-current":
        out.add("training.compute_precision", "torchtitan's Float8LinearConverter takes recipe_name 'rowwise' "
                "or 'rowwise_with_gw_hp' only: per-tensor (tensorwise) scaling was removed (6348d93d); "
                "use 'fp8-rowwise' or 'mxfp8'", TITAN, "torchtitan/components/quantization/float8.py")
    return out
