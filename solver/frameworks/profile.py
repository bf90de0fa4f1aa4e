"""Framework profiles: what a training framework can run and how it stores model state.

A profile is data (solver/data/frameworks/<name>.json), validated here once. Every fact
carries the framework source it was read from (repository, file, commit) beside it, so a
capability rule or a memory figure can always be traced to the code that imposes it.

Units: `_bytes` are bytes per parameter of the rank's TP x PP share of the model.
"""
from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from topology.spec import StrictModel

FrameworkName = Literal["megatron-core", "torchtitan", "deepspeed"]
FRAMEWORK_NAMES: tuple[str, ...] = get_args(FrameworkName)
DEFAULT_FRAMEWORK: FrameworkName = "megatron-core"
ZeroStage = Literal[0, 1, 2, 3]
AttentionKernel = Literal["flash", "unfused"]
# FP8 GEMM recipes (TrainingSpec.compute_precision besides "bf16"; solver.specs says what each is).
Fp8Recipe = Literal["fp8-delayed", "fp8-current", "fp8-blockwise", "fp8-rowwise", "mxfp8"]


class Source(StrictModel):
    """Where a fact was read: a file of a public repository at a commit."""

    repository: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", description="GitHub owner/name.")
    path: str = Field(min_length=1, max_length=300, description="File path in the repository.")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$", description="Commit the file was read at.")
    note: str = Field(min_length=1, max_length=600, description="What the file says, in our words.")


class _Cited(StrictModel):
    """A value (declared by each subclass) and the framework source that establishes it."""

    sources: tuple[Source, ...] = Field(min_length=1, strict=False)


class CitedStages(_Cited):
    value: tuple[ZeroStage, ...] = Field(strict=False)  # a JSON array


class CitedBool(_Cited):
    value: bool


class CitedInt(_Cited):
    value: int = Field(ge=1, le=1024)


class CitedKernels(_Cited):
    value: tuple[AttentionKernel, ...] = Field(strict=False)  # empty: no CP at all


class CitedMicrobatchRule(_Cited):
    value: Literal["multiple_of_pp", "rounds"]


class CitedShardGroup(_Cited):
    value: Literal["dp_cp"]


class CitedLogitBytes(_Cited):
    value: float = Field(gt=0, le=64)


class CitedValueBytes(_Cited):
    value: float = Field(gt=0, le=16)  # bytes per stored value


class CitedMoeImplementation(_Cited):
    value: Literal["megatron_core", "torchtitan"]  # whose MoE block code the memory terms follow


# What "selective" recompute keeps: Megatron's recomputes only the core attention (all else
# stored); torchtitan's op-level policy stores matmul/attention outputs but every second mm.
SelectivePolicy = Literal["attention_core", "every_other_matmul"]


class CitedSelectivePolicy(_Cited):
    value: SelectivePolicy


# Megatron-Core's --recompute-modules names that trainplan's memory and time model (the
# others: "moe", "shared_experts" and the Mamba/GDN/mHC modules are not charged).
RecomputeModule = Literal["core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp"]


class CitedRecomputeModules(_Cited):
    value: tuple[RecomputeModule, ...] = Field(min_length=1, strict=False)


class CitedExpertRanks(_Cited):
    # The ranks of one pipeline stage EP x ETP folds onto: all TP x CP x DP ranks (Megatron),
    # TP x CP x the FSDP-sharded DP ranks (torchtitan: dp_replicate is outside), or DP alone
    # (DeepSpeed: the expert group lives inside the data-parallel group).
    value: Literal["tp_cp_dp", "tp_cp_dp_shard", "dp"]


class CitedExpertTp(_Cited):
    # Expert tensor parallelism: any degree (Megatron --expert-tensor-parallel-size), 1 with
    # EP and TP's degree without (torchtitan), or always TP's degree (DeepSpeed).
    value: Literal["any", "one_with_ep", "equals_tp"]


class ExpertCapabilities(StrictModel):
    """What mixture-of-experts layouts the framework runs (the search's expert rules)."""

    expert_parallel: CitedBool          # experts split over EP > 1 ranks at all
    expert_ranks: CitedExpertRanks      # the ranks EP x ETP must divide
    expert_tensor_parallel: CitedExpertTp
    expert_with_pp: CitedBool           # EP > 1 together with PP > 1
    expert_with_cp: CitedBool           # EP > 1 together with CP > 1
    moe_tp_needs_sp: CitedBool          # a MoE model with TP > 1 requires sequence parallelism
    moe_zero_stages: CitedStages        # ZeRO stages allowed for a MoE model (any EP)


