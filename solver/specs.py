"""Model, training and layout specifications (validated once at the boundary).

Units: tokens are counts; bytes per value for the precision recipe; price in
currency units per GPU-hour. Every field is documented where it is declared.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from solver.frameworks.profile import DEFAULT_FRAMEWORK, FrameworkName, Fp8Recipe, RecomputeModule
from solver.model_parts import MLASpec, MoESpec, QkNorm, RopeScalingSpec
from topology.spec import StrictModel

Recompute = Literal["none", "selective", "full"]
ZeroStage = Literal[0, 1, 2, 3]
# Rank orders, fastest-varying first: Megatron-LM's default mapping and the one selected by
# its --use-tp-pp-dp-mapping flag (megatron/core/parallel_state.py, `order`).
RankOrder = Literal["tp-cp-dp-pp", "tp-cp-pp-dp"]
DEFAULT_RANK_ORDER: RankOrder = "tp-cp-dp-pp"
# GEMM compute recipes (TrainingSpec.compute_precision), as the frameworks name them:
# Megatron-Core --fp8-recipe delayed / tensorwise / blockwise / mxfp8 (NVIDIA/Megatron-LM
# d98e8a64, megatron/core/transformer/transformer_config.py L594-600: Transformer Engine's
# DelayedScaling, Float8CurrentScaling, Float8BlockScaling, MXFP8BlockScaling) and torchao's
# Float8Linear rowwise recipe (pytorch/torchtitan b5bcd76c, components/quantization/float8.py).
ComputePrecision = Literal["bf16", Fp8Recipe]


class ModelSpec(StrictModel):
    """A decoder-only transformer: dense, or with mixture-of-experts FFN layers (`moe`) and/or
    multi-head latent attention (`mla`)."""

    name: str = Field(default="model", min_length=1, max_length=200, description="Model name.")
    layers: int = Field(ge=1, le=1_024, description="Transformer layers (L); published dense models use <= ~200.")
    hidden: int = Field(ge=1, le=1_000_000, description="Model width (D, hidden_size).")
    ffn_hidden: int = Field(ge=1, le=10_000_000, description="Feed-forward inner width (F).")
    ffn_gated: bool = Field(description="Gated FFN (SwiGLU: 3 matrices) instead of 2 matrices.")
    heads: int = Field(ge=1, le=100_000, description="Query heads (H).")
    kv_heads: int = Field(ge=1, le=100_000, description="Key/value heads (K); K = H without GQA.")
    head_dim: int = Field(ge=1, le=100_000, description="Per-head size (d_h).")
    vocab: int = Field(ge=1, le=100_000_000, description="Vocabulary size (V).")
    tied_embeddings: bool = Field(description="LM head shares the token-embedding matrix.")
    position_embedding: Literal["rope", "learned"] = Field(
        default="rope", description="Rotary (no parameters) or learned absolute positions.")
    norm: Literal["rmsnorm", "layernorm"] = Field(
        default="rmsnorm", description="RMSNorm (scale only) or LayerNorm (scale and shift).")
    bias: bool = Field(default=False, description="Linear layers carry biases.")
    qkv_bias: bool = Field(
        default=False,
        description="Only the Q, K and V projections carry biases (not O, not the FFN), as in Qwen2; "
                    "Megatron-Core's add_qkv_bias (transformer_config.py). Implied by `bias`.")
    dropout: float = Field(
        default=0.0, ge=0, lt=1,
        description="Hidden and attention dropout probability (Megatron --hidden-dropout / "
                    "--attention-dropout; HF hidden_dropout/attention_dropout). Any value > 0 "
                    "stores 1-byte masks and adds their traffic (Korthikanti et al. 2022, Sec. 4.1). "
                    "Default 0: Llama-style recipes; Megatron-Core's own default is 0.1.")
    max_positions: int | None = Field(
        default=None, ge=1, le=100_000_000,
        description="Learned position table size; defaults to the training seq_len.")
    qk_norm: QkNorm = Field(
        default="none",
        description="RMSNorm on queries and keys: 'head' normalizes each head (Qwen3: 2 x head_dim "
                    "scales per layer), 'full' the whole projection (OLMoE: H dh + K dh scales); "
                    "'l2' a weightless L2 norm on the RoPE layers (Llama 4 use_qk_norm).")
    nope_layer_interval: int | None = Field(
        default=None, ge=1, le=1_024,
        description="Every n-th layer (1-based: (i + 1) % n == 0) has no RoPE and attends globally "
                    "(Llama 4 NoPE layers, no_rope_layers / no_rope_layer_interval 4); None: none.")
    attention_chunk_tokens: int | None = Field(
        default=None, ge=1, le=100_000_000,
        description="The RoPE layers attend only within chunks of this many tokens (Llama 4 "
                    "attention_chunk_size 8192); None: global attention on every layer.")
    rope_scaling: RopeScalingSpec | None = Field(
        default=None, description="RoPE frequency scaling (HF rope_scaling); None: unscaled.")
    moe: MoESpec | None = Field(
        default=None, description="Mixture-of-experts FFN layers; None for a dense model.")
    mla: MLASpec | None = Field(
        default=None, description="Multi-head latent attention (DeepSeek-V2/V3); None for MHA/GQA.")
    mtp_layers: int = Field(
        default=0, ge=0, le=16,
        description="Multi-token-prediction modules (DeepSeek-V3 num_nextn_predict_layers); their "
                    "parameters are reported apart from the main model's total.")
    rope_base: float | None = Field(
        default=None, gt=0, le=1e12,
        description="Rotary base (theta) for rope positions. Read by launcher exports only; "
                    "None: not stated, exports use 10000 (Su et al. 2021, RoFormer) and say so.")
    norm_eps: float | None = Field(
        default=None, gt=0, lt=1,
        description="Epsilon of the norms. Read by launcher exports only; None: not stated, "
                    "exports use 1e-5 (Megatron-LM's and torchtitan's default) and say so.")

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads: heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})")
        if self.moe is not None and self.moe.moe_layer_count(self.layers) == 0:
            raise ValueError(f"moe: no layer of {self.layers} is a MoE layer (first_dense_layers "
                             f"{self.moe.first_dense_layers}, layer_step {self.moe.layer_step})")
        if self.mla is not None:
            if self.kv_heads != self.heads:
                raise ValueError(f"kv_heads: MLA keeps one key/value head per query head ({self.heads})")
            if self.head_dim != self.mla.qk_head_dim:
                raise ValueError(f"head_dim: with MLA it is qk_nope_head_dim + qk_rope_head_dim "
                                 f"({self.mla.qk_head_dim})")
        if (self.moe is not None or self.mla is not None) and (self.bias or self.position_embedding != "rope"):
            raise ValueError("bias: linear biases and learned positions are not modelled with MoE or MLA "
                             "(none of the supported MoE/MLA families has them)")
        if (self.nope_layer_interval or self.attention_chunk_tokens) \
                and (self.position_embedding != "rope" or self.mla is not None):
            raise ValueError("attention_chunk_tokens: NoPE layers and chunked attention are modelled for "
                             "RoPE attention without MLA only (Llama 4)")
        if self.rope_scaling is not None and self.position_embedding != "rope":
            raise ValueError("rope_scaling: needs position_embedding 'rope'")
        if self.mtp_layers and self.moe is None:
            raise ValueError("mtp_layers: modelled for DeepSeek-V3-style MoE models only")
        return self


class PrecisionRecipe(StrictModel):
    """Bytes per parameter of each piece of model state. Default: the seed's recipe."""

    weight_bytes: int = Field(default=2, ge=1, le=8, description="Bytes per working weight (BF16: 2).")
    grad_bytes: int = Field(default=2, ge=1, le=8, description="Bytes per gradient (BF16: 2; FP32: 4).")
    optimizer_moment_bytes: int = Field(
        default=4, ge=1, le=8, description="Bytes per Adam moment; two moments are kept.")
    optimizer_moments: int = Field(default=2, ge=0, le=4, description="Moments per parameter (Adam: 2).")
    master_weights: bool = Field(default=False, description="Keep a separate FP32 master copy (4 bytes).")

    @property
    def optimizer_bytes_per_param(self) -> int:
        """Optimizer state (moments plus FP32 master weights if kept), bytes per parameter."""
        return self.optimizer_moments * self.optimizer_moment_bytes + (4 if self.master_weights else 0)


