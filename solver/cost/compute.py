"""Compute time of one transformer layer (and the LM head) for one micro-batch on one GPU.

Unit legend: `_s` seconds; `_flops` floating-point operations; `_bytes` bytes; shapes
are element counts. A GEMM (m, n, k) multiplies an m x k by a k x n matrix (2 m n k FLOPs).

Model of a layer (Megatron-LM tensor parallelism, Shoeybi et al. 2019, Sec. 3):
- GEMMs, rows M = micro_batch x seq_len / cp tokens: QKV (n = (H + 2K) dh / tp, GQA per
  Ainslie et al. 2023), attention output (k = H dh / tp), FFN up (n = F / tp, doubled for
  the SwiGLU gate, Shazeer 2020) and down (k = F / tp). Backward = a data-gradient and a
  weight-gradient GEMM per forward GEMM, i.e. 2x the forward FLOPs (Narayanan et al. 2021,
  Sec. 3.2 / eq. 3 derivation).
- GEMM time: roofline max(FLOPs / achievable compute, bytes / HBM) with the achievable
  compute reduced by tile and wave quantization (NVIDIA Deep Learning Performance Guide,
  "Matrix Multiplication Background", sections Tile Quantization and Wave Quantization).
- Attention core: FlashAttention (Dao et al. 2022; FA-2, Dao 2023): forward 4 M S (H/tp) dh
  FLOPs halved by the causal mask, backward 2.5x forward (FA-2 Sec. 4.1: five matmuls
  against two); or the unfused path (full S x S, scores as HBM traffic).
- Memory-bound elementwise work (norms, residual adds, activation function, rotary):
  bytes over achievable HBM bandwidth; backward moves about twice the forward bytes (reads
  the saved input and the output gradient, writes the input gradient).
- Recompute (Korthikanti et al. 2022, Sec. 5): full = the layer's whole forward again;
  selective = the attention core's forward again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from solver.cost.fp8 import Fp8Work, gemm_operand_elements
from solver.cost.options import AttentionKernel, CostOptions
from solver.specs import ModelSpec, Recompute
from topology.spec import GpuSpec

ACT_BYTES = 2  # BF16/FP16 activations
CE_BYTES_PER_LOGIT = 56.0  # forward 34 + backward 22, see head_times_s
GEMM_TILES = ((128, 128), (128, 256), (256, 128))  # BF16 CTA tiles cuBLAS/CUTLASS use on A100/H100
FLASH_BACKWARD_FACTOR = 2.5  # FA-2 (Dao 2023, Sec. 4.1): backward = 2.5 x forward FLOPs


def gemm_efficiency(m: int, n: int, gpu: GpuSpec, opts: CostOptions) -> float:
    """Achievable share of peak for an (m, n, .) GEMM: peak fraction x tile x wave quantization.

    The library picks its output tile per shape (cuBLAS heuristics); we take the best of
    the tiles in GEMM_TILES, each padded to whole tiles and whole waves of
    options.gemm_concurrent_tiles tiles.
    """
    best = 0.0
    for tm, tn in GEMM_TILES:
        tiles_m, tiles_n = math.ceil(m / tm), math.ceil(n / tn)
        tile_eff = (m * n) / (tiles_m * tm * tiles_n * tn)
        tiles = tiles_m * tiles_n
        waves = math.ceil(tiles / opts.gemm_concurrent_tiles)
        best = max(best, tile_eff * tiles / (waves * opts.gemm_concurrent_tiles))
    return opts.gemm_peak_fraction * best


def gemm_time_s(m: int, n: int, k: int, gpu: GpuSpec, opts: CostOptions, fp8: bool = False) -> float:
    """Roofline time of one GEMM (m, n, k): max(compute-bound, HBM-bound) seconds.

    BF16: dense BF16 peak x gemm_peak_fraction, 2-byte operands. FP8 (fp8=True): dense FP8
    peak (GpuSpec.peak_fp8_tflops) x fp8_gemm_peak_fraction, 1-byte inputs and a BF16
    output; the same tile and wave quantization (FP8 kernels use the same CTA tiles).
    """
    if min(m, n, k) <= 0:
        return 0.0
    if fp8 and gpu.peak_fp8_tflops is not None:
        quant = gemm_efficiency(m, n, gpu, opts) / opts.gemm_peak_fraction
        compute_s = 2.0 * m * n * k / (gpu.peak_fp8_tflops * 1e12 * opts.fp8_gemm_peak_fraction * quant)
        hbm_bytes = 1.0 * (m * k + k * n) + ACT_BYTES * m * n
    else:
        compute_s = 2.0 * m * n * k / (gpu.peak_flops * gemm_efficiency(m, n, gpu, opts))
        hbm_bytes = ACT_BYTES * (m * k + k * n + m * n)
    return max(compute_s, hbm_bytes / (gpu.hbm_gb_s * 1e9 * opts.hbm_fraction))


# Memoized: a search asks for the same GEMM shapes under many layouts (a pure function of
# hashable arguments: ints, the frozen GpuSpec and CostOptions, a bool).
@lru_cache(maxsize=1 << 16)
def gemm_fwd_bwd_s(m: int, n: int, k: int, gpu: GpuSpec, opts: CostOptions,
                   fp8: bool = False) -> tuple[float, float, float]:
    """(forward, data-gradient, weight-gradient) times of a linear layer's GEMMs."""
    return (gemm_time_s(m, n, k, gpu, opts, fp8),   # Y = X W
            gemm_time_s(m, k, n, gpu, opts, fp8),   # dX = dY W^T
            gemm_time_s(k, n, m, gpu, opts, fp8))   # dW = X^T dY