class Capabilities(StrictModel):
    """What layouts the framework can run (the search's framework rules)."""

    zero_stages_without_pp: CitedStages
    zero_stages_with_pp: CitedStages
    zero0_with_cp: CitedBool            # replicated model state allowed together with CP > 1
    tensor_parallel: CitedBool
    zero3_with_tp: CitedBool
    sequence_parallel: CitedBool        # Megatron-style SP inside the TP group
    context_parallel_kernels: CitedKernels  # attention kernels CP runs with (empty: no CP)
    interleaving: CitedBool
    interleave_min_pp: CitedInt         # smallest PP an interleaved schedule runs at
    interleave_microbatches: CitedMicrobatchRule
    uneven_pipeline: CitedBool
    pp_inside_dp: CitedBool             # rank order 'tp-cp-pp-dp' (PP ranks inside a DP replica) at PP > 1
    experts: ExpertCapabilities


class StateRecipe(StrictModel):
    """Model-state bytes per parameter under one ZeRO stage: a part kept whole on every
    rank plus a part sharded over the optimizer's shard group (d ranks: full + sharded / d)."""

    zero_stage: ZeroStage
    pipeline: Literal["any", "without_pp", "with_pp"] = "any"
    mode: str = Field(min_length=1, max_length=300, description="The framework setting that gives it.")
    weights_full_bytes: float = Field(ge=0, le=32)
    weights_sharded_bytes: float = Field(ge=0, le=32)
    gradients_full_bytes: float = Field(ge=0, le=32)
    gradients_sharded_bytes: float = Field(ge=0, le=32)
    optimizer_full_bytes: float = Field(ge=0, le=64)
    optimizer_sharded_bytes: float = Field(ge=0, le=64)
    gathered_layers: int = Field(
        ge=0, le=8, description="Transformer layers of unsharded BF16 weights in flight (ZeRO-3 prefetch).")
    head_unit_unsharded: bool = Field(
        default=False, description="The LM-head unit (final norm + LM head) stays unsharded (BF16) from its "
                                   "forward to its backward while the layers are resharded (FSDP2).")
    all_gather_pool: bool = Field(
        default=False, description="All-gather outputs are allocated on a side stream whose cached blocks only "
                                   "that stream reuses: the largest two consecutive units (embedding or LM head, "
                                   "plus one layer; BF16) stay reserved beside the compute stream's peak.")
    whole_parameter_prefetch: bool = Field(
        default=False, description="ZeRO-3 prefetch adds whole parameters while under its element limit, so the "
                                   "largest single parameter (LM head or embedding, V x h) can come on top of the "
                                   "gathered layers, and parameters under the persistence threshold (norms) stay "
                                   "gathered (DeepSpeed's parameter coordinator; BF16).")
    sources: tuple[Source, ...] = Field(min_length=1, strict=False)

    @property
    def total_full_bytes(self) -> float:
        return self.weights_full_bytes + self.gradients_full_bytes + self.optimizer_full_bytes

    @property
    def total_sharded_bytes(self) -> float:
        return self.weights_sharded_bytes + self.gradients_sharded_bytes + self.optimizer_sharded_bytes

    def bytes_per_param(self, shard: int) -> float:
        """Model-state bytes per parameter with the sharded part split over `shard` ranks."""
        return self.total_full_bytes + self.total_sharded_bytes / shard

    def applies(self, zero_stage: int, pp: int) -> bool:
        if zero_stage != self.zero_stage:
            return False
        return self.pipeline == "any" or (self.pipeline == "with_pp") == (pp > 1)


