"""Estimate one layout: step time, MFU/HFU, throughput, time and memory breakdowns, fit.

Unit legend: `_s` seconds; `_bytes` bytes; `_flops` FLOPs; tokens are counts.
FLOP convention (shared/DESIGN.md): model FLOPs = 6 N_active T + attention 12 S T (H dh) L
(halved when training.causal_attention_flops); MFU counts model FLOPs only; HFU adds the
recomputed forward work (full: 2 N_layers T + the attention forward; selective: the
attention forward), per Korthikanti et al. 2022, Sec. 6 (MFU vs HFU).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from solver.cost.accounting import FLOP_CONVENTION, attention_convention, attention_flops_per_token, batch_plan
from solver.cost.options import CostOptions, DEFAULT_OPTIONS
from solver.cost.recompute import recompute_flops_per_token as selective_flops_per_token
from solver.cost.moe_summary import moe_notes, moe_summary
from solver.cost.state import recipe_summary
from solver.cost.step import compose_memory, memory_terms, step_time, usable_memory_bytes
from solver.cost.terms import CostContext, with_rank_order
from solver.errors import Problem, SpecError
from solver.frameworks import load_framework
from solver.frameworks.capability import violations
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec, check_layout_fits_model
from topology.spec import ClusterSpec


# MFU's denominator. trainplan keeps the dense BF16 peak for every recipe so MFU compares
# across precisions (an FP8 run's MFU may exceed what BF16 could reach); NVIDIA's DGXC
# READMEs divide FP8 runs by the FP8 peak instead (e.g. llama3.1/README_8b.md: "peak ...
# for H100 FP8 is 1979 TFLOPS"), printed beside it as mfu_fp8_peak.
MFU_CONVENTION_BF16 = "model FLOPs / (step time x GPUs x dense BF16 peak, cluster.gpu.peak_tflops)"
MFU_CONVENTION_FP8 = (MFU_CONVENTION_BF16 + "; FP8 GEMMs: also mfu_fp8_peak, against the dense FP8 "
                      "peak (cluster.gpu.peak_fp8_tflops), the convention of NVIDIA's FP8 rows")


@dataclass(frozen=True)
class MemoryMargin:
    """How far the memory total is from the usable limit (bytes; fraction of capacity)."""

    capacity_bytes: float
    usable_bytes: float
    margin_fraction_reserved: float
    headroom_bytes: float          # usable - total (negative: does not fit)
    headroom_fraction: float       # headroom / capacity


# The keys LayoutEstimate.mfu_fields() adds beside every `mfu` (plan, search, estimate, validate).
MFU_KEYS = ("mfu_causal", "mfu_noncausal", "mfu_attention_convention")


@dataclass(frozen=True)
class LayoutEstimate:
    """The cost model's prediction for one layout on one cluster."""

    layout: dict
    step_time_s: float
    mfu: float
    hfu: float
    tokens_per_s: float
    tokens_per_step: int
    grad_accum: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    time_breakdown_s: dict[str, float]
    memory_per_gpu_bytes: dict[str, float]
    fits: bool
    memory_margin: MemoryMargin
    notes: tuple[str, ...] = field(default=())
    framework: str = "megatron-core"     # training.framework
    memory_recipe: dict = field(default_factory=dict)  # solver.cost.state.recipe_summary
    framework_violations: tuple = ()     # capability rules the framework breaks (Violation dicts)
    flop_convention: str = FLOP_CONVENTION  # what MFU's model FLOPs count (accounting.FLOP_CONVENTION)
    moe: dict = field(default_factory=dict)  # MoE layouts: solver.cost.moe_summary.moe_summary
    compute_precision: str = "bf16"      # training.compute_precision (the linear layers' GEMMs)
    mfu_convention: str = MFU_CONVENTION_BF16
    mfu_fp8_peak: float | None = None    # FP8 recipes: model FLOPs / (time x GPUs x dense FP8 peak)
    # MFU under both attention-FLOP conventions (DESIGN.md: a causal mask halves the attention
    # term); `mfu` is the one training.causal_attention_flops selects, named by
    # mfu_attention_convention. At long context they differ most (128k: about 1.55x for a 70B).
    mfu_causal: float = 0.0
    mfu_noncausal: float = 0.0
    mfu_attention_convention: str = "non-causal"

    def mfu_fields(self) -> dict[str, float | str]:
        """mfu_causal, mfu_noncausal and mfu_attention_convention (copied beside every `mfu`)."""
        return dict(zip(MFU_KEYS, (self.mfu_causal, self.mfu_noncausal, self.mfu_attention_convention),
                        strict=True))

    @property
    def runs_in_framework(self) -> bool:
        return not self.framework_violations

    def as_dict(self) -> dict:
        """Plain JSON-ready dict (the public `estimate` schema)."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        out["framework_violations"] = list(self.framework_violations)
        out["runs_in_framework"] = self.runs_in_framework
        return out


def make_context(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                 options: CostOptions | None = None) -> CostContext:
    """The fixed part of a cost evaluation (reuse one per problem: term caches key on it)."""
    return CostContext(model, cluster, training, options or DEFAULT_OPTIONS)


def check_layout(ctx: CostContext, layout: LayoutSpec) -> None:
    """Raise SpecError listing every reason the layout cannot run this model on this cluster."""
    problems = [Problem(*p.split(": ", 1)) for p in check_layout_fits_model(ctx.model, ctx.training, layout)]
    if layout.gpus > ctx.cluster.available_gpus:
        problems.append(Problem("layout", f"needs {layout.gpus} GPUs (tp*pp*dp*cp); the cluster "
                                          f"has {ctx.cluster.available_gpus} available"))
    if problems:
        raise SpecError("layout does not fit the model or cluster: " + "; ".join(map(str, problems)),
                        problems)


def framework_violations(training: TrainingSpec, layout: LayoutSpec, grad_accum: int,
                         moe: bool = False, model: ModelSpec | None = None) -> list[dict]:
    """The capability rules of training.framework the layout breaks, each with its reason
    and the framework source (solver.frameworks.capability.violations); empty: it runs.
    moe: the model has expert layers (its expert rules apply: EP, ETP, expert ranks).
    model: also the model parts the framework cannot express (solver.frameworks.models; the
    search refuses such a model up front)."""
    from solver.frameworks.models import layout_model_violations, model_violations

    fw = load_framework(training.framework)
    parts = [] if model is None else [v.as_dict() for v in model_violations(training.framework, model, training)
                                      + layout_model_violations(training.framework, model, layout.pp, layout.cp)]
    found = violations(fw, kernel=training.attention_kernel, tp=layout.tp, pp=layout.pp, cp=layout.cp,
                       vpp=layout.vpp, sp=layout.sequence_parallel, zero=layout.zero_stage, accum=grad_accum,
                       moe=moe, dp=layout.dp, ep=layout.ep, etp=layout.etp, rank_order=layout.rank_order)
    return parts + [v.as_dict() for v in found]


def model_flops_per_token(ctx: CostContext, causal: bool | None = None) -> float:
    """6 N_active + attention per token (DESIGN.md convention; causal halves attention;
    N_active = ParameterCounts.active, the total for a dense model; accounting.FLOP_CONVENTION).
    `causal` None: training.causal_attention_flops decides."""
    attn = attention_flops_per_token(ctx.model, ctx.seq_len)
    causal = ctx.training.causal_attention_flops if causal is None else causal
    return 6.0 * ctx.params.active + (0.5 * attn if causal else attn)


def recompute_flops_per_token(ctx: CostContext, recompute: str) -> float:
    """Forward work repeated in backward, per token (same attention convention as MFU);
    selective: the recomputed modules' GEMM FLOPs (solver.cost.recompute)."""
    attn_fwd = attention_flops_per_token(ctx.model, ctx.seq_len) / 3.0  # fwd = 1/3 of fwd+bwd
    if ctx.training.causal_attention_flops:
        attn_fwd *= 0.5
    if recompute == "full":
        return 2.0 * ctx.params.active_transformer_layers + attn_fwd
    return selective_flops_per_token(ctx, attn_fwd) if recompute == "selective" else 0.0


