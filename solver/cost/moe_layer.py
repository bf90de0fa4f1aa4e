"""Compute of one mixture-of-experts FFN block for one micro-batch on one GPU.

Unit legend: `_s` seconds; `_bytes` bytes; `_flops` FLOPs; rows and widths are element counts.
A GEMM (m, n, k) multiplies m x k by k x n (2 m n k FLOPs), as in solver.cost.compute.

Where the tokens go (Megatron-Core's alltoall dispatcher, NVIDIA/Megatron-LM d98e8a64,
megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher: permute ->
all-to-all over EP -> all-gather over the expert-TP group -> expert GEMMs -> reduce-scatter
-> all-to-all -> unpermute). With attention TP the MoE block's input is the sequence-parallel
shard (moe_layer.py refuses MoE + TP without sequence parallelism in training), so a rank
routes t = micro_batch x seq / (cp x tp) tokens, each to k experts. Its E / ep local experts
receive those of the ep ranks of its EP group and, after the expert-TP gather, of its etp
expert-TP peers, so one local expert gets on average
    M_e = t x k x ep x etp / E rows per micro-batch
(= micro_batch x seq x k x ep / (cp x E) with etp = tp), and each expert GEMM is 1/etp of
the expert's width (fc1 D -> 2F/etp gated, fc2 F/etp -> D; experts.py TEGroupedMLP).

Load imbalance: the busiest expert rank sets the pace of the layer (every rank waits for
it in the combine all-to-all), so the expert GEMMs are timed at imbalance x M_e rows
(load_imbalance below states the factor and its basis). With ep = 1 every rank runs all the
experts on its own tokens, t k rows whatever the routing: no imbalance between ranks.

Grouped-GEMM efficiency at small M (the roofline, Williams et al. 2009): an (M, N, K) GEMM
does 2MNK FLOPs over 2(MK + KN + MN) bytes; with N, K >> M its arithmetic intensity is about
M FLOP/byte, so below the ridge point peak x gemm_peak_fraction / (HBM x hbm_fraction)
(H100: 989e12 x 0.74 / (3.35e12 x 0.55) ~ 400 rows) the expert GEMM is bound by reading its
weights; above it, by compute at the tile- and wave-quantized efficiency of compute.py, the
waves counted over all local experts together (one grouped kernel: TE GroupedLinear /
CUTLASS grouped GEMM, --moe-grouped-gemm). grouped_gemm_time_s is max(compute, HBM).
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple
from functools import lru_cache

from solver.cost import compute as C
from solver.cost import moe_fp8 as F8
from solver.cost.fp8 import Fp8Work
from solver.cost.options import CostOptions
from solver.specs import ModelSpec, TrainingSpec
from topology.spec import GpuSpec

DEFAULT_LOAD_IMBALANCE = 1.25
"""Busiest expert rank's tokens over the mean when the run states neither a measured value
nor a capacity factor. Basis: Switch Transformer (Fedus et al. 2022, JMLR 23, Sec. 2.2 and
Table 1) trains with expert capacity factors 1.0-1.25, i.e. 1.25 x the mean share is the
buffer its balanced (auxiliary-loss) routing needed to keep token drops small; GShard
(Lepikhin et al. 2021, Sec. 2.2) sizes expert capacity at 2N/E for top-2, again a bounded
multiple of the mean. A dropless run's busiest rank is taken at that bound."""
LOAD_IMBALANCE_BASIS = ("default 1.25: the expert capacity factor Switch Transformer (Fedus et al. "
                        "2022, Sec. 2.2) trains with; set training.moe_load_imbalance or "
                        "training.moe_capacity_factor to override")
ROUTER_LOGIT_BYTES = 4  # FP32 router logits/probabilities (Megatron --moe-router-dtype fp32 recipes)