class MemorySemantics(StrictModel):
    """How the framework stores weights, gradients and optimizer state per GPU."""

    precision: str = Field(min_length=1, max_length=300, description="The default recipe, in words.")
    shard_group: CitedShardGroup
    logit_bytes: CitedLogitBytes          # bytes per logit alive at the loss when backward starts
    # the same under tensor parallelism (vocab-parallel loss), where it differs; None: logit_bytes
    logit_bytes_tp: CitedLogitBytes | None = None
    # bytes per logit each multi-token-prediction depth's output head keeps beside the main
    # head's logit_bytes (its own saved loss input; the transient gradients of one loss at a
    # time are counted once, in logit_bytes), where the framework's MTP loss works that way;
    # None: each depth is charged the main head's logit_bytes (solver.cost.memory.mtp_logits_bytes)
    mtp_logit_bytes: CitedLogitBytes | None = None
    selective_recompute: CitedSelectivePolicy  # what recompute "selective" keeps per layer
    # the modules "selective" recomputes in a mixture-of-experts model (the export writes them;
    # solver.cost.recompute drops the ones the model or recipe cannot take); None: as dense
    moe_selective_modules: CitedRecomputeModules | None = None
    # bytes per value of the combined expert outputs (t k rows of hidden on a rank) that a MoE
    # layer's token combine keeps for backward beyond what solver.cost.moe_memory charges after
    # Megatron-Core, without recompute (torchtitan: an FP32 copy for the routing scores'
    # gradient); None: nothing beyond
    moe_combine_saved_bytes: CitedValueBytes | None = None
    # whose MoE block the activation terms follow beyond the shared ones: "torchtitan" charges its
    # SelectiveAC's saved MoE ops, its grouped experts' product and its dispatcher's working set
    # (solver.cost.moe_torchtitan); None or "megatron_core": Megatron-Core's (solver.cost.moe_memory)
    moe_implementation: CitedMoeImplementation | None = None
    # gradient-reduction buffers of the exported reduce bucket (terms.dp_bucket_elements) that
    # the framework's ZeRO-1/2/3 optimizers keep during backward, in BF16 (DeepSpeed's
    # contiguous ipg buffers); None: two DP buckets of options.dp_bucket_elements at the
    # gradient dtype (solver.cost.memory.dp_buffer_bytes)
    reduce_buffers: CitedInt | None = None
    # the DP reduction runs in place on the contiguous gradient buffer the recipe already
    # charges (Megatron-Core DDP and distributed optimizer): no bucket buffers at ZeRO 0/1;
    # None: as reduce_buffers says (solver.cost.memory.dp_buffer_bytes)
    reduce_in_grad_buffer: CitedBool | None = None
    # FSDP2's reduce-scatter of one unit (foreach_reduce): bytes per parameter of the unit of
    # the unsharded gradient's copy in the reduce dtype (torchtitan's mixed_precision_reduce
    # float32: 4), held with the unit's BF16 gradient it is copied from (without PP); None:
    # as reduce_buffers says (solver.cost.state.reduce_scatter_bytes)
    reduce_scatter_copy_bytes: CitedValueBytes | None = None
    # each in-flight micro-batch's stage output (s b h BF16, split over TP when TP > 1) is kept
    # by the pipeline engine until its backward (DeepSpeed's pipe_buffers['outputs']), which
    # sends it as is and keeps one receive buffer per direction; None: no such buffers, a send
    # and a receive buffer per direction (solver.cost.memory.pipe_buffer_bytes, pp_buffer_bytes)
    pipe_output_buffers: CitedBool | None = None
    # the pipeline stage allocates a receive buffer per micro-batch of the step for its input
    # and for its output's gradient and caches each forward's output until its backward
    # (PyTorch's PipelineStage, torchtitan); None: no such buffers
    # (solver.cost.memory.stage_buffer_bytes)
    stage_recv_buffers: CitedBool | None = None
    recipes: tuple[StateRecipe, ...] = Field(min_length=1, strict=False)


class CitedFp8Recipes(_Cited):
    value: tuple[Fp8Recipe, ...] = Field(strict=False)  # empty: no FP8 training


class CitedWeightCast(_Cited):
    value: Literal["per_step", "per_use"]


class Fp8Semantics(StrictModel):
    """How the framework runs FP8 GEMMs: which recipes, and what they cost in time and memory."""

    recipes: CitedFp8Recipes
    saved_inputs_fp8: CitedBool     # GEMM inputs kept for backward as FP8 (1 byte) or high precision
    weight_cast: CitedWeightCast    # FP8 weight copies cast once per step (cached) or at every use
    sp_gather_fp8: CitedBool        # sequence-parallel input all-gathers move FP8 (1 byte) values
    norm_fused_cast: CitedBool      # the QKV / FFN-up input casts are fused into the norm kernel


class FrameworkProfile(StrictModel):
    """One training framework: its capabilities and its memory semantics, each cited."""

    name: FrameworkName
    title: str = Field(min_length=1, max_length=200)
    covers: tuple[str, ...] = Field(default=(), strict=False, description="Stacks built on it.")
    capabilities: Capabilities
    memory: MemorySemantics
    fp8: Fp8Semantics

    @model_validator(mode="after")
    def _recipes_cover_stages(self) -> FrameworkProfile:
        caps = self.capabilities
        for pp, stages in ((1, caps.zero_stages_without_pp.value), (2, caps.zero_stages_with_pp.value)):
            for z in stages:
                if not any(r.applies(z, pp) for r in self.memory.recipes):
                    where = "with" if pp > 1 else "without"
                    raise ValueError(f"memory: no recipe for ZeRO-{z} {where} pipeline parallelism")
        return self

    def zero_stages(self, pp: int) -> tuple[int, ...]:
        """ZeRO stages the framework runs at this pipeline degree."""
        caps = self.capabilities
        return (caps.zero_stages_with_pp if pp > 1 else caps.zero_stages_without_pp).value

    def recipe(self, zero_stage: int, pp: int) -> StateRecipe | None:
        """The model-state recipe of a ZeRO stage at this pipeline degree (None: not run)."""
        if zero_stage not in self.zero_stages(pp):
            return None
        return next(r for r in self.memory.recipes if r.applies(zero_stage, pp))
