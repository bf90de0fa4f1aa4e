"""The cost model's constants: few, physical, documented, and the same for every case.

Unit legend: `_fraction` is a dimensionless share of a hardware peak; `_bytes` bytes;
`_elements` counts of values; `_s` seconds.

Each default below carries its basis. The GEMM, attention and HBM fractions were chosen once
by a grid search on the 26 runs of shared/calibration/runs.jsonl (with each run's
attention kernel as its source documents it, see TrainingSpec.attention_kernel),
minimising median + max/2 of |step-time error|, inside the physically plausible ranges
quoted beside them; the DP overlap share as its docstring says. No constant depends on a case, a
source or a GPU name; benchmarks/accuracy.py reproduces the per-case errors.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from solver.errors import SpecError

AttentionKernel = Literal["flash", "unfused"]  # TrainingSpec.attention_kernel


@dataclass(frozen=True)
class CostOptions:
    """Constants of the step-time and memory model (defaults are the calibrated values)."""

    # --- compute -------------------------------------------------------------------------
    gemm_peak_fraction: float = 0.74
    """Achievable share of dense BF16 peak for a large, well-shaped GEMM inside a training
    step (fitted: 0.74). Isolated cuBLAS BF16 GEMMs reach ~80-90% of peak on A100 and
    ~70-80% on H100 at sustained clocks (NVIDIA "Matrix Multiplication Background" guide);
    one value serves both GPUs."""
    fp8_gemm_peak_fraction: float = 0.65
    """Achievable share of dense FP8 peak (GpuSpec.peak_fp8_tflops) for a large FP8 GEMM
    inside a training step (training.compute_precision != 'bf16'; fitted: 0.65). Below the
    BF16 share: FP8 GEMMs reach a smaller fraction of their 2x peak (power-limited clocks,
    the scaling epilogue). An isolated cuBLASLt E4M3 8192^3 GEMM runs at ~1,600 TFLOP/s on
    H100 SXM (0.81 of 1,979); in a step 0.65 x 1,979 = 1,286 TFLOP/s, 1.76x the BF16 GEMMs'
    0.74 x 989 = 732. Chosen by the same grid and criterion as the BF16 constants (median +
    max/2 of |step-time error|) on three of the six groups of benchmarks/data/fp8_runs.jsonl
    (Llama 3.1 8B and 70B, Nemotron-4 340B: 16 rows); the other three groups are held out
    (README "FP8 step time"). All FP8 rows are NVIDIA DGXC H100 runs (Megatron-Core +
    Transformer Engine, delayed scaling): the fraction is not yet checked on Blackwell or
    on other recipes."""
    gemm_concurrent_tiles: int = 132
    """Tiles computed concurrently in one wave (one per SM; H100 SXM has 132 SMs, A100 108).
    Used for wave quantization (same guide, "Wave Quantization"). One value for all GPUs:
    it only matters for GEMMs of a few waves."""
    attention_peak_fraction: float = 0.35
    """Achievable share of peak for the fused attention core (fitted: 0.35). FlashAttention-2
    reaches 50-73% of A100 peak forward and less backward (Dao 2023, Sec. 4.1, Fig. 4-7);
    on H100 FA-2 reaches ~35-50%, cuDNN/FA-3 more (Shah et al. 2024)."""
    hbm_fraction: float = 0.55
    """Achievable share of HBM bandwidth for memory-bound kernels (norms, activations,
    rotary, residual adds, cross-entropy, optimizer; fitted: 0.55). STREAM-like copies reach
    75-90% of nominal HBM bandwidth on A100/H100; the byte counts in compute.py are the
    minimum traffic of each op, so the fitted share also absorbs small unfused kernels."""
    dropout: bool = False
    """Charge dropout for every model (adds 1-byte masks to activations and mask traffic).
    Default off: a model's own `dropout` field turns it on for that model (Llama-style
    recipes have none; Korthikanti's equations assume it on)."""

    # --- communication -------------------------------------------------------------------
    dp_bucket_elements: int = 40_000_000
    """Gradient bucket size for bucketed DP reduction (Megatron-LM DDP default bucket of
    40M elements); each bucket pays the collective's latency term."""
    dp_bucket_elements_per_rank: int = 1_000_000
    """Bucket growth with DP size: buckets hold max(dp_bucket_elements, this x dp) elements
    (Megatron-Core DDP default), keeping each ring chunk bandwidth-bound at large DP."""
    dp_overlap_fraction: float = 1.0
    """Share of a compute window that DP traffic overlaps (terms.dp_exposed_s: gradient
    reduction under the last micro-batch's backward, or every backward for ZeRO-2/3;
    parameter gathers under the forward; the last bucket of each is always exposed).
    The windows are lower bounds (one sequence's layer time without recompute, x the
    micro-batch's sequences), so the whole window is usable: 1.0. Chosen on the held-out
    runs, not the calibration file, which does not identify it (its Megatron-LM 2021 rows
    did not overlap at all, its DGXC rows have one-micro-batch windows; its median error
    moves by 0.3 points over [0, 1]): benchmarks/data/heldout_runs.jsonl's torchtitan
    FSDP rows go from +17..24% at 0.8 to -1..+9% at 1.0 and its NeMo rows stay flat with
    DP as measured, so those rows are not independent evidence for this constant."""

    intra_node_network_efficiency: float = 1.0
    """Achieved / stated busbw of the collectives and transfers of a group that stays inside
    one NVLink domain (scales cluster.intra_node.bandwidth_gb_s as the links carry it, and
    the intra-domain sub-rings of hierarchical forms). Default 1.0: the stated figure is the
    achieved one, as `trainplan cluster from-nccl-tests` sets it (busbw, NVIDIA/nccl-tests
    doc/PERFORMANCE.md: the figure to compare with the hardware's peak); a spec holding the
    nominal NVLink figure instead is off by what NCCL reaches: 8x H100 SXM all-reduce busbw
    460-480 GB/s against 450 GB/s NVLink-4 per direction, 8x A100 230-250 GB/s against 300
    (Alaya "NCCL-tests in practice", 2026). Fitted by `trainplan calibrate` (calibrate.BOUNDS)
    or set from all-reduce sweeps by `calibrate --measure`; no default prediction uses it."""
    inter_node_network_efficiency: float = 1.0
    """The same ratio for a group that leaves its NVLink domain (cluster.inter_node: the
    scale-out NICs; its ring is bounded by the cross-domain hops, so the whole ring takes
    this ratio, and the cross-domain rings of hierarchical forms). Default 1.0 as above; a
    spec holding the NICs' line rate rather than a measured busbw is optimistic by NCCL's
    protocol overheads and the fabric's congestion, which this ratio absorbs."""

    # --- memory --------------------------------------------------------------------------
    framework_overhead_bytes: float = 3.0e9
    """CUDA context, NCCL communicator buffers, cuBLAS/attention workspaces per GPU (CUDA
    context ~0.5-1 GB; NCCL ~0.2-0.5 GB per communicator; workspaces ~0.5 GB)."""
    memory_margin_fraction: float = 0.10
    """Share of GPU memory kept free: the model's under-prediction of a run's peak plus what
    PyTorch's allocator holds above the allocated peak. `fits` requires total <= (1 - margin)
    x capacity. Basis, measured (benchmarks/data/memory_runs.jsonl; README "Measured peak
    memory per GPU"): on the published Megatron-Core runs, whose recipe the model implements,
    the largest under-prediction of the allocated peak is 4.6% with the runs' dropout counted
    (`dropout`, Megatron's default 0.1 in those runs) and 12.1% without; 10% covers the first
    and leaves 5.4 points for cached blocks above allocated, which those sources do not print
    (PyTorch's caching allocator typically reserves 5-15% above allocated; ZeRO, Rajbhandari
    et al. 2020, Sec. 3.2 and 6.3, saw over 30% lost to fragmentation in extreme cases). It
    does not cover the torchtitan runs (under-predicted by up to 48%: FP32 cross-entropy
    logits, FSDP2 under PP), which are gaps in the model, not noise for a margin to absorb."""

    def __post_init__(self) -> None:
        for name in ("gemm_peak_fraction", "fp8_gemm_peak_fraction", "attention_peak_fraction",
                     "hbm_fraction"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise SpecError(f"options.{name}: must be in (0, 1], got {value}")
        if not 0 <= self.dp_overlap_fraction <= 1:
            raise SpecError("options.dp_overlap_fraction: must be in [0, 1]")
        for name in ("intra_node_network_efficiency", "inter_node_network_efficiency"):
            if not 0 < getattr(self, name) <= 2:
                raise SpecError(f"options.{name}: must be in (0, 2], got {getattr(self, name)}")
        if not 0 <= self.memory_margin_fraction < 1:
            raise SpecError("options.memory_margin_fraction: must be in [0, 1)")

    def __hash__(self) -> int:
        """The fields' hash (what the dataclass would return), computed once: the memoized cost
        terms key on the options, some of them tens of thousands of times per search."""
        try:
            return self._hash  # type: ignore[attr-defined]
        except AttributeError:
            object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self))))
            return self._hash  # type: ignore[attr-defined]

    def __getstate__(self) -> dict:
        """Pickled without the cached hash (another process computes its own)."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}


DEFAULT_OPTIONS = CostOptions()