def load_imbalance(training: TrainingSpec) -> tuple[float, str]:
    """(factor >= 1, basis): the busiest expert rank's tokens over the mean.

    A stated training.moe_load_imbalance wins; else a capacity factor (no expert takes more
    than capacity x its mean share; Megatron --moe-expert-capacity-factor, with
    --moe-pad-expert-input-to-capacity every expert runs exactly that many rows); else the
    default above."""
    if training.moe_load_imbalance is not None:
        return training.moe_load_imbalance, "training.moe_load_imbalance (stated)"
    if training.moe_capacity_factor is not None:
        return max(1.0, training.moe_capacity_factor), "training.moe_capacity_factor (tokens beyond it are dropped)"
    return DEFAULT_LOAD_IMBALANCE, LOAD_IMBALANCE_BASIS


class ExpertShape(NamedTuple):
    """Per-GPU shapes of one MoE block for one micro-batch (a NamedTuple: built for every
    layout shape a search tries, and a tuple is the cheapest immutable record to build)."""

    tokens: float            # t: tokens the rank routes (its sequence-parallel shard)
    local_experts: int       # E / ep
    rows_per_expert: float   # M_e: mean rows one local expert gets
    busy_rows: int           # ceil(imbalance x M_e): the busiest rank's rows per expert
    width: int               # F_e / etp: one expert's inner width on this rank
    shared_width: int        # shared experts' inner width / tp (all of them together)


def expert_shape(model: ModelSpec, seq_len: int, imbalance: float, *, tp: int, cp: int,
                 micro_batch: int, ep: int, etp: int) -> ExpertShape:
    """Shapes of the MoE block on one GPU (see the module docstring)."""
    e = model.moe
    assert e is not None  # callers pass MoE models only
    return _shape(e.experts, e.experts_per_token, e.expert_ffn_hidden, e.shared_experts * e.shared_width,
                  seq_len, imbalance, tp, cp, micro_batch, ep, etp)


def _shape(experts: int, k: int, ffn: int, shared: int, seq_len: int, imbalance: float, tp: int, cp: int,
           micro_batch: int, ep: int, etp: int) -> ExpertShape:
    """expert_shape from the model's numbers (shared: shared experts x their width)."""
    tokens = micro_batch * seq_len / (cp * tp)
    rows = tokens * k * ep * etp / experts
    busy = imbalance if ep > 1 else 1.0  # ep 1: every rank runs all experts, all its own tokens
    return ExpertShape(tokens, experts // ep, rows, math.ceil(rows * busy - 1e-9), math.ceil(ffn / etp),
                       math.ceil(shared / tp))


def grouped_gemm_time_s(groups: int, m: int, n: int, k: int, gpu: GpuSpec, opts: CostOptions,
                        fp8: bool = False) -> float:
    """One grouped GEMM of `groups` equal (m, n, k) problems: max(compute, HBM) seconds.

    Compute at gemm_peak_fraction x tile quantization (best CTA tile of compute.GEMM_TILES) x
    wave quantization over the tiles of every group; HBM traffic 2 bytes x groups x
    (mk + kn + mn): the roofline of the module docstring. FP8 (fp8=True, as
    compute.gemm_time_s): dense FP8 peak x fp8_gemm_peak_fraction with the same quantization,
    1-byte inputs (activations and weights) and a BF16 output."""
    if min(groups, m, n, k) <= 0:
        return 0.0
    best = 0.0
    for tm, tn in C.GEMM_TILES:
        tiles_m, tiles_n = math.ceil(m / tm), math.ceil(n / tn)
        tile_eff = (m * n) / (tiles_m * tm * tiles_n * tn)
        tiles = groups * tiles_m * tiles_n
        waves = math.ceil(tiles / opts.gemm_concurrent_tiles)
        best = max(best, tile_eff * tiles / (waves * opts.gemm_concurrent_tiles))
    if fp8 and gpu.peak_fp8_tflops is not None:
        compute_s = 2.0 * groups * m * n * k / (gpu.peak_fp8_tflops * 1e12 * opts.fp8_gemm_peak_fraction * best)
        hbm_bytes = groups * (1.0 * (m * k + k * n) + C.ACT_BYTES * m * n)
    else:
        compute_s = 2.0 * groups * m * n * k / (gpu.peak_flops * opts.gemm_peak_fraction * best)
        hbm_bytes = C.ACT_BYTES * groups * (m * k + k * n + m * n)
    return max(compute_s, hbm_bytes / (gpu.hbm_gb_s * 1e9 * opts.hbm_fraction))


