"""FP8 GEMM recipes: where they run, what their casts cost, what memory they add or save.

Unit legend: `_bytes` bytes; `_per_element` bytes per tensor element; shapes are element
counts of one layer for one micro-batch on one GPU (solver.cost.compute.LayerShape).

What runs in FP8 (training.compute_precision != "bf16"): the four linear layers of each
transformer layer (QKV, attention output, FFN up(+gate), FFN down), forward, data-gradient
and weight-gradient GEMMs (Megatron-Core fp8_wgrad defaults to True, NVIDIA/Megatron-LM
d98e8a64 megatron/core/transformer/transformer_config.py L631). Not FP8: the attention core
(fp8_dot_product_attention defaults False, same file L640), the LM head (a plain
tensor_parallel.ColumnParallelLinear unless fp8_output_proj with MXFP8, core/models/gpt/
gpt_model.py L273-277; torchtitan filters "output", components/quantization/float8.md) and
the embedding (a lookup, no GEMM).

Cast work, HBM-bound, per element of each FP8 GEMM operand (derived here, read from
Transformer Engine d0067d0 quantizers and cuBLASLt's FP8 layout rule):
- every recipe reads the BF16 tensor once (2 bytes) and writes the FP8 copies its two
  GEMMs need: Hopper FP8 tensor-core GEMMs take only the "TN" layout (cuBLASLt FP8
  requirement), so an operand used in two orientations (activation: fprop and wgrad;
  output gradient: dgrad and wgrad; weight: fprop and dgrad) is written row-wise and
  column-wise (TE cast_transpose; MXFP8 also keeps both, its block scales run along K):
  2 x 1 byte;
- delayed scaling takes its scale from the amax history and records the amax inside the
  cast kernel (no extra pass); current scaling (per tensor, and torchao rowwise) computes
  the amax in a pass of its own before casting (+2 bytes read; TE Float8CurrentScaling
  Quantizer: compute amax, then scale, then quantize); block scaling computes each block's
  amax inside the cast and writes one FP32 scale per 128 elements per orientation
  (2 x 4 / 128 bytes); MXFP8 one E8M0 byte per 32 elements per orientation (2 x 1 / 32).
The delayed recipe's amax history (Megatron fp8_amax_history_len default 1, L621: 3 FP32
values per GEMM) is a few bytes per layer and is not counted.
"""
from __future__ import annotations

from dataclasses import dataclass

from solver.errors import Problem, SpecError
from solver.frameworks.profile import FrameworkProfile
from solver.specs import ComputePrecision
from topology.spec import GpuSpec

FP8_BYTES = 1
BF16_READ, FP8_TWO_COPIES = 2.0, 2.0 * FP8_BYTES
CAST_BYTES_PER_ELEMENT: dict[str, float] = {
    "fp8-delayed": BF16_READ + FP8_TWO_COPIES,                    # 4: amax fused in the cast
    "fp8-current": BF16_READ + FP8_TWO_COPIES + BF16_READ,        # 6: separate amax pass
    "fp8-rowwise": BF16_READ + FP8_TWO_COPIES + BF16_READ,        # 6: per-row amax pass
    "fp8-blockwise": BF16_READ + FP8_TWO_COPIES + 2 * 4 / 128,    # 4.0625: FP32 scale / 128
    "mxfp8": BF16_READ + FP8_TWO_COPIES + 2 * 1 / 32,             # 4.0625: E8M0 scale / 32
}
# Cast bytes per element of a norm output (the QKV and FFN-up inputs) where the framework
# fuses the quantization into the norm kernel (profile fp8.norm_fused_cast; Transformer Engine
# d0067d0 layernorm_linear.py L239-263 and csrc/extensions/normalization.cpp L100-118): the
# norm then writes FP8 instead of BF16. Delayed scaling is fully fused (the two 1-byte copies
# replace the 2-byte BF16 write, no read: 0 extra); current scaling fuses only the amax (the
# BF16 output is written, then cast: the cast's 4 bytes, no amax pass); block and MX scaling
# are not fused (the full cast).
FUSED_NORM_CAST_BYTES_PER_ELEMENT: dict[str, float] = {
    "fp8-delayed": 0.0, "fp8-current": BF16_READ + FP8_TWO_COPIES,
    "fp8-rowwise": CAST_BYTES_PER_ELEMENT["fp8-rowwise"],
    "fp8-blockwise": CAST_BYTES_PER_ELEMENT["fp8-blockwise"], "mxfp8": CAST_BYTES_PER_ELEMENT["mxfp8"]}
