"""Exact run accounting: parameters, model-state bytes, FLOPs, wall time, batch, grad-sync bound.

Unit legend: counts are plain ints; `_bytes` bytes; `_flops` floating-point operations;
`_s` seconds; `_gb_s` 1e9 bytes per second.
Sources: parameter counts follow the layer definitions (Vaswani et al. 2017; GQA, Ainslie et
al. 2023; SwiGLU, Shazeer 2020) and agree with Narayanan et al. 2021 eq. 2 for GPT;
FLOPs follow the seed plan (reference/seed-70b-plan.md, "Count the compute") and
Kaplan et al. 2020 (6 N T); ring all-reduce bound from Patarasuk & Yuan 2009.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from solver.cost.moe_params import mla_params, moe_block_params, mtp_params, qk_norm_params
from solver.errors import SpecError
from solver.model_parts import chunked_keys_per_token
from solver.specs import LayoutSpec, ModelSpec, PrecisionRecipe, TrainingSpec


@dataclass(frozen=True)
class ParameterCounts:
    """Exact parameter counts by component.

    Dense layers hold attention + FFN + norms (`per_layer`); MoE layers hold attention + norms
    + the MoE block (`moe_ffn_per_layer`: every routed and shared expert, router and gates).
    `active` counts what one token uses: all non-expert parameters, embedding and LM head
    included (Mistral AI's convention for Mixtral's "12.9B active"), the shared experts and
    top-k of the routed experts. Multi-token-prediction modules (`mtp`) are outside `total`.
    """

    embedding: int
    position_embedding: int
    lm_head: int
    attention_per_layer: int
    ffn_per_layer: int
    norms_per_layer: int
    final_norm: int
    layers: int
    moe_layers: int = 0
    moe_ffn_per_layer: int = 0
    moe_ffn_active_per_layer: int = 0
    mtp: int = 0

    @property
    def per_layer(self) -> int:
        """One dense layer."""
        return self.attention_per_layer + self.ffn_per_layer + self.norms_per_layer

    @property
    def moe_per_layer(self) -> int:
        """One MoE layer, all experts."""
        return self.attention_per_layer + self.moe_ffn_per_layer + self.norms_per_layer

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    @property
    def transformer_layers(self) -> int:
        return self.dense_layers * self.per_layer + self.moe_layers * self.moe_per_layer

    @property
    def _outside_layers(self) -> int:
        return self.embedding + self.position_embedding + self.lm_head + self.final_norm

    @property
    def total(self) -> int:
        return self._outside_layers + self.transformer_layers

    @property
    def active(self) -> int:
        """Parameters one token uses (equals total for a dense model)."""
        return self._outside_layers + self.active_transformer_layers

    @property
    def active_transformer_layers(self) -> int:
        """Layer parameters one token uses (transformer_layers for a dense model)."""
        active_moe = self.attention_per_layer + self.moe_ffn_active_per_layer + self.norms_per_layer
        return self.dense_layers * self.per_layer + self.moe_layers * active_moe

    @property
    def active_without_input_embedding(self) -> int:
        """`active` less the input embedding table (a lookup, no FLOPs): DeepSeek's convention
        ("36.6B activated, including 0.9B for the output head", DeepSeek-V3 README_WEIGHTS.md)."""
        return self.active - self.embedding - self.position_embedding

    def as_dict(self) -> dict[str, int]:
        out = {
            "embedding": self.embedding, "position_embedding": self.position_embedding,
            "lm_head": self.lm_head, "attention_per_layer": self.attention_per_layer,
            "ffn_per_layer": self.ffn_per_layer, "norms_per_layer": self.norms_per_layer,
            "per_layer": self.per_layer, "layers": self.layers,
            "transformer_layers": self.transformer_layers, "final_norm": self.final_norm,
            "total": self.total,
        }
        if self.moe_layers:
            out.update({"dense_layers": self.dense_layers, "moe_layers": self.moe_layers,
                        "moe_ffn_per_layer": self.moe_ffn_per_layer,
                        "moe_ffn_active_per_layer": self.moe_ffn_active_per_layer,
                        "moe_per_layer": self.moe_per_layer, "active": self.active,
                        "active_without_input_embedding": self.active_without_input_embedding,
                        "mtp": self.mtp})
        return out


def attention_params(m: ModelSpec) -> int:
    """Q and O are D x (H*dh); K and V are D x (K*dh) under GQA (Ainslie et al. 2023).

    Biases: `bias` gives Q, K, V and O theirs; `qkv_bias` only Q, K and V (Megatron-Core
    attention.py: linear_qkv has bias=add_bias_linear or add_qkv_bias, linear_proj only
    add_bias_linear; NVIDIA/Megatron-LM d98e8a64; HF Qwen2Attention, transformers 00d4b3d2).
    MLA: solver.cost.moe_params.mla_params. QK norms: moe_params.qk_norm_params."""
    if m.mla is not None:
        return mla_params(m) + qk_norm_params(m)
    q_width, kv_width = m.heads * m.head_dim, m.kv_heads * m.head_dim
    weights = 2 * m.hidden * q_width + 2 * m.hidden * kv_width
    qkv_biases = (q_width + 2 * kv_width) if (m.bias or m.qkv_bias) else 0
    return weights + qkv_biases + (m.hidden if m.bias else 0) + qk_norm_params(m)


def ffn_params(m: ModelSpec, width: int | None = None) -> int:
    """Gated (SwiGLU): gate, up (D x F) and down (F x D) = 3DF; plain: 2DF (Shazeer 2020).
    `width` defaults to the dense FFN's (F = ffn_hidden); experts pass theirs."""
    f = m.ffn_hidden if width is None else width
    matrices = 3 if m.ffn_gated else 2
    biases = ((2 if m.ffn_gated else 1) * f + m.hidden) if m.bias else 0
    return matrices * m.hidden * f + biases