def _grouped_fwd_bwd_s(groups: int, m: int, n: int, k: int, gpu: GpuSpec, opts: CostOptions,
                       fp8: bool = False) -> tuple[float, float]:
    """(forward, backward = data gradient + weight gradient) of a grouped linear layer."""
    return (grouped_gemm_time_s(groups, m, n, k, gpu, opts, fp8),
            grouped_gemm_time_s(groups, m, k, n, gpu, opts, fp8) + grouped_gemm_time_s(groups, k, n, m, gpu, opts, fp8))


class MoEBlockTimes(NamedTuple):
    """One MoE block (router, routed and shared experts, permutation) minus nothing: seconds
    (a NamedTuple, as ExpertShape)."""

    expert_fwd_s: float      # routed-expert grouped GEMMs at the busiest rank's rows
    expert_bwd_s: float
    other_fwd_s: float       # router GEMM, shared experts, permutation and activation kernels
    other_bwd_s: float
    expert_ideal_s: float    # the routed GEMMs' fwd + bwd FLOPs at mean rows and large-GEMM efficiency

    @property
    def forward_s(self) -> float:
        return self.expert_fwd_s + self.other_fwd_s

    @property
    def backward_s(self) -> float:
        return self.expert_bwd_s + self.other_bwd_s


# Memoized: a search asks for the same expert shapes under many layouts (the rows per expert
# depend on micro_batch x ep x etp / (cp x tp) only); a pure function of hashable arguments.
@lru_cache(maxsize=1 << 16)
def _ffn_fwd_bwd_s(rows: int, width: int, hidden: int, gated: bool, gpu: GpuSpec,
                   opts: CostOptions, groups: int = 1, fp8: bool = False) -> tuple[float, float]:
    """(forward, backward) GEMM seconds of `groups` FFNs of inner `width` on `rows` rows."""
    up = _grouped_fwd_bwd_s(groups, rows, width * (2 if gated else 1), hidden, gpu, opts, fp8)
    down = _grouped_fwd_bwd_s(groups, rows, hidden, width, gpu, opts, fp8)
    return up[0] + down[0], up[1] + down[1]


def moe_block_times(model: ModelSpec, seq_len: int, imbalance: float, gpu: GpuSpec, opts: CostOptions,
                    *, tp: int, cp: int, micro_batch: int, ep: int, etp: int,
                    fp8: Fp8Work | None = None) -> MoEBlockTimes:
    """Forward and backward seconds of one MoE block on one GPU (module docstring).

    Routed experts: grouped fc1/fc2 GEMMs of the E/ep local experts at busy_rows rows each.
    Shared experts: one TP-split FFN over the micro-batch's seq/cp tokens (Megatron
    SharedExpertMLP is column/row parallel over the attention TP group). Router: a (t, E, D)
    GEMM. Memory-bound kernels (bytes over HBM x hbm_fraction; backward twice the forward):
    permute and unpermute read and write t k D BF16 values each, with more than one local
    expert the received rows are sorted by expert and back (token_dispatcher.py steps (4) and
    (5), sort_chunks_by_idxs: rows x D read and written twice), the activation reads its
    input and writes its output on every routed row (SwiGLU 6, GeLU 4 bytes per element, as
    compute.elementwise_fwd_bytes) and shared row, the router's FP32 logits are written,
    softmax/top-k read and write them. FP8 (`fp8`): the routed and shared experts' GEMMs in
    FP8 and their casts (moe_fp8.expert_cast_s); the router GEMM stays BF16.
    """
    return BlockCalc(model, seq_len, imbalance, gpu, opts, fp8).times(tp, cp, micro_batch, ep, etp)


