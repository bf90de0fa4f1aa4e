"""Optional parts of a ModelSpec: mixture-of-experts feed-forward layers and multi-head
latent attention (MLA). Both are absent for a dense transformer with standard attention.

Units: widths and ranks are element counts; layer indices are 0-based.
Sources: the layer definitions of Hugging Face transformers (huggingface/transformers
008e5743): models/mixtral/modeling_mixtral.py (MixtralSparseMoeBlock),
models/qwen2_moe/modeling_qwen2_moe.py (shared expert and its sigmoid gate),
models/deepseek_v3/modeling_deepseek_v3.py (DeepseekV3MoE, DeepseekV3TopkRouter,
DeepseekV3Attention), models/llama4/modeling_llama4.py (Llama4TextMoe); DeepSeek-AI,
"DeepSeek-V2" (2024) sec. 2.1 (MLA) and "DeepSeek-V3 Technical Report" (2024) sec. 2.1.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from solver.errors import Problem, SpecError
from topology.spec import StrictModel

Router = Literal["softmax", "sigmoid"]
QkNorm = Literal["none", "head", "full", "l2"]
RopeScalingKind = Literal["yarn", "llama3"]


class MoESpec(StrictModel):
    """Mixture-of-experts feed-forward layers (routed experts, optional shared experts).

    Layer i (0-based) is a MoE layer when i >= first_dense_layers and (i + 1) % layer_step
    == 0 (Qwen2-MoE `decoder_sparse_step`, Llama 4 `interleave_moe_layer_step`); the other
    layers keep the dense FFN of width ModelSpec.ffn_hidden (DeepSeek's first_k_dense_replace).
    Every expert is an FFN of the model's kind (gated: 3 matrices) of width expert_ffn_hidden.
    """

    experts: int = Field(ge=1, le=100_000, description="Routed experts per MoE layer (E).")
    experts_per_token: int = Field(ge=1, le=100_000, description="Routed experts each token uses (top-k).")
    expert_ffn_hidden: int = Field(ge=1, le=10_000_000, description="Inner width of one routed expert.")
    shared_experts: int = Field(
        default=0, ge=0, le=1_000, description="Experts every token uses besides the routed ones.")
    shared_expert_ffn_hidden: int | None = Field(
        default=None, ge=1, le=10_000_000,
        description="Inner width of ONE shared expert (default: expert_ffn_hidden).")
    shared_expert_gate: bool = Field(
        default=False, description="A D x 1 sigmoid gate scales the shared experts' output (Qwen2-MoE).")
    first_dense_layers: int = Field(
        default=0, ge=0, le=1_024, description="Leading layers that keep the dense FFN (DeepSeek: 3 in V3).")
    layer_step: int = Field(
        default=1, ge=1, le=1_024, description="Every layer_step-th layer is MoE (Llama 4 Maverick: 2).")
    router: Router = Field(
        default="softmax", description="Expert scores: softmax (Mixtral, Qwen) or sigmoid (DeepSeek-V3).")
    router_bias: bool = Field(
        default=False,
        description="Per-expert score-correction bias of auxiliary-loss-free balancing "
                    "(DeepSeek-V3 e_score_correction_bias: E parameters per MoE layer).")
    # Routing details (HF keys: norm_topk_prob, routed_scaling_factor, n_group / topk_group;
    # DeepseekV3TopkRouter / DeepseekV3MoE.route_tokens_to_experts, Llama4TextMoe.forward at
    # huggingface/transformers 008e5743). They change no parameter and no FLOP count, but an
    # export that drops them trains a different model.
    router_topk_norm: bool = Field(
        default=True,
        description="The top-k scores are renormalised to sum to 1 (HF norm_topk_prob; Mixtral "
                    "always; false in DeepSeek-V2-Lite, OLMoE, Qwen1.5-MoE, Llama 4).")
    router_scale: float = Field(
        default=1.0, gt=0, le=1_000,
        description="Factor on the routed experts' weights (HF routed_scaling_factor; DeepSeek-V3 2.5).")
    router_groups: int = Field(
        default=1, ge=1, le=100_000,
        description="Expert groups of group/node-limited routing (HF n_group; DeepSeek-V3 8); 1: none.")
    router_group_topk: int = Field(
        default=1, ge=1, le=100_000,
        description="Groups each token may use (HF topk_group; DeepSeek-V3 4); equals router_groups "
                    "or 1 with a single group.")
    router_on_input: bool = Field(
        default=False,
        description="The routing weight scales the expert's INPUT, not its output (Llama 4: "
                    "routed_in = hidden_states * router_scores).")

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.experts_per_token > self.experts:
            raise ValueError(f"experts_per_token: {self.experts_per_token} exceeds experts ({self.experts})")
        if self.experts % self.router_groups:
            raise ValueError(f"router_groups: {self.router_groups} does not divide experts ({self.experts})")
        if self.router_group_topk > self.router_groups:
            raise ValueError(f"router_group_topk: {self.router_group_topk} exceeds router_groups "
                             f"({self.router_groups})")
        if self.experts_per_token > self.router_group_topk * (self.experts // self.router_groups):
            raise ValueError(f"router_group_topk: {self.router_group_topk} groups of "
                             f"{self.experts // self.router_groups} experts hold fewer than "
                             f"experts_per_token ({self.experts_per_token})")
        return self

    @property
    def group_limited(self) -> bool:
        """Whether routing is limited to router_group_topk of router_groups expert groups."""
        return self.router_group_topk < self.router_groups

    @property
    def shared_width(self) -> int:
        """Inner width of one shared expert."""
        return self.shared_expert_ffn_hidden or self.expert_ffn_hidden

    def is_moe_layer(self, index: int) -> bool:
        """Whether 0-based layer `index` has the MoE feed-forward block."""
        return index >= self.first_dense_layers and (index + 1) % self.layer_step == 0

    def moe_layer_count(self, layers: int) -> int:
        """How many of `layers` layers are MoE layers."""
        return sum(1 for i in range(layers) if self.is_moe_layer(i))


class MLASpec(StrictModel):
    """Multi-head latent attention (DeepSeek-V2 sec. 2.1): queries and keys/values pass through
    low-rank latents; each head's query/key is a non-rope part plus a rope part.

    With MLA, ModelSpec.head_dim is the query/key head size (qk_nope_head_dim +
    qk_rope_head_dim) and kv_heads equals heads.
    """

    q_lora_rank: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="Query latent rank; None: a full-rank D x H*(nope+rope) query projection (V2-Lite).")
    kv_lora_rank: int = Field(ge=1, le=1_000_000, description="Key/value latent rank (c_KV width).")
    qk_nope_head_dim: int = Field(ge=0, le=100_000, description="Per-head query/key size without RoPE.")
    qk_rope_head_dim: int = Field(ge=1, le=100_000, description="Per-head query/key size with RoPE (key part shared).")
    v_head_dim: int = Field(ge=1, le=100_000, description="Per-head value size.")

    @property
    def qk_head_dim(self) -> int:
        """Query/key size per head: non-rope plus rope parts."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class RopeScalingSpec(StrictModel):
    """RoPE frequency scaling (HF rope_scaling; transformers 008e5743
    modeling_rope_utils.py _compute_yarn_parameters / _compute_llama3_parameters). Changes no
    parameter and no FLOP count; exports write it or refuse the model."""

    kind: RopeScalingKind = Field(description="yarn (DeepSeek-V3) or llama3 (Llama 3.1, Llama 4).")
    factor: float = Field(gt=0, le=10_000, description="Context extension factor.")
    original_max_positions: int = Field(ge=1, le=100_000_000, description="Context length before scaling.")
    beta_fast: float | None = Field(default=None, gt=0, le=10_000, description="yarn only.")
    beta_slow: float | None = Field(default=None, gt=0, le=10_000, description="yarn only.")
    mscale: float | None = Field(default=None, ge=0, le=10_000, description="yarn only.")
    mscale_all_dim: float | None = Field(default=None, ge=0, le=10_000, description="yarn only.")
    low_freq_factor: float | None = Field(default=None, gt=0, le=10_000, description="llama3 only.")
    high_freq_factor: float | None = Field(default=None, gt=0, le=10_000, description="llama3 only.")

    @model_validator(mode="after")
    def _check(self) -> RopeScalingSpec:
        other = ("low_freq_factor", "high_freq_factor") if self.kind == "yarn" else \
            ("beta_fast", "beta_slow", "mscale", "mscale_all_dim")
        given = [k for k in other if getattr(self, k) is not None]
        if given:
            raise ValueError(f"{given[0]}: not a parameter of {self.kind} scaling")
        return self


def chunked_keys_per_token(seq_len: int, chunk: int | None) -> float:
    """Mean keys a query attends to (non-causal count) in a layer whose attention is local
    within chunks of `chunk` tokens: with S = q C + r, (q C^2 + r^2) / S; S when unchunked
    or S <= C (HF Llama 4 chunked_attention_mask: a token sees its own chunk only)."""
    if chunk is None or seq_len <= chunk:
        return float(seq_len)
    q, r = divmod(seq_len, chunk)
    return (q * chunk * chunk + r * r) / seq_len


def refuse_unmodelled(model: object, what: str) -> None:
    """Refuse a model whose MoE or MLA parts `what` (a step-time model, an export) does not
    cover yet, naming the field, rather than treat it as a dense model.

    Raises: SpecError naming model.moe / model.mla.
    """
    problems = []
    if getattr(model, "moe", None) is not None:
        problems.append(Problem("model.moe", f"{what} does not cover mixture-of-experts layers yet; "
                                             "a dense estimate would be wrong"))
    if getattr(model, "mla", None) is not None:
        problems.append(Problem("model.mla", f"{what} does not cover multi-head latent attention yet"))
    if problems:
        raise SpecError("; ".join(str(p) for p in problems), problems)
