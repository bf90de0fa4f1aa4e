"""Search options (validated once at the boundary; strict, unknown keys rejected).

Units: seconds for time limits and deadlines; fractions (0..1) for tolerances and margins.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from solver.specs import DEFAULT_RANK_ORDER, RankOrder
from topology.spec import StrictModel

Objective = Literal["step_time", "min_gpus", "min_gpus_deadline", "min_cost"]
RecomputeLevel = Literal["none", "selective", "full"]


class SearchOptions(StrictModel):
    """What the layout search may vary and how long it may run."""

    top_k: int = Field(default=10, ge=1, le=1000, description="Distinct layouts to return, best first.")
    time_limit_s: float = Field(
        default=10.0, gt=0, le=3600,
        description="Wall-clock budget of the CP-SAT solves (all of them together), seconds. "
                    "Building the cost tables comes before it and is not counted.")
    workers: int = Field(default=2, ge=1, le=64, description="CP-SAT search workers (num_workers).")
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="CP-SAT random seed.")
    objective: Objective = Field(
        default="step_time",
        description="step_time: fastest step; min_gpus: fewest GPUs that fit (then fastest); "
                    "min_gpus_deadline: fewest GPUs whose run ends by deadline_s (then fastest); "
                    "min_cost: lowest GPU-time for the run (GPUs x steps x step time).")
    deadline_s: float | None = Field(
        default=None, gt=0, le=1e10, description="Run deadline for min_gpus_deadline, seconds.")
    allow_fewer_gpus: bool = Field(
        default=False, description="Layouts may use fewer than all available GPUs.")
    gpus: int | None = Field(
        default=None, ge=1, le=10**8,
        description="Use exactly this many GPUs (at most the available ones; default: all of them). "
                    "With allow_fewer_gpus or a GPU-minimizing objective it is the upper limit.")
    batch_tolerance: float = Field(
        default=0.0, ge=0, lt=1,
        description="Allowed relative miss of training.global_batch_tokens (0 = exact).")
    allow_tp_outside_node: bool = Field(
        default=False, description="Tensor parallelism may span more than one node.")
    allow_uneven_pipeline: bool = Field(
        default=True, description="Pipeline stages may hold different numbers of layers.")
    split_stages: bool = Field(
        default=False,
        description="Charge every pipeline stage separately and give each layout the fastest "
                    "split whose every stage fits memory (the first stage also runs the "
                    "embedding, the last the LM head and loss; uneven when "
                    "allow_uneven_pipeline, as in Llama 3), reported as pipeline_layers. Off by "
                    "default (every stage charged as the busiest rank): it about triples the "
                    "seed search latency (0.12 -> 0.49 s warm). A MoE model keeps even splits except "
                    "where its layers do not divide over the pp x vpp chunks: there a first/last "
                    "split (solver.search.moe_split; Megatron-Core and torchtitan), as with moe_splits.")
    moe_splits: bool = Field(
        default=False,
        description="Mixture-of-experts models: where the layers do not divide over a layout's pp x vpp "
                    "chunks, give it the first/last pipeline split its framework writes (Megatron-Core "
                    "--decoder-first/last-pipeline-num-layers or --pipeline-model-parallel-layout, "
                    "torchtitan module_fqns_per_model_part; DeepSpeed keeps the even rule), every stage "
                    "charged separately (solver.search.moe_split); dense models are unaffected. Off by "
                    "default in `search` and /v1/layouts (latency: a DeepSeek-V3 search on 2048 H800 takes "
                    "several seconds with it, about 1 s without, README); `plan` and /v1/plans turn it on "
                    "unless the options say.")
    zero_stages: tuple[Literal[0, 1, 2, 3], ...] = Field(
        default=(0, 1, 2, 3), min_length=1, strict=False,  # a JSON list is accepted
        description="ZeRO stages the search may use.")
    rank_orders: tuple[RankOrder, ...] = Field(
        default=(DEFAULT_RANK_ORDER,), min_length=1, strict=False,  # a JSON list is accepted
        description="Placements (LayoutSpec.rank_order) to search; each is searched exactly and "
                    "the results merged. Give both orders on fat trees, where keeping DP or PP "
                    "groups inside a leaf changes their bandwidth.")
    recompute: tuple[RecomputeLevel, ...] = Field(
        default=("none", "selective", "full"), min_length=1, strict=False,
        description="Activation-recompute levels the search may use.")
    max_micro_batch: int | None = Field(
        default=None, ge=1, le=1024,
        description="Largest micro-batch, sequences. Default (null): every micro-batch the batch rule "
                    "admits (dp x micro_batch x accumulation = the global batch), as Megatron-LM and "
                    "torchtitan accept any micro-batch that divides a replica's sequences.")
    max_vpp: int | None = Field(
        default=None, ge=1, le=1024,
        description="Largest interleaving (virtual stages per pipeline rank). Default (null): every "
                    "count the pipeline rule admits (pp x vpp chunks of >= 1 layer that divide the "
                    "layers); NVIDIA's GPT-3 175B and Nemotron-4 340B recipes use 12.")
    # 16 is the largest context-parallel degree of any published run we hold: Meta's Llama 3
    # 405B long-context stage, CP 16 at 131,072 tokens (Dubey et al. 2024, Table 4; held-out
    # row dubey2024_llama3_405b_t4_16384_cp16); torchtitan's own benchmarks stop at CP 8 (262,144
    # tokens, benchmarks/llama3_h100_202412_torchtitan.md Tables 2 and 6) and NVIDIA's DGXC
    # Megatron-Core recipes at CP 2. Neither framework caps CP (Megatron-LM
    # context_parallel.md, torchtitan parallel_dims.py): longer sequences pass --max-cp.
    # tests/search/test_max_cp_basis.py keeps the default >= every published run's CP.
    max_cp: int = Field(default=16, ge=1, le=1024,
                        description="Largest context-parallel degree. Default 16: the largest CP of a "
                                    "published run (Llama 3 405B at 131,072 tokens, Dubey et al. 2024 "
                                    "Table 4); neither Megatron-Core nor torchtitan caps it.")
    max_ep: int | None = Field(
        default=None, ge=1, le=100_000,
        description="Largest expert-parallel degree (MoE models). Default (null): every divisor of "
                    "the routed experts that fits the GPUs.")

    @model_validator(mode="after")
    def _check(self) -> SearchOptions:
        if self.objective == "min_gpus_deadline" and self.deadline_s is None:
            raise ValueError("objective min_gpus_deadline needs deadline_s")
        return self

    @property
    def gpus_may_vary(self) -> bool:
        """Whether the GPU count is a decision (fewer GPUs allowed or a GPU-minimizing objective)."""
        return self.allow_fewer_gpus or self.objective != "step_time"
