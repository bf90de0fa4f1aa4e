"""FP8 GEMMs in mixture-of-experts layers: the experts' casts, weight copies and saved inputs.

Unit legend: `_s` seconds; `_bytes` bytes; rows and widths are element counts of one MoE
layer for one micro-batch on one GPU (solver.cost.moe_layer.ExpertShape: R = busy rows per
expert x E / ep routed rows, F' = expert width / etp, t = the rank's sequence-parallel token
shard, s b = micro_batch x seq / cp); g = 2 for a gated FFN (fc1 writes two outputs), else 1.

What runs in FP8 (NVIDIA/Megatron-LM d98e8a64): with --fp8 the routed experts are one
TEGroupedLinear per fc1 / fc2 (megatron/core/extensions/transformer_engine.py L2382, a
te.pytorch.GroupedLinear, which quantizes its inputs, output gradients and weights like
te.Linear) behind Fp8Padding / Fp8Unpadding of each expert's rows (megatron/core/transformer/
moe/experts.py L306-313); the shared experts are a TE column/row-parallel MLP; the router is
a plain torch GEMM in BF16/FP32 (router.py) and stays BF16. So a MoE layer's FP8 work is the
dense FFN's (solver.cost.fp8, compute.fp8_cast_s) applied to the expert GEMMs' own shapes:
- casts, per element at the recipe's bytes (fp8.CAST_BYTES_PER_ELEMENT): forward the routed
  fc1 input (R D: the dispatched, permuted rows; the norm's fused cast cannot serve them, the
  permutation runs between) and fc2 input (R F'), the shared experts' fc1 input (t D with
  fp8.sp_gather_fp8, else s b D) and fc2 input (s b S); backward the output gradients
  (R (g F' + D), s b (g S + D)) and the inputs again where the framework keeps them BF16;
  the weights per use (fp8.weight_cast 'per_use') or once per step (moe_linear_weights_on_rank);
- memory: the cached FP8 weight copies (2 bytes per weight: row- and column-wise) of the rank's
  expert weights, and the FP8 saved inputs (moe_saved_input_delta_bytes);
- the token all-to-all stays BF16: Megatron quantizes the dispatched tokens only with
  moe_dispatch_fwd_dtype / moe_combine_bwd_dtype = 'mxfp8' (transformer_config.py L997-1008,
  default 'bf16', flex dispatcher only), which trainplan does not model.
Not charged: Fp8Padding's row padding (each expert's rows rounded up to the FP8 alignment,
under 32 rows per expert), the multi-token-prediction modules' expert weights.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from solver.cost.compute import LayerShape, layer_shape
from solver.cost.fp8 import FP8_BYTES, Fp8Work, gemm_operand_elements
from solver.specs import ModelSpec

if TYPE_CHECKING:  # moe_layer imports this module
    from solver.cost.moe_layer import ExpertShape


@dataclass(frozen=True)
class ExpertRows:
    """The FP8 GEMM operands of one MoE block on one GPU (module docstring's symbols)."""

    routed_rows: float     # R
    local_experts: int     # E / ep
    width: int             # F'
    shard_tokens: float    # t (sequence-parallel shard: the shared fc1 input with sp_gather_fp8)
    full_tokens: float     # s b
    shared_width: int      # S: the shared experts' inner width / tp
    hidden: int            # D
    gated: bool

    @classmethod
    def of(cls, sh: ExpertShape, full_tokens: float, hidden: int, gated: bool) -> ExpertRows:
        return cls(routed_rows=float(sh.busy_rows * sh.local_experts), local_experts=sh.local_experts,
                   width=sh.width, shard_tokens=sh.tokens, full_tokens=float(full_tokens),
                   shared_width=sh.shared_width, hidden=hidden, gated=gated)

    def elements(self, w: Fp8Work) -> tuple[float, float, float]:
        """(GEMM inputs, output gradients, weights) elements the block's FP8 GEMMs cast."""
        r, f, s, d, g = self.routed_rows, self.width, self.shared_width, self.hidden, 2 if self.gated else 1
        shared_in = self.shard_tokens if w.sp_gather_fp8 else self.full_tokens
        inputs = r * (d + f) + ((shared_in * d + self.full_tokens * s) if s else 0.0)
        grads = r * (g * f + d) + (self.full_tokens * (g * s + d) if s else 0.0)
        weights = self.local_experts * d * f * (g + 1) + d * s * (g + 1)
        return inputs, grads, weights


def expert_cast_s(rows: ExpertRows, w: Fp8Work, hbm_bytes_s: float) -> tuple[float, float]:
    """(forward, backward) seconds of one MoE block's FP8 casts (module docstring), HBM-bound
    at the recipe's bytes per element, as compute.fp8_cast_s for a dense layer."""
    inputs, grads, weights = rows.elements(w)
    c = w.cast_bytes_per_element
    per_use = c * weights if w.weight_cast_per_use else 0.0
    fwd = c * inputs + per_use
    bwd = c * grads + (0.0 if w.saved_inputs_fp8 else c * inputs) + per_use
    return fwd / hbm_bytes_s, bwd / hbm_bytes_s


def dense_ffn_cast_s(sh: LayerShape, tp: int, w: Fp8Work, hbm_bytes_s: float) -> tuple[float, float]:
    """(forward, backward) seconds of the FFN's share of compute.fp8_cast_s (the FFN-up input
    at the norm's cast bytes, the FFN-down input, their output gradients, per-use weights),
    which a MoE layer replaces. Sequence parallelism is taken on whenever tp > 1 (MoE layers
    with TP run it: moe_layer's module docstring)."""
    rows = sh.tokens / tp if w.sp_gather_fp8 else sh.tokens
    up = sh.ffn_width * (2 if sh.gated else 1)
    normed, other = rows * sh.hidden, sh.tokens * sh.ffn_width
    grads, weights = sh.tokens * (up + sh.hidden), sh.hidden * up + sh.ffn_width * sh.hidden
    c = w.cast_bytes_per_element
    per_use = c * weights if w.weight_cast_per_use else 0.0
    fwd = w.norm_cast_bytes_per_element * normed + c * other + per_use
    bwd = c * grads + (0.0 if w.saved_inputs_fp8 else c * (normed + other)) + per_use
    return fwd / hbm_bytes_s, bwd / hbm_bytes_s


def moe_linear_weights_on_rank(model: ModelSpec, *, tp: int, pp: int, ep: int, etp: int) -> float:
    """Linear-layer weight elements the FP8 GEMMs of one rank use (compute.linear_weights_on_rank
    for a MoE model): every layer's attention, the dense layers' FFN, each MoE layer's E / ep
    local experts of width F / etp and its shared experts (width / tp); L / pp layers' worth."""
    e = model.moe
    assert e is not None  # callers pass MoE models only
    sh = layer_shape(model, 1, tp, 1, 1)
    attn_and_ffn = gemm_operand_elements(0, 0, sh.hidden, sh.q_width, sh.kv_width, sh.ffn_width, sh.gated)[3]
    ffn = gemm_operand_elements(0, 0, sh.hidden, 0, 0, sh.ffn_width, sh.gated)[3]
    g1 = 3 if model.ffn_gated else 2
    experts = (e.experts // ep) * model.hidden * -(-e.expert_ffn_hidden // etp) * g1
    shared = model.hidden * -(-e.shared_experts * e.shared_width // tp) * g1
    moe_layers = sum(e.is_moe_layer(i) for i in range(model.layers))
    total = model.layers * (attn_and_ffn - ffn) + (model.layers - moe_layers) * ffn + moe_layers * (experts + shared)
    return total / pp


def moe_saved_input_delta_bytes(rows: ExpertRows, dense_ffn_width: float, rep_rows: float) -> float:
    """Bytes one MoE layer keeps beyond a dense layer's FP8 accounting for one micro-batch when
    the framework saves the GEMM inputs in FP8 (fp8.saved_inputs_fp8; TE linear.py L600-621,
    as memory.fp8_saved_input_saving), added to moe_memory's BF16 extra:
    - the routed fc1 / fc2 inputs (R D, R F') and the shared fc2 input (s b S) kept in FP8: -1 byte each;
    - the dense FFN-down input it replaces (s b F / tp) was already counted at 1 byte: +1 back;
    - the norm output (rep_rows x D: 1/tp of it with SP) stays BF16 for the router (it
      was counted at 1 byte as the dense FFN-up input): +1, plus the shared fc1's own FP8
      copy of its sequence shard (t D) when there are shared experts."""
    saved = 2 - FP8_BYTES
    r, d = rows.routed_rows, rows.hidden
    shared_fc1 = rows.shard_tokens * d if rows.shared_width else 0.0
    fp8_inputs = r * (d + rows.width) + rows.full_tokens * rows.shared_width
    return saved * (rows.full_tokens * dense_ffn_width + rep_rows * d - fp8_inputs) + FP8_BYTES * shared_fc1
