"""Exact parameter counts of the MoE block, multi-head latent attention, QK norms and
multi-token-prediction modules (counts are plain ints).

Sources (huggingface/transformers 008e5743 unless stated):
- MoE block: MixtralSparseMoeBlock (gate: Linear(D, E, bias=False); E experts, each a gated
  FFN), Qwen2MoeSparseMoeBlock (+ shared_expert of width shared_expert_intermediate_size and
  shared_expert_gate Linear(D, 1, bias=False)), DeepseekV3MoE (shared_experts = one MLP of
  width moe_intermediate_size x n_shared_experts; DeepseekV3TopkRouter weight E x D plus
  e_score_correction_bias of E), Llama4TextMoe (router Linear(D, E), experts gate_up_proj
  E x D x 2F and down_proj E x F x D, one shared_expert of width intermediate_size).
- MLA: DeepseekV3Attention: q_a_proj D x r_q, q_a_layernorm r_q, q_b_proj r_q x H(d_nope +
  d_rope) (or q_proj D x H(d_nope + d_rope) without q_lora_rank), kv_a_proj_with_mqa
  D x (r_kv + d_rope), kv_a_layernorm r_kv, kv_b_proj r_kv x H(d_nope + d_v), o_proj H d_v x D;
  DeepSeek-V2 report (2024) eqs. 9-19.
- QK norms: Qwen3Attention q_norm/k_norm RMSNorm(head_dim) (per head, shared across heads);
  OlmoeAttention q_norm RMSNorm(D), k_norm RMSNorm(K dh) (whole projection).
- MTP: DeepSeek-V3 report sec. 2.2 and its README_WEIGHTS.md: each module has enorm and hnorm
  (D each), eh_proj (2D x D), one transformer layer and a final norm; embedding and output head
  are shared with the main model.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def qk_norm_params(m: Any) -> int:
    """Scales of the query and key RMSNorms of one layer (0 without QK norm)."""
    if m.qk_norm == "head":
        return 2 * m.head_dim
    if m.qk_norm == "full":
        return m.heads * m.head_dim + m.kv_heads * m.head_dim
    return 0


def mla_params(m: Any) -> int:
    """One MLA block's weights and latent norms (no biases: DeepSeek sets attention_bias false)."""
    a, d, h = m.mla, m.hidden, m.heads
    if a.q_lora_rank is None:
        q = d * h * a.qk_head_dim
    else:
        q = d * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * h * a.qk_head_dim
    kv = d * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank \
        + a.kv_lora_rank * h * (a.qk_nope_head_dim + a.v_head_dim)
    return q + kv + h * a.v_head_dim * d


def moe_block_params(m: Any, ffn: Callable[..., int]) -> tuple[int, int]:
    """(all, active) parameters of one MoE block: routed experts, shared experts, router, gates.

    Active: the top-k routed experts plus everything every token passes (shared experts,
    router, shared gate). (0, 0) for a dense model. `ffn(m, width)` counts one expert.
    """
    e = m.moe
    if e is None:
        return 0, 0
    expert = ffn(m, e.expert_ffn_hidden)
    always = (e.shared_experts * ffn(m, e.shared_width)
              + e.experts * m.hidden + (e.experts if e.router_bias else 0)
              + (m.hidden if e.shared_expert_gate else 0))
    return e.experts * expert + always, e.experts_per_token * expert + always


def mtp_params(m: Any, moe_layer: int) -> int:
    """Unique parameters of the multi-token-prediction modules (one MoE layer each)."""
    if not m.mtp_layers:
        return 0
    per_module = 2 * m.hidden + 2 * m.hidden * m.hidden + moe_layer + m.hidden
    return m.mtp_layers * per_module