@dataclass(frozen=True)
class LayerShape:
    """Per-GPU shapes of one layer for one micro-batch."""

    tokens: int        # GEMM rows: micro_batch * seq_len / cp
    seq_kv: int        # keys each query attends over (full sequence)
    hidden: int
    q_width: int       # H dh / tp
    kv_width: int      # K dh / tp (K heads replicated when tp > K)
    ffn_width: int     # F / tp
    heads: int         # H / tp
    head_dim: int
    gated: bool


def layer_shape(model: ModelSpec, seq_len: int, tp: int, cp: int, micro_batch: int) -> LayerShape:
    """Shapes of one layer on one GPU (heads split over tp; sequence split over cp).

    MLA (model.mla): q_width = H d_qk / tp; kv_width and head_dim stand for the mean of the
    query/key and value head sizes, (d_qk + d_v) / 2, so that the attention core's
    4 M S h dh FLOPs are MLA's 2 M S h (d_qk + d_v) (QK^T over d_qk, PV over d_v;
    DeepSeek-V2 eqs. 9-19) and a CP ring moves K and V of 2 x kv_width = H (d_qk + d_v) / tp.
    """
    if model.mla is not None:
        mean_dh = (model.mla.qk_head_dim + model.mla.v_head_dim) // 2
        return LayerShape(
            tokens=micro_batch * seq_len // cp, seq_kv=seq_len, hidden=model.hidden,
            q_width=model.heads * model.mla.qk_head_dim // tp, kv_width=model.heads * mean_dh // tp,
            ffn_width=model.ffn_hidden // tp, heads=model.heads // tp, head_dim=mean_dh, gated=model.ffn_gated)
    kv_heads_local = max(1, model.kv_heads // tp)
    return LayerShape(
        tokens=micro_batch * seq_len // cp, seq_kv=seq_len, hidden=model.hidden,
        q_width=model.heads * model.head_dim // tp, kv_width=kv_heads_local * model.head_dim,
        ffn_width=model.ffn_hidden // tp, heads=model.heads // tp, head_dim=model.head_dim,
        gated=model.ffn_gated)


def mla_gemms(model: ModelSpec, sh: LayerShape, tp: int) -> list[tuple[int, int, int]]:
    """(m, n, k) of MLA's forward GEMMs on one GPU, column-parallel ones first, the output
    projection last (NVIDIA/Megatron-LM d98e8a64, core/transformer/multi_latent_attention.py:
    linear_q_down_proj and linear_kv_down_proj are TELinear parallel_mode='duplicated' on the
    sequence-parallel shard, tokens / tp rows with the full latent width; the up projections
    are column-parallel over all tokens; linear_proj row-parallel; DeepSeek-V2 eqs. 9-19):
    q down (M/tp, r_q, D), kv down (M/tp, r_kv + d_rope, D), q up (M, H d_qk / tp, r_q) or,
    without q_lora_rank, q (M, H d_qk / tp, D); kv up (M, H (d_nope + d_v) / tp, r_kv);
    output (M, D, H d_v / tp)."""
    a, m, h = model.mla, sh.tokens, model.heads // tp
    assert a is not None
    sp_rows = max(1, m // tp)
    out = [(sp_rows, a.kv_lora_rank + a.qk_rope_head_dim, sh.hidden),
           (m, h * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank)]
    if a.q_lora_rank is None:
        out.append((m, h * a.qk_head_dim, sh.hidden))
    else:
        out += [(sp_rows, a.q_lora_rank, sh.hidden), (m, h * a.qk_head_dim, a.q_lora_rank)]
    return out + [(m, sh.hidden, h * a.v_head_dim)]


def layer_gemms(sh: LayerShape) -> list[tuple[int, int, int]]:
    """(m, n, k) of the four forward GEMMs: QKV, attention output, FFN up(+gate), FFN down."""
    up = sh.ffn_width * (2 if sh.gated else 1)
    return [(sh.tokens, sh.q_width + 2 * sh.kv_width, sh.hidden),
            (sh.tokens, sh.hidden, sh.q_width),
            (sh.tokens, up, sh.hidden),
            (sh.tokens, sh.hidden, sh.ffn_width)]


@dataclass(frozen=True)
class LayerTimes:
    """Times of one layer for one micro-batch, seconds, by part and pass."""

    gemm_fwd_s: float
    gemm_dgrad_s: float
    gemm_wgrad_s: float
    column_dgrad_s: float   # data-gradient GEMMs of QKV and FFN-up (hide SP input re-gather)
    column_wgrad_s: float   # weight-gradient GEMMs of QKV and FFN-up (hide TP backward comm)
    attn_fwd_s: float
    attn_bwd_s: float
    elementwise_fwd_s: float
    elementwise_bwd_s: float
    up_proj_fwd_s: float = 0.0  # MLA q/kv up-projection GEMMs + RoPE forward (mla_up_proj recompute)
    norm_fwd_s: float = 0.0     # the two layer norms' forward (layernorm recompute)

    @property
    def forward_s(self) -> float:
        return self.gemm_fwd_s + self.attn_fwd_s + self.elementwise_fwd_s

    @property
    def backward_s(self) -> float:
        return self.gemm_dgrad_s + self.gemm_wgrad_s + self.attn_bwd_s + self.elementwise_bwd_s

    def recompute_s(self, recompute: Recompute, modules: frozenset[str] = frozenset({"core_attn"})) -> float:
        """Extra forward work in backward: full = whole layer; selective = the forward of the
        recomputed modules in this layer (solver.cost.recompute.selective_modules: core_attn the
        attention core, mla_up_proj the up projections and RoPE, layernorm the two norms;
        moe_act is the MoE block's, charged in solver.cost.moe_comm)."""
        if recompute != "selective":
            return self.forward_s if recompute == "full" else 0.0
        return ((self.attn_fwd_s if "core_attn" in modules else 0.0)
                + (self.up_proj_fwd_s if "mla_up_proj" in modules else 0.0)
                + (self.norm_fwd_s if "layernorm" in modules else 0.0))


def dropout_on(model: ModelSpec, opts: CostOptions) -> bool:
    """Whether dropout masks are charged: the model has dropout or the options force it."""
    return opts.dropout or model.dropout > 0


def attention_core_s(sh: LayerShape, kernel: AttentionKernel, gpu: GpuSpec,
                     opts: CostOptions, dropout: bool | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core (scores, softmax, weighted values)."""
    full_flops = 4.0 * sh.tokens * sh.seq_kv * sh.heads * sh.head_dim  # QK^T and PV, 2 FLOPs/MAC
    if kernel == "flash":
        fwd = 0.5 * full_flops / (gpu.peak_flops * opts.attention_peak_fraction)  # causal: half
        return fwd, FLASH_BACKWARD_FACTOR * fwd
    # Unfused (Megatron before FlashAttention): full S x S batched GEMMs at GEMM efficiency;
    # scores written, softmax read+written, probabilities read: ~8 bytes per score element
    # forward (+3 with dropout: 1-byte mask, 2-byte output), twice that backward.
    scores = sh.tokens * sh.seq_kv * sh.heads
    per_score = 8 + (3 if (opts.dropout if dropout is None else dropout) else 0)
    hbm = gpu.hbm_gb_s * 1e9 * opts.hbm_fraction
    fwd = full_flops / (gpu.peak_flops * opts.gemm_peak_fraction) + per_score * scores / hbm
    return fwd, 2.0 * fwd


def elementwise_fwd_bytes(sh: LayerShape, model: ModelSpec, tp: int, sp: bool, dropout: bool) -> float:
    """HBM bytes of a layer's forward elementwise kernels on one GPU.

    Sequence-parallel regions (norms, residual adds) hold tokens / tp rows with SP and all
    rows without (Korthikanti et al. 2022, Sec. 4.2.2). Per token: two norms read and
    write h values (8h bytes); two residual adds read two and write one (12h, +2h of
    dropout masks); rotary reads and writes Q and K (RoPE, Su et al. 2021); the activation
    reads the FFN-up output and writes its result (GeLU 4F, SwiGLU 6F bytes per token).
    """
    norm_rows = sh.tokens / tp if sp else sh.tokens
    h = sh.hidden
    sp_region = norm_rows * (8 * h + 12 * h + (2 * h if dropout else 0))
    rope: float = 4 * (sh.q_width + sh.kv_width) * sh.tokens if model.position_embedding == "rope" else 0
    if model.mla is not None:  # rotary on the rope parts only; the two latent RMSNorms (r_q, r_kv)
        a = model.mla
        rope = (4 * (sh.heads * a.qk_rope_head_dim + a.qk_rope_head_dim) * sh.tokens
                + 8 * ((a.q_lora_rank or 0) + a.kv_lora_rank) * norm_rows)
    act = (6 if sh.gated else 4) * sh.ffn_width * sh.tokens
    return float(sp_region + rope + act)


def layer_times(model: ModelSpec, seq_len: int, kernel: AttentionKernel, gpu: GpuSpec,
                opts: CostOptions, tp: int, cp: int, sp: bool, micro_batch: int,
                fp8: Fp8Work | None = None) -> LayerTimes:
    """Times of one layer's forward and backward (without recompute) for one micro-batch.

    With `fp8` the four linear layers' GEMMs run in FP8 and their cast work (fp8_cast_s)
    joins the elementwise time; the attention core stays BF16.
    """
    sh = layer_shape(model, seq_len, tp, cp, micro_batch)
    gemms = layer_gemms(sh)
    columns = [0, 2]  # QKV and FFN-up: column-parallel (their grads hide TP traffic)
    ups: list[int] = []
    if model.mla is not None:
        attn = mla_gemms(model, sh, tp)
        gemms = attn + gemms[2:]
        columns = [*range(len(attn) - 1), len(attn)]
        ups = [1, len(attn) - 2]  # kv up, q up (or the full q projection): mla_gemms' order
    parts = [gemm_fwd_bwd_s(m, n, k, gpu, opts, fp8 is not None) for m, n, k in gemms]
    dropout = dropout_on(model, opts)
    attn_fwd, attn_bwd = attention_core_s(sh, kernel, gpu, opts, dropout)
    hbm = gpu.hbm_gb_s * 1e9 * opts.hbm_fraction
    elem_fwd = elementwise_fwd_bytes(sh, model, tp, sp, dropout) / hbm
    cast_fwd, cast_bwd = fp8_cast_s(sh, tp, sp, fp8, hbm) if fp8 is not None else (0.0, 0.0)
    return LayerTimes(
        gemm_fwd_s=sum(p[0] for p in parts), gemm_dgrad_s=sum(p[1] for p in parts),
        gemm_wgrad_s=sum(p[2] for p in parts), column_dgrad_s=sum(parts[i][1] for i in columns),
        column_wgrad_s=sum(parts[i][2] for i in columns),
        attn_fwd_s=attn_fwd, attn_bwd_s=attn_bwd,
        elementwise_fwd_s=elem_fwd + cast_fwd, elementwise_bwd_s=2.0 * elem_fwd + cast_bwd,
        up_proj_fwd_s=sum(parts[i][0] for i in ups) + mla_rope_bytes(model, sh) / hbm,
        norm_fwd_s=8.0 * sh.hidden * (sh.tokens / tp if sp else sh.tokens) / hbm)


def mla_rope_bytes(model: ModelSpec, sh: LayerShape) -> float:
    """HBM bytes of MLA's rotary embedding forward (reads and writes the H + 1 rope parts of
    width d_rope, BF16; elementwise_fwd_bytes' MLA term); 0 without MLA."""
    a = model.mla
    return 0.0 if a is None else 4.0 * (sh.heads * a.qk_rope_head_dim + a.qk_rope_head_dim) * sh.tokens


def fp8_cast_s(sh: LayerShape, tp: int, sp: bool, w: Fp8Work, hbm_bytes_s: float) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's FP8 casts for one micro-batch.

    Forward: the four GEMM inputs (solver.cost.fp8.gemm_operand_elements; the two norm
    outputs at the fused-norm bytes where the framework fuses the cast into the norm), plus
    the weights where the framework casts them at every use; backward: the four output
    gradients, the inputs again where the framework kept them in BF16, the weights again per
    use. Each element costs the recipe's cast bytes over achievable HBM bandwidth. A framework
    that caches FP8 weights casts them once per step instead (terms.optimizer_s).
    """
    rows = sh.tokens / tp if (sp and w.sp_gather_fp8) else sh.tokens
    normed, other, grads, weights = gemm_operand_elements(
        sh.tokens, rows, sh.hidden, sh.q_width, sh.kv_width, sh.ffn_width, sh.gated)
    c = w.cast_bytes_per_element
    per_use = c * weights if w.weight_cast_per_use else 0.0
    fwd = w.norm_cast_bytes_per_element * normed + c * other + per_use
    bwd = c * grads + (0.0 if w.saved_inputs_fp8 else c * (normed + other)) + per_use
    return fwd / hbm_bytes_s, bwd / hbm_bytes_s


def head_times_s(model: ModelSpec, seq_len: int, gpu: GpuSpec, opts: CostOptions,
                 tp: int, cp: int, sp: bool, micro_batch: int) -> float:
    """Final norm + LM head GEMMs (forward and backward) + vocab-parallel cross-entropy, seconds.

    LM head: (M, V/tp, h) forward, dgrad and wgrad (Megatron vocab-parallel output layer).
    Vocab-parallel cross-entropy (Megatron-LM core/tensor_parallel/cross_entropy.py) per
    logit: forward casts BF16 -> FP32 (2 + 4 bytes), subtracts the max (4 + 4), exponentiates
    (4 + 4), sums (4), normalizes the saved softmax (4 + 4) = 34 bytes; backward subtracts
    the one-hot (4 + 4), scales by the loss gradient (4 + 4) and casts to BF16 (4 + 2) = 22.
    """
    tokens = micro_batch * seq_len // cp
    vocab_local = math.ceil(model.vocab / tp)
    fwd, dgrad, wgrad = gemm_fwd_bwd_s(tokens, vocab_local, model.hidden, gpu, opts)
    hbm = gpu.hbm_gb_s * 1e9 * opts.hbm_fraction
    norm_rows = tokens / tp if sp else tokens
    elementwise = (CE_BYTES_PER_LOGIT * tokens * vocab_local + 3 * 4.0 * model.hidden * norm_rows) / hbm
    return fwd + dgrad + wgrad + elementwise


def embedding_s(model: ModelSpec, seq_len: int, gpu: GpuSpec, opts: CostOptions,
                tp: int, cp: int, micro_batch: int) -> float:
    """Token-embedding lookup (write M x h) and its gradient scatter-add (read + write), seconds."""
    tokens = micro_batch * seq_len // cp
    return 3.0 * ACT_BYTES * tokens * model.hidden / (gpu.hbm_gb_s * 1e9 * opts.hbm_fraction)


def linear_weights_on_rank(model: ModelSpec, tp: int, pp: int) -> float:
    """Linear-layer weight elements of the transformer layers on one rank (L / pp layers,
    each GEMM's k x n at this TP): the weights FP8 GEMMs use."""
    sh = layer_shape(model, 1, tp, 1, 1)
    weights = gemm_operand_elements(0, 0, sh.hidden, sh.q_width, sh.kv_width, sh.ffn_width, sh.gated)[3]
    return weights * model.layers / pp


def fp8_weight_cast_s(model: ModelSpec, gpu: GpuSpec, opts: CostOptions, w: Fp8Work | None,
                      tp: int, pp: int) -> float:
    """Once-per-step cast of the rank's linear weights to their FP8 copies, seconds: the
    frameworks that cache FP8 weights across micro-batches (profile fp8.weight_cast
    'per_step': Transformer Engine re-quantizes on the first micro-batch only); 0 for BF16
    and for per-use casting (charged per micro-batch in fp8_cast_s)."""
    if w is None or w.weight_cast_per_use:
        return 0.0
    hbm = gpu.hbm_gb_s * 1e9 * opts.hbm_fraction
    return w.cast_bytes_per_element * linear_weights_on_rank(model, tp, pp) / hbm