class TrainingSpec(StrictModel):
    """What to train on and how the batch is sized."""

    tokens: float | None = Field(
        default=None, gt=0, le=1e16, description="Training tokens for the whole run (T).")
    seq_len: int = Field(ge=1, le=100_000_000, description="Sequence length (S).")
    global_batch_tokens: int = Field(ge=1, le=10**12, description="Target tokens per optimizer step.")
    precision: PrecisionRecipe = Field(
        default_factory=PrecisionRecipe,
        description="Bytes per parameter of each state: the plan's capacity section (default: the "
                    "seed's 2 + 2 + 8). Stated explicitly, it also replaces the byte sizes of the "
                    "framework's per-layout recipe (solver.cost.state.with_precision).")
    compute_precision: ComputePrecision = Field(
        default="bf16",
        description="Datatype of the linear layers' GEMMs: 'bf16', or an FP8 recipe: 'fp8-delayed' "
                    "(per-tensor scales from an amax history; TE DelayedScaling, Megatron "
                    "--fp8-recipe delayed), 'fp8-current' (per-tensor scales of the tensor itself; "
                    "TE Float8CurrentScaling, --fp8-recipe tensorwise, torchao tensorwise), "
                    "'fp8-blockwise' (1x128 activation / 128x128 weight blocks, DeepSeek-V3 style; "
                    "TE Float8BlockScaling, compute capability >= 9.0), 'fp8-rowwise' (torchao "
                    "rowwise) or 'mxfp8' (32-element MX blocks; Blackwell, compute capability "
                    ">= 10.0). Attention, the LM head and the embedding stay BF16.")
    assumed_mfu: float = Field(default=0.5, gt=0, le=1, description="MFU assumed for the capacity plan.")
    price_per_gpu_hour: float | None = Field(
        default=None, ge=0, le=1e6, description="Optional price per GPU-hour for cost estimates.")
    currency: str = Field(
        default="USD", min_length=1, max_length=16,
        description="ISO 4217 code of price_per_gpu_hour (three capital letters), echoed with every cost.")
    async_checkpoint: bool = Field(
        default=False,
        description="Save checkpoints asynchronously (training blocks only for the device-to-host "
                    "copy): Megatron --async-save, torchtitan checkpoint.async_mode, DeepSpeed "
                    "checkpoint.writer.decoupled. Default off, as in all three frameworks.")
    causal_attention_flops: bool = Field(
        default=False,
        description="Count attention FLOPs for a causal mask (half of 12*S*T*H*dh*L). Both are reported.")
    attention_kernel: Literal["flash", "unfused"] = Field(
        default="flash",
        description="Attention implementation the run uses: 'flash' (fused, no S x S tensors; "
                    "Dao et al. 2022) or 'unfused' (softmax over stored S x S scores, e.g. "
                    "Megatron-LM before FlashAttention). Changes attention time and memory.")
    framework: FrameworkName = Field(
        default=DEFAULT_FRAMEWORK,
        description="Training framework the run uses (solver/data/frameworks/<name>.json): "
                    "'megatron-core' (also NeMo, Megatron-Bridge), 'torchtitan' or 'deepspeed'. "
                    "Decides which layouts the search may return and the per-layout memory recipe.")
    logit_bytes: float | None = Field(
        default=None, gt=0, le=64,
        description="Bytes per logit (per token and vocabulary entry) the run's loss keeps alive "
                    "when backward starts, for a run whose loss is not its framework's: e.g. 4 "
                    "for BF16 logits saved by a fused cross-entropy plus the BF16 gradient it "
                    "returns. Unset: the framework profile's memory.logit_bytes (Megatron-Core "
                    "4, torchtitan 12).")
    moe_capacity_factor: float | None = Field(
        default=None, gt=0, le=64,
        description="Expert capacity factor (Megatron --moe-expert-capacity-factor; None: dropless, "
                    "Megatron's default): no expert takes more than this x its mean share of tokens, so "
                    "it is the busiest expert rank's load factor. MoE models only.")
    moe_pad_to_capacity: bool = Field(
        default=False,
        description="Every expert's input padded to its capacity (Megatron "
                    "--moe-pad-expert-input-to-capacity, default off; needs moe_capacity_factor: "
                    "megatron/core/transformer/transformer_config.py, NVIDIA/Megatron-LM d98e8a64). The "
                    "all-to-all splits are then fixed, so the dispatcher gathers no token counts "
                    "(token_dispatcher.py preprocess; solver.cost.moe_comm).")
    moe_load_imbalance: float | None = Field(
        default=None, ge=1, le=64,
        description="Tokens of the busiest expert rank over the mean (>= 1) when the run states a "
                    "measured value; unset: the capacity factor if set, else the cost model's default "
                    "(solver.cost.moe_layer.DEFAULT_LOAD_IMBALANCE, its basis printed with the estimate).")
    reference: ReferenceSpec | None = Field(
        default=None,
        description="A published figure for this run (its GPU-hours, scope and source, and the "
                    "published layout if any) that `plan` prints beside its own estimates, with "
                    "the ratio predicted / published (solver.plan_reference).")
    moe_a2a_overlap: bool = Field(
        default=False,
        description="Token dispatch/combine all-to-all hidden under another micro-batch's compute "
                    "(Megatron --overlap-moe-expert-parallel-comm, default off: "
                    "megatron/core/model_parallel_config.py, NVIDIA/Megatron-LM d98e8a64).")

    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        default=None, strict=False, min_length=1,
        description="The modules selective recompute repeats, Megatron-Core's --recompute-modules "
                    "(core_attn, mla_up_proj, layernorm, moe_act, mlp; transformer_config.py "
                    "NVIDIA/Megatron-LM d98e8a64); None: the framework's set for the model "
                    "(solver.cost.recompute). Used by layouts with recompute 'selective'.")

    @field_validator("currency")
    @classmethod
    def _iso_code(cls, value: str) -> str:
        if not (len(value) == 3 and value.isascii() and value.isalpha() and value.isupper()):
            raise ValueError(f"'{value}' is not an ISO 4217 code (three capital letters, e.g. USD, EUR)")
        return value

    @model_validator(mode="after")
    def _check(self) -> TrainingSpec:
        if self.global_batch_tokens < self.seq_len:
            raise ValueError(
                f"global_batch_tokens: {self.global_batch_tokens} is smaller than one sequence "
                f"(seq_len {self.seq_len})")
        if self.moe_pad_to_capacity and self.moe_capacity_factor is None:
            raise ValueError("moe_pad_to_capacity: pads to the expert capacity, so it needs "
                             "moe_capacity_factor (Megatron refuses the flag without one: transformer_config.py)")
        return self