def estimate_with_context(ctx: CostContext, layout: LayoutSpec) -> LayoutEstimate:
    """estimate_layout for a prepared context. Raises: SpecError."""
    check_layout(ctx, layout)
    ctx = with_rank_order(ctx, layout.rank_order)
    batch = batch_plan(ctx.training, layout.dp, layout.micro_batch)
    m = batch.grad_accum
    st = step_time(ctx, layout, m)  # compose_step_time, or per stage for layout.pipeline_layers
    mem = compose_memory(memory_terms(ctx, layout, m))
    peak = layout.gpus * ctx.cluster.gpu.peak_flops
    model_flops = model_flops_per_token(ctx) * batch.tokens_per_step
    hw_flops = model_flops + recompute_flops_per_token(ctx, layout.recompute) * batch.tokens_per_step
    usable = usable_memory_bytes(ctx)
    cap = ctx.cluster.gpu.memory_bytes
    margin = MemoryMargin(cap, usable, ctx.options.memory_margin_fraction,
                          usable - mem["total"], (usable - mem["total"]) / cap)
    notes: tuple[str, ...] = () if batch.tokens_per_step == ctx.training.global_batch_tokens else (
        f"global batch rounded to {batch.tokens_per_step} tokens ({m} micro-batches)",)
    broken = framework_violations(ctx.training, layout, m, moe=ctx.model.moe is not None, model=ctx.model)
    notes += tuple(f"NOT RUNNABLE in {ctx.training.framework}: {v['reason']}" for v in broken)
    notes += moe_notes(ctx, layout)
    per_s = batch.tokens_per_step / (st.step_time_s * peak)  # MFU per model FLOP per token
    return LayoutEstimate(
        layout=layout.model_dump(), step_time_s=st.step_time_s,
        mfu=model_flops / (st.step_time_s * peak), hfu=hw_flops / (st.step_time_s * peak),
        mfu_causal=model_flops_per_token(ctx, True) * per_s, mfu_noncausal=model_flops_per_token(ctx, False) * per_s,
        mfu_attention_convention=attention_convention(ctx.training.causal_attention_flops),
        tokens_per_s=batch.tokens_per_step / st.step_time_s, tokens_per_step=batch.tokens_per_step,
        grad_accum=m, model_flops_per_step=model_flops, hardware_flops_per_step=hw_flops,
        time_breakdown_s=st.breakdown_s, memory_per_gpu_bytes=mem,
        fits=mem["total"] <= usable, memory_margin=margin, notes=notes, framework=ctx.training.framework,
        memory_recipe=recipe_summary(ctx.training, layout.zero_stage, layout.pp, layout.dp, layout.cp),
        framework_violations=tuple(broken), moe=moe_summary(ctx, layout),
        **_mfu_convention(ctx, model_flops / st.step_time_s, layout.gpus))


def _mfu_convention(ctx: CostContext, model_flops_s: float, gpus: int) -> dict:
    """The compute precision, the MFU convention and, for FP8 GEMMs, MFU vs the FP8 peak."""
    precision, gpu = ctx.training.compute_precision, ctx.cluster.gpu
    if ctx.fp8_work is None or gpu.peak_fp8_tflops is None:
        return {"compute_precision": precision}
    return {"compute_precision": precision, "mfu_convention": MFU_CONVENTION_FP8,
            "mfu_fp8_peak": model_flops_s / (gpus * gpu.peak_fp8_tflops * 1e12)}


def estimate_layout(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                    layout: LayoutSpec, options: CostOptions | None = None) -> LayoutEstimate:
    """Predict step time, utilisation and per-GPU memory of one layout.

    Raises: SpecError when the layout does not divide the model or needs more GPUs than
    the cluster has available.
    """
    return estimate_with_context(make_context(model, cluster, training, options), layout)