# Smallest CUDA compute capability each recipe runs on: Transformer Engine d0067d0,
# transformer_engine/pytorch/quantization.py L149-185 (per-tensor FP8 >= 8.9, block scaling
# >= 9.0, MXFP8 >= 10.0 and below 12.0); torchao rowwise needs SM89 (torchtitan float8.py).
MIN_COMPUTE_CAPABILITY: dict[str, float] = {
    "fp8-delayed": 8.9, "fp8-current": 8.9, "fp8-rowwise": 8.9, "fp8-blockwise": 9.0, "mxfp8": 10.0}
# FP8 recipes whose MoE layers run as solver.cost.moe_fp8 charges them (routed and shared experts
# in FP8 with the framework profile's cast semantics, the router and LM head in BF16), per framework:
# - Megatron-Core (every recipe it runs): the routed experts are TEGroupedLinear with --fp8
#   (NVIDIA/Megatron-LM d98e8a64 megatron/core/transformer/moe/experts.py L306-313,
#   extensions/transformer_engine.py L2382);
# - torchtitan, rowwise and MXFP8 only (pytorch/torchtitan b5bcd76c): the export adds
#   Float8GroupedExpertsConverter (components/quantization/float8.py L216-266: torchao's dynamic
#   rowwise scaled grouped GEMM) or MXFP8GroupedExpertsConverter (mx.py L149-206) to its linear
#   converter; both save the BF16 input and weight and cast them again in backward (pytorch/ao
#   36027d82 torchao/prototype/moe_training/fp8_grouped_mm.py L155-157, mxfp8_grouped_mm.py
#   L223-229), the profile's saved_inputs_fp8 false / weight_cast per_use. torchao has no
#   per-tensor grouped GEMM (config.py Float8TrainingRecipe: fp8_rowwise only), so 'fp8-current'
#   MoE layers are refused.
FP8_MOE_RECIPES: dict[str, frozenset[str] | None] = {
    "megatron-core": None,  # None: every recipe the profile offers
    "torchtitan": frozenset({"fp8-rowwise", "mxfp8"}),
}
MXFP8_MAX_COMPUTE_CAPABILITY = 12.0  # exclusive (TE: "not supported on 12.0+ architectures yet")


@dataclass(frozen=True)
class Fp8Work:
    """What an FP8 recipe casts, per the framework (solver.cost.fp8; profile's fp8 section)."""

    cast_bytes_per_element: float  # CAST_BYTES_PER_ELEMENT[recipe]
    norm_cast_bytes_per_element: float  # the QKV / FFN-up inputs (norm outputs)
    sp_gather_fp8: bool            # inputs cast on the sequence shard, before the SP all-gather
    saved_inputs_fp8: bool         # False: backward casts the saved BF16 inputs again
    weight_cast_per_use: bool      # True: weights cast in every forward and backward


def fp8_work(precision: ComputePrecision, fw: FrameworkProfile) -> Fp8Work | None:
    """What the recipe casts under this framework's FP8 semantics (None: BF16 GEMMs)."""
    if not is_fp8(precision):
        return None
    f = fw.fp8
    cast = CAST_BYTES_PER_ELEMENT[precision]
    norm = FUSED_NORM_CAST_BYTES_PER_ELEMENT[precision] if f.norm_fused_cast.value else cast
    return Fp8Work(cast, norm, f.sp_gather_fp8.value, f.saved_inputs_fp8.value, f.weight_cast.value == "per_use")


def is_fp8(precision: ComputePrecision) -> bool:
    """Whether the linear layers' GEMMs run in FP8."""
    return precision != "bf16"


def moe_recipe_ok(framework: str, precision: str) -> bool:
    """Whether `framework` runs a MoE model's expert GEMMs in this FP8 recipe (FP8_MOE_RECIPES)."""
    if framework not in FP8_MOE_RECIPES:
        return False
    allowed = FP8_MOE_RECIPES[framework]
    return allowed is None or precision in allowed