class BlockCalc:
    """moe_block_times and expert_shape for one set of their fixed inputs (model, sequence
    length, load imbalance, GPU, options, FP8 work), memoized on (tp, cp, micro_batch, ep, etp)
    and their GEMMs on their integer shapes: a search asks for every layout shape once or
    more, and hashing the frozen model, GPU and options per call cost more than the
    arithmetic. The same operations in the same order as before: the same values.
    At most MAX_ENTRIES memoized shapes (emptied when full)."""

    MAX_ENTRIES = 1 << 16

    def __init__(self, model: ModelSpec, seq_len: int, imbalance: float, gpu: GpuSpec, opts: CostOptions,
                 fp8: Fp8Work | None = None) -> None:
        e = model.moe
        assert e is not None
        self.gpu, self.opts, self.fp8, self.seq_len = gpu, opts, fp8, seq_len
        self.experts, self.k, self.d, self.gated = e.experts, e.experts_per_token, model.hidden, model.ffn_gated
        self._dims = (e.experts, e.experts_per_token, e.expert_ffn_hidden, e.shared_experts * e.shared_width,
                      seq_len, imbalance)
        self.hbm = gpu.hbm_gb_s * 1e9 * opts.hbm_fraction
        self.peak = (gpu.peak_fp8_tflops * 1e12 * opts.fp8_gemm_peak_fraction if fp8 is not None and gpu.peak_fp8_tflops
                     else gpu.peak_flops * opts.gemm_peak_fraction)
        self._shapes: dict[tuple[int, ...], ExpertShape] = {}
        self._times: dict[tuple[int, ...], MoEBlockTimes] = {}
        self._gemms: dict[tuple[int, ...], tuple[float, ...]] = {}
        self._commons: dict[tuple[int, ...], tuple[float, ...]] = {}
        self.memo: dict[tuple, Any] = {}  # remember's values

    def shape(self, tp: int, cp: int, micro_batch: int, ep: int, etp: int) -> ExpertShape:
        """expert_shape at these degrees."""
        key = (tp, cp, micro_batch, ep, etp)
        sh = self._shapes.get(key)
        if sh is None:
            if len(self._shapes) >= self.MAX_ENTRIES:
                self._shapes.clear()
            sh = self._shapes[key] = _shape(*self._dims, tp, cp, micro_batch, ep, etp)
        return sh

    def times(self, tp: int, cp: int, micro_batch: int, ep: int, etp: int) -> MoEBlockTimes:
        """moe_block_times at these degrees."""
        key = (tp, cp, micro_batch, ep, etp)
        out = self._times.get(key)
        if out is None:
            if len(self._times) >= self.MAX_ENTRIES:
                self._times.clear()
                self._gemms.clear()
                self._commons.clear()
            out = self._times[key] = self._block(self.shape(*key), micro_batch * self.seq_len // cp,
                                                 (tp, cp, micro_batch))
        return out

    def remember(self, key: tuple, value: Any) -> Any:
        """Keep `value` in `memo` under `key` and return it: a caller's term that reads nothing
        beyond this calc's inputs and `key` (solver.cost.moe_comm._compute_parts), shared as
        the block times are (values must be truthy: callers read memo.get(key) or ...)."""
        if len(self.memo) >= self.MAX_ENTRIES:
            self.memo.clear()
        self.memo[key] = value
        return value

    def _ffn(self, rows: int, width: int, groups: int) -> tuple[float, ...]:
        key = (rows, width, groups)
        out = self._gemms.get(key)
        if out is None:
            out = self._gemms[key] = _ffn_fwd_bwd_s(rows, width, self.d, self.gated, self.gpu, self.opts,
                                                    groups=groups, fp8=self.fp8 is not None)
        return out

    def _common(self, sh: ExpertShape, full_tokens: int, key: tuple[int, int, int]) -> tuple[float, ...]:
        """_block's terms that read only (tp, cp, micro_batch) (`key`): the shared experts' and
        router's forward and backward seconds, and the permute, shared-activation and logits
        elements of the memory-bound kernels (as moe_block_times adds them)."""
        out = self._commons.get(key)
        if out is None:
            shared_f, shared_b = self._ffn(full_tokens, sh.shared_width, 1) if sh.shared_width else (0.0, 0.0)
            router_f, router_db, router_wb = C.gemm_fwd_bwd_s(max(1, round(sh.tokens)), self.experts, self.d,
                                                              self.gpu, self.opts)
            out = self._commons[key] = (
                shared_f + router_f, shared_b + router_db + router_wb,
                2 * 2 * C.ACT_BYTES * sh.tokens * self.k * self.d,        # permute + unpermute
                full_tokens * sh.shared_width,                            # shared experts' activation rows
                3 * ROUTER_LOGIT_BYTES * sh.tokens * self.experts)        # logits, softmax/top-k
        return out

    def _block(self, sh: ExpertShape, full_tokens: int, key: tuple[int, int, int]) -> MoEBlockTimes:
        """moe_block_times' body (its docstring) for one shape; `key`: (tp, cp, micro_batch)."""
        d, gated, fp8 = self.d, self.gated, self.fp8
        exp_f, exp_b = self._ffn(sh.busy_rows, sh.width, sh.local_experts)
        other_f, other_b, permute, shared_rows, logits = self._common(sh, full_tokens, key)
        rows = sh.busy_rows * sh.local_experts
        sort = 2 * 2 * C.ACT_BYTES * rows * d if sh.local_experts > 1 else 0.0  # sort_chunks there and back
        elem = permute + sort + (6 if gated else 4) * (rows * sh.width + shared_rows) + logits
        hbm = self.hbm
        elem_s = elem / hbm
        cast_f, cast_b = (F8.expert_cast_s(F8.ExpertRows.of(sh, full_tokens, d, gated), fp8, hbm)
                          if fp8 is not None else (0.0, 0.0))
        ideal_flops = 3 * 2.0 * sh.local_experts * sh.rows_per_expert * d * sh.width * (3 if gated else 2)
        return MoEBlockTimes(exp_f, exp_b, other_f + elem_s + cast_f, other_b + 2 * elem_s + cast_b,
                             ideal_flops / self.peak)