class LayoutSpec(StrictModel):
    """A parallel layout (Megatron-LM terms)."""

    tp: int = Field(default=1, ge=1, le=1024, description="Tensor-parallel degree.")
    pp: int = Field(default=1, ge=1, le=10_000, description="Pipeline-parallel stages.")
    dp: int = Field(default=1, ge=1, le=10_000_000, description="Data-parallel replicas.")
    cp: int = Field(default=1, ge=1, le=1024, description="Context-parallel degree (sequence split).")
    vpp: int = Field(default=1, ge=1, le=1024, description="Virtual stages per pipeline rank (interleaving).")
    sequence_parallel: bool = Field(default=False, description="Megatron sequence parallelism within TP.")
    zero_stage: ZeroStage = Field(
        default=0, description="0 replicated; 1 optimizer sharded over DP; 2 + gradients; 3 + weights.")
    micro_batch: int = Field(default=1, ge=1, le=100_000, description="Sequences per micro-batch per replica.")
    recompute: Recompute = Field(default="none", description="Activation recompute: none, selective, full.")
    ep: int = Field(
        default=1, ge=1, le=100_000,
        description="Expert-parallel degree (Megatron --expert-model-parallel-size): routed experts "
                    "are split over ep ranks. 1 for a dense model.")
    etp: int | None = Field(
        default=None, ge=1, le=1024,
        description="Expert tensor-parallel degree (--expert-tensor-parallel-size); None means tp, "
                    "Megatron's default (NVIDIA/Megatron-LM d98e8a64, megatron/training/arguments.py "
                    "L587). The expert group EP x ETP x expert-DP spans the same ranks as TP x CP x DP "
                    "(megatron/core/parallel_state.py L874-883, initialize_model_parallel).")
    rank_order: RankOrder = Field(
        default=DEFAULT_RANK_ORDER,
        description="Placement: how ranks map to GPUs, fastest-varying first. 'tp-cp-dp-pp' is "
                    "Megatron-LM's default; 'tp-cp-pp-dp' (--use-tp-pp-dp-mapping) puts "
                    "pipeline neighbours closer than data-parallel replicas.")
    pipeline_layers: tuple[int, ...] | None = Field(
        default=None, strict=False,  # a JSON list is accepted
        description="Transformer layers per pipeline stage (pp values) or per model chunk "
                    "(pp x vpp values; chunk c runs on rank c mod pp); they sum to model.layers. "
                    "None: every stage is charged as the busiest rank (ceil(L / (pp vpp)) x vpp).")

    @model_validator(mode="after")
    def _check(self) -> LayoutSpec:
        if self.vpp > 1 and self.pp == 1:
            raise ValueError("vpp: vpp > 1 needs pp > 1 (interleaving splits pipeline stages)")
        if (self.tp * self.cp * self.dp) % (self.ep * self.expert_tp):
            raise ValueError(f"ep: ep x etp ({self.ep} x {self.expert_tp}) must divide tp x cp x dp "
                             f"({self.tp * self.cp * self.dp}): the expert group folds onto the same "
                             "ranks (Megatron parallel_state.py, initialize_model_parallel)")
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel: needs tp > 1")
        split = self.pipeline_layers
        if split is not None:
            if len(split) not in (self.pp, self.pp * self.vpp):
                raise ValueError(f"pipeline_layers: {len(split)} values; expected pp ({self.pp}) "
                                 f"or pp x vpp ({self.pp * self.vpp})")
            if min(split) < 1:
                raise ValueError("pipeline_layers: every stage needs at least one layer")
        return self

    @property
    def gpus(self) -> int:
        """GPUs the layout occupies: tp * pp * dp * cp."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel degree in effect (etp, or tp when unset)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree: the TP x CP x DP ranks of one pipeline stage divided by
        EP x ETP (Megatron parallel_state.py L880, expert_data_parallel_size)."""
        return (self.tp * self.cp * self.dp) // (self.ep * self.expert_tp)


