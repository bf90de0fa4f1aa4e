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
QkNorm = Literal["none", "head", "full"]


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

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.experts_per_token > self.experts:
            raise ValueError(f"experts_per_token: {self.experts_per_token} exceeds experts ({self.experts})")
        return self

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