def norm_params(m: ModelSpec) -> int:
    """One norm: RMSNorm has a scale (D); LayerNorm a scale and a shift (2D)."""
    return m.hidden * (2 if m.norm == "layernorm" else 1)


def parameter_counts(m: ModelSpec, seq_len: int | None = None) -> ParameterCounts:
    """Exact parameters by component. Learned positions need m.max_positions or seq_len.

    Raises: SpecError when learned positions have no table size.
    """
    positions = 0
    if m.position_embedding == "learned":
        size = m.max_positions or seq_len
        if size is None:
            raise SpecError("model.max_positions: learned position embeddings need a table size")
        positions = size * m.hidden
    moe_total, moe_active = moe_block_params(m, ffn_params)
    counts = ParameterCounts(
        embedding=m.vocab * m.hidden,
        position_embedding=positions,
        lm_head=0 if m.tied_embeddings else m.vocab * m.hidden,
        attention_per_layer=attention_params(m),
        ffn_per_layer=ffn_params(m),
        norms_per_layer=2 * norm_params(m),  # pre-attention and pre-FFN norms
        final_norm=norm_params(m),
        layers=m.layers,
        moe_layers=m.moe.moe_layer_count(m.layers) if m.moe else 0,
        moe_ffn_per_layer=moe_total,
        moe_ffn_active_per_layer=moe_active,
    )
    return dataclasses.replace(counts, mtp=mtp_params(m, counts.moe_per_layer))