def tp_splits_heads(model: ModelSpec, tp: int) -> bool:
    """TP divides the query heads and either divides the KV heads or is a multiple of them
    (KV heads replicated when TP > kv_heads; Megatron-LM `num_query_groups`)."""
    kv_ok = model.kv_heads % tp == 0 if tp <= model.kv_heads else tp % model.kv_heads == 0
    return model.heads % tp == 0 and kv_ok


def check_layout_fits_model(model: ModelSpec, training: TrainingSpec, layout: LayoutSpec) -> list[str]:
    """Cross-spec shape checks. Returns 'field: reason' strings (empty when the layout is valid)."""
    out: list[str] = []
    if model.heads % layout.tp:
        out.append(f"layout.tp: {layout.tp} does not divide model.heads ({model.heads})")
    if layout.tp > model.kv_heads and layout.tp % model.kv_heads:
        out.append(f"layout.tp: {layout.tp} is neither a divisor nor a multiple of kv_heads ({model.kv_heads})")
    elif layout.tp <= model.kv_heads and model.kv_heads % layout.tp:
        out.append(f"layout.tp: {layout.tp} does not divide model.kv_heads ({model.kv_heads})")
    if layout.pp * layout.vpp > model.layers:
        out.append(f"layout.pp: pp*vpp ({layout.pp * layout.vpp}) exceeds model.layers ({model.layers})")
    if layout.pipeline_layers is not None and sum(layout.pipeline_layers) != model.layers:
        out.append(f"layout.pipeline_layers: sum {sum(layout.pipeline_layers)} is not model.layers "
                   f"({model.layers})")
    if model.moe is None and (layout.ep > 1 or layout.expert_tp != layout.tp):
        out.append("layout.ep: expert parallelism (ep > 1 or etp) needs a mixture-of-experts model "
                   "(model.moe)")
    elif model.moe is not None and model.moe.experts % layout.ep:
        # Megatron-LM d98e8a64 megatron/training/arguments.py L1657: num_experts % EP == 0.
        out.append(f"layout.ep: {layout.ep} does not divide model.moe.experts ({model.moe.experts})")
    if training.seq_len % (2 * layout.cp) and layout.cp > 1:
        out.append(f"layout.cp: seq_len ({training.seq_len}) not divisible by 2*cp ({2 * layout.cp})")
    return out


class ReferenceSpec(StrictModel):
    """A published measurement of the run a training spec describes, for comparison in `plan`.

    Units: GPU-hours (GPUs x wall-clock hours). Compare like with like: `scope` says what the
    published figure counts (e.g. pre-training only, without context extension).
    """

    gpu_hours: float = Field(gt=0, le=1e12, description="Published GPU-hours of the run.")
    scope: str = Field(min_length=1, max_length=300,
                       description="What the figure counts, e.g. 'pre-training, 14.8T tokens'.")
    source: str = Field(min_length=1, max_length=1000,
                        description="Where it is published (document, section, table).")
    layout: LayoutSpec | None = Field(
        default=None, description="The published parallel layout; `plan` predicts it too.")


TrainingSpec.model_rebuild()  # resolve the forward reference to ReferenceSpec