def dense_ffn_times(model: ModelSpec, seq_len: int, gpu: GpuSpec, opts: CostOptions, *, tp: int, cp: int,
                    micro_batch: int, fp8: Fp8Work | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of the dense FFN part of compute.layer_times (its FFN-up
    and FFN-down GEMMs and its activation kernel, and with `fp8` their FP8 GEMMs and casts:
    moe_fp8.dense_ffn_cast_s), which a MoE layer replaces."""
    sh = C.layer_shape(model, seq_len, tp, cp, micro_batch)
    gemms = C.layer_gemms(sh)[2:]
    parts = [C.gemm_fwd_bwd_s(m, n, k, gpu, opts, fp8 is not None) for m, n, k in gemms]
    hbm = gpu.hbm_gb_s * 1e9 * opts.hbm_fraction
    act = (6 if sh.gated else 4) * sh.ffn_width * sh.tokens / hbm
    cast_f, cast_b = F8.dense_ffn_cast_s(sh, tp, fp8, hbm) if fp8 is not None else (0.0, 0.0)
    return sum(p[0] for p in parts) + act + cast_f, sum(p[1] + p[2] for p in parts) + 2 * act + cast_b


def moe_layer_mask(model: ModelSpec) -> tuple[bool, ...]:
    """Per layer (0-based), whether it is a MoE layer; () for a dense model."""
    e = model.moe
    return () if e is None else tuple(e.is_moe_layer(i) for i in range(model.layers))


def moe_layers_per_rank(mask: tuple[bool, ...], split: tuple[int, ...], pp: int) -> list[int]:
    """MoE layers on each pipeline rank of a split (chunk c of split runs on rank c mod pp)."""
    out, first = [0] * pp, 0
    for c, n in enumerate(split):
        out[c % pp] += sum(mask[first:first + n])
        first += n
    return out


@lru_cache(maxsize=4096)
def busiest_moe_layers(mask: tuple[bool, ...], pp: int, vpp: int) -> int:
    """MoE layers on the rank holding the most, under the even chunks the composition charges
    (ceil(L / (pp vpp)) layers per chunk, the last chunks short): with every layer of that
    rank charged at the dense time, its MoE layers each add the MoE layer's extra time."""
    if not mask:
        return 0
    size, left, split = math.ceil(len(mask) / (pp * vpp)), len(mask), []
    while left > 0:
        split.append(min(size, left))
        left -= size
    return max(moe_layers_per_rank(mask, tuple(split), pp))