@dataclass(frozen=True)
class StateBytes:
    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer

    def as_dict(self) -> dict[str, float]:
        return {"weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "total": self.total}


def model_state_bytes(params: int, recipe: PrecisionRecipe) -> StateBytes:
    """Unsharded model state: weights + gradients + optimizer (seed: 2 + 2 + 8 bytes/param)."""
    return StateBytes(params * recipe.weight_bytes, params * recipe.grad_bytes,
                      params * recipe.optimizer_bytes_per_param)


def per_gpu_model_state_bytes(params: int, recipe: PrecisionRecipe, layout: LayoutSpec) -> StateBytes:
    """Model state per GPU, parameters split evenly over TP x PP (seed, "Choose a first layout").

    ZeRO (Rajbhandari et al. 2020, sec. 5): stage 1 shards the optimizer over the
    data-parallel group, 2 also gradients, 3 also weights. With context parallelism the
    data-parallel group of the distributed optimizer is DP x CP (Megatron-LM).
    """
    local = params / (layout.tp * layout.pp)
    shard = layout.dp * layout.cp
    full = model_state_bytes(1, recipe)
    z = layout.zero_stage
    return StateBytes(
        weights=local * full.weights / (shard if z >= 3 else 1),
        gradients=local * full.gradients / (shard if z >= 2 else 1),
        optimizer=local * full.optimizer / (shard if z >= 1 else 1),
    )


@dataclass(frozen=True)
class Flops:
    parameter_matmul: float
    attention_full: float
    attention_causal: float
    causal: bool

    @property
    def attention(self) -> float:
        return self.attention_causal if self.causal else self.attention_full

    @property
    def total(self) -> float:
        return self.parameter_matmul + self.attention


def attention_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """Forward+backward attention scores and weighted values per token: 12 S (H dh) L.

    Forward: QK^T and AV are 2 matmuls of 2*S*H*dh FLOPs per token each (4 S H dh);
    backward twice that; total 12 S H dh per layer (seed plan; Narayanan et al. 2021 eq. 3).
    MLA's real shapes: QK^T runs over the query/key head size (d_nope + d_rope) and AV over
    the value head size d_v, so the sum is 6 S H (d_qk + d_v) L (DeepSeek-V2 eqs. 9-19;
    with d_qk = d_v = dh it is the formula above).
    Chunked local attention (Llama 4 attention_chunk_tokens C on its RoPE layers): a query sees
    only its own chunk, so S is replaced on those layers by the mean keys per query,
    (q C^2 + r^2) / S with S = q C + r (solver.model_parts.chunked_keys_per_token); the NoPE
    layers keep S. The causal convention halves this like every other attention count.
    """
    if m.mla is not None:
        return 6.0 * seq_len * m.heads * (m.mla.qk_head_dim + m.mla.v_head_dim) * m.layers
    return 12.0 * m.heads * m.head_dim * _keys_summed_over_layers(m, seq_len)


def _keys_summed_over_layers(m: ModelSpec, seq_len: int) -> float:
    """Sum over layers of the mean keys each query attends to (S on a global layer)."""
    if m.attention_chunk_tokens is None:
        return float(seq_len * m.layers)
    n = m.nope_layer_interval
    nope = m.layers // n if n else 0
    return nope * seq_len + (m.layers - nope) * chunked_keys_per_token(seq_len, m.attention_chunk_tokens)


# The FLOP convention every MFU and run-time figure uses, printed beside them.
FLOP_CONVENTION = ("model FLOPs = 6 N_active T + attention; N_active = parameters one token "
                   "passes (a dense model's total; MoE: non-expert parameters, embedding and LM "
                   "head included, shared and top-k routed experts); attention 12 S T H dh L, "
                   "MLA 6 S T H (d_qk + d_v) L, chunked local layers (Llama 4) with S -> "
                   "(q C^2 + r^2) / S for S = q C + r; MFU = model FLOPs / (time x peak)")


def attention_convention(causal: bool) -> str:
    """'causal' or 'non-causal': which attention-FLOP count an MFU or FLOP total uses."""
    return "causal" if causal else "non-causal"


def training_flops(m: ModelSpec, t: TrainingSpec, params: int) -> Flops:
    """Model FLOPs for the run: 6 N T (Kaplan et al. 2020) plus attention, both conventions.

    N is the parameters one token passes: ParameterCounts.active (the total for a dense
    model; for MoE the shared and top-k routed experts only).

    Raises: SpecError when training.tokens is not given.
    """
    if t.tokens is None:
        raise SpecError("training.tokens: needed for run FLOPs and wall time")
    attn = attention_flops_per_token(m, t.seq_len) * t.tokens
    return Flops(6.0 * params * t.tokens, attn, attn / 2, t.causal_attention_flops)


@dataclass(frozen=True)
class RunTime:
    assumed_mfu: float
    cluster_peak_flops: float
    wall_s: float
    gpu_hours: float
    cost: float | None

    @property
    def days(self) -> float:
        return self.wall_s / 86_400


def run_time(total_flops: float, gpus: int, peak_flops_per_gpu: float, t: TrainingSpec,
             mfu: float | None = None) -> RunTime:
    """Wall time = FLOPs / (GPUs x peak x MFU); GPU-hours = wall x GPUs / 3600."""
    mfu = t.assumed_mfu if mfu is None else mfu
    peak = gpus * peak_flops_per_gpu
    wall = total_flops / (peak * mfu)
    hours = wall * gpus / 3600
    cost = None if t.price_per_gpu_hour is None else hours * t.price_per_gpu_hour
    return RunTime(mfu, peak, wall, hours, cost)


@dataclass(frozen=True)
class BatchPlan:
    micro_batch: int
    data_parallel: int
    grad_accum: int
    sequences_per_step: int
    tokens_per_step: int
    target_tokens_per_step: int
    steps: int | None


def batch_plan(t: TrainingSpec, dp: int, micro_batch: int) -> BatchPlan:
    """Global batch = DP x micro-batch x accumulation x seq_len (seed, "Build the global batch").

    TP and CP ranks share sequences, so only DP replicas multiply the batch. Accumulation
    is the nearest whole number of micro-batches to the target (at least 1).
    """
    per_pass = dp * micro_batch * t.seq_len
    accum = max(1, round(t.global_batch_tokens / per_pass))
    tokens = per_pass * accum
    steps = None if t.tokens is None else math.ceil(t.tokens / tokens)
    return BatchPlan(micro_batch, dp, accum, dp * micro_batch * accum, tokens,
                     t.global_batch_tokens, steps)


def ring_allreduce_lower_bound_s(message_bytes: float, ranks: int, bandwidth_gb_s: float) -> float:
    """Large-message ring all-reduce: 2 (d-1)/d x bytes / busbw (Patarasuk & Yuan 2009)."""
    if ranks <= 1:
        return 0.0
    return 2.0 * (ranks - 1) / ranks * message_bytes / (bandwidth_gb_s * 1e9)