def check_compute_precision(precision: ComputePrecision, gpu: GpuSpec, fw: FrameworkProfile,
                            moe: bool = False) -> None:
    """Refuse an FP8 recipe the framework does not run or the GPU cannot run, and an FP8
    recipe for MoE layers outside FP8_MOE_RECIPES (what solver.cost.moe_fp8 costs).

    Raises:
        SpecError: naming training.compute_precision (or cluster.gpu.*) and the reason.
    """
    if not is_fp8(precision):
        return
    problem = _fp8_problem(precision, gpu, fw, moe)
    if problem is not None:
        raise SpecError(str(problem), [problem])


def _fp8_problem(precision: str, gpu: GpuSpec, fw: FrameworkProfile, moe: bool) -> Problem | None:
    field = "training.compute_precision"
    if precision not in fw.fp8.recipes.value:
        src = fw.fp8.recipes.sources[0]
        offered = list(fw.fp8.recipes.value) or "no FP8 recipe"
        return Problem(field, f"{fw.name} does not run '{precision}' (it runs {offered}; "
                              f"{src.repository} {src.path})")
    if moe and not moe_recipe_ok(fw.name, precision):
        allowed = FP8_MOE_RECIPES.get(fw.name, frozenset())
        return Problem(field, f"{fw.name} runs MoE expert GEMMs in FP8 with {sorted(allowed or []) or 'no recipe'}, "
                              f"not '{precision}' (solver.cost.fp8.FP8_MOE_RECIPES cites the grouped-GEMM source); "
                              f"plan the MoE model with one of those or 'bf16'")
    if gpu.peak_fp8_tflops is None:
        return Problem("cluster.gpu.peak_fp8_tflops", f"training.compute_precision '{precision}' needs "
                       f"the GPU's dense FP8 peak, which {gpu.name} does not state (no FP8 tensor cores?)")
    need, cc = MIN_COMPUTE_CAPABILITY[precision], gpu.compute_capability
    if cc is None:
        return None if need <= 8.9 else Problem(
            "cluster.gpu.compute_capability", f"training.compute_precision '{precision}' needs CUDA "
            f"compute capability >= {need}, not stated for {gpu.name}")
    if cc < need or (precision == "mxfp8" and cc >= MXFP8_MAX_COMPUTE_CAPABILITY):
        where = "Blackwell (compute capability 10.x)" if precision == "mxfp8" else f"compute capability >= {need}"
        return Problem(field, f"'{precision}' runs on {where} only; {gpu.name} has compute capability "
                              f"{cc:g} (Transformer Engine quantization.py recipe checks)")
    return None


def gemm_operand_elements(tokens: int, sp_rows: float, hidden: int, q_width: int, kv_width: int,
                          ffn_width: int, gated: bool) -> tuple[float, float, float, float]:
    """(norm-output inputs, other inputs, output gradients, weights) elements one layer's
    FP8 GEMMs cast.

    The QKV and FFN-up inputs (norm outputs) are cast on `sp_rows` rows (the sequence shard
    when the framework casts before the SP all-gather, else all tokens); the attention-output
    and FFN-down inputs on all tokens. Output gradients: one per GEMM output. Weights: k x n.
    """
    up = ffn_width * (2 if gated else 1)
    qkv = q_width + 2 * kv_width
    grads = tokens * (qkv + hidden + up + hidden)
    weights = hidden * qkv + q_width * hidden + hidden * up + ffn_width * hidden
    return float(2 * sp_rows * hidden), float(tokens * (q_width + ffn_width)), float(grads), float(weights)


def saved_input_saving_bytes(rep_rows: float, tokens: float, hidden: int, q_width: float,
                             ffn_width: float) -> float:
    """Bytes per layer and micro-batch saved when the four GEMM inputs are kept for backward
    in FP8 instead of BF16 (1 byte less each; TE linear.py L600-621): QKV and FFN-up inputs
    (rep_rows rows: the sequence shard with SP), attention-output and FFN-down inputs."""
    return float((2 - FP8_BYTES) * (2 * rep_rows * hidden + tokens * (q_width + ffn_width)))
