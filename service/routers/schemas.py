"""Request bodies of the /v1 routes, with the OpenAPI examples shown at /docs.

The spec fields (model, cluster, training, layout, options) are typed `Any` here on
purpose: each is validated once by its own strict spec (solver.specs, topology.spec,
solver.search.options) so that error field paths read `model.layers`, not pydantic's
union-branch paths. The OpenAPI schema still says what they accept.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SEED_MODEL: dict[str, Any] = {"name": "seed-70b", "layers": 80, "hidden": 8192, "ffn_hidden": 28672,
              "ffn_gated": True, "heads": 64, "kv_heads": 8, "head_dim": 128,
              "vocab": 128000, "tied_embeddings": True}
SEED_CLUSTER: dict[str, Any] = {"name": "seed-512", "nodes": 64, "gpus_per_node": 8,
                "gpu": {"name": "seed-gpu", "memory_gb": 80, "peak_tflops": 1000, "hbm_gb_s": 3350},
                "intra_node": {"bandwidth_gb_s": 450, "latency_us": 3},
                "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}}
SEED_TRAINING: dict[str, Any] = {"tokens": 300e9, "seq_len": 8192, "global_batch_tokens": 4194304}
SEED_LAYOUT: dict[str, Any] = {"tp": 8, "pp": 1, "dp": 64, "cp": 1, "vpp": 1, "sequence_parallel": True,
               "zero_stage": 1, "micro_batch": 1, "recompute": "selective"}

_PRESET_OR_OBJECT: dict[str, Any] = {"oneOf": [{"type": "string", "description": "preset name (GET /v1/presets)"},
                               {"type": "object"}]}


def _spec_field(what: str, default: Any = ..., example: Any = None) -> Any:
    return Field(default, description=f"{what}: a preset name or an inline object.",
                 json_schema_extra={**_PRESET_OR_OBJECT, "examples": [example]})


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProblemIn(_Body):
    """A model, a cluster and a training run (the planning problem)."""

    model: Any = _spec_field("Model (native fields or a Hugging Face config.json)", example="seed-70b")
    cluster: Any = _spec_field("Cluster (its 'gpu' may name a GPU preset)", example="seed-512")
    training: Any = _spec_field("Training run (tokens, seq_len, global_batch_tokens)", example="seed-300b")
    price_per_gpu_hour: Any = Field(
        default=None, description="Price per GPU-hour; replaces training.price_per_gpu_hour "
                                  "(costs in plan and search rows).", examples=[2.5])
    currency: Any = Field(
        default=None, description="ISO 4217 code of the price (three capital letters); replaces "
                                  "training.currency, echoed with every cost.", examples=["EUR"])
    profile: dict[str, Any] | None = Field(
        default=None, description="A calibrated profile (the JSON `trainplan calibrate` writes): its "
                                  "constants and step-time band replace the shipped ones; 422 when its "
                                  "schema or cost-model version does not match this server's.")


class SearchIn(ProblemIn):
    """A problem plus layout-search options."""

    options: dict[str, Any] | None = Field(
        default=None,
        description="Search options (solver.search.options.SearchOptions: top_k, time_limit_s, "
                    "objective, allow_fewer_gpus, zero_stages, ...). time_limit_s is capped by "
                    "the server's TRAINPLAN_MAX_TIME_LIMIT_S.",
        examples=[{"top_k": 5, "time_limit_s": 2}])


class PlanIn(SearchIn):
    """POST /v1/plans body."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"},
        {"model": SEED_MODEL, "cluster": SEED_CLUSTER, "training": SEED_TRAINING,
         "options": {"top_k": 5, "time_limit_s": 2}},
    ]})


class LayoutsIn(SearchIn):
    """POST /v1/layouts body (a scheduler's request)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
         "options": {"top_k": 3}},
        {"model": "seed-70b", "cluster": {**SEED_CLUSTER, "unavailable_nodes": [3, 17]},
         "training": "seed-300b", "options": {"top_k": 3, "allow_fewer_gpus": True}},
    ]})


class EstimateIn(ProblemIn):
    """POST /v1/estimate body: one fixed layout."""

    layout: Any = Field(description="The layout (Megatron-LM terms).",
                        json_schema_extra={"type": "object", "examples": [SEED_LAYOUT]})

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b", "layout": SEED_LAYOUT},
    ]})


class ProblemOut(BaseModel):
    """One problem with the request: a dotted field path and the reason."""

    field: str = Field(examples=["model.layers"])
    reason: str = Field(examples=["Input should be greater than or equal to 1"])


class ErrorDetail(BaseModel):
    status: int = Field(examples=[422])
    type: str = Field(description="invalid_input, infeasible, over_capacity, not_found, "
                                  "unauthorized, too_large, unsupported_media_type, timeout, "
                                  "saturated, store_unavailable, memory_exceeded, "
                                  "worker_crashed, solver_timeout, deadline_exceeded, internal",
                      examples=["invalid_input"])
    message: str
    problems: list[ProblemOut] = Field(default_factory=list)
    explanation: dict[str, Any] | None = Field(
        default=None, description="When nothing fits: why, and the smallest change that fits.")
    progress: dict[str, Any] | None = Field(
        default=None, description="When a request was stopped (503/504): stages_done, "
                                  "stopped_in, elapsed_s, deadline_s.")


class ErrorOut(BaseModel):
    """Every error response: {"error": {...}}."""

    error: ErrorDetail


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries for these status codes, all with the ErrorOut body."""
    text = {401: "missing or wrong bearer token", 404: "unknown plan id",
            413: "request body too large", 415: "request body is not application/json",
            422: "bad input (problems name the fields), nothing fits (type 'infeasible' with "
                 "an explanation) or over this server's capacity (type 'over_capacity')",
            503: "saturated (all solve workers busy; Retry-After), store unavailable "
                 "(Retry-After), a worker over its memory budget, or no layout found within "
                 "the solver time limit",
            504: "the request's deadline (TRAINPLAN_MAX_TIME_LIMIT_S) passed; `progress` says "
                 "which stages were done"}
    return {c: {"model": ErrorOut, "description": text[c]} for c in codes}


class _Out(BaseModel):
    """Success bodies carry more fields than listed (documented in README and /docs)."""

    model_config = ConfigDict(extra="allow")


class LayoutOut(_Out):
    """One ranked layout (Megatron-LM terms) with its exports and placement."""

    rank: int = Field(ge=1)
    tp: int
    pp: int
    dp: int
    cp: int
    vpp: int
    zero_stage: int
    micro_batch: int
    recompute: str
    sequence_parallel: bool
    gpus: int
    step_time_s: float | None = Field(description="Predicted seconds per optimizer step.")
    launchers: dict[str, Any] = Field(description="megatron, torchtitan, deepspeed exports.")
    placement: dict[str, Any] = Field(description="Rank -> [node, GPU] placement.")


class LayoutsOut(_Out):
    """POST /v1/layouts: ranked layouts, best first."""

    layouts: list[LayoutOut]
    search: dict[str, Any] = Field(description="Solver status, timings, phases.")
    limits: dict[str, Any] = Field(description="Time limit, workers, deadline and work "
                                               "estimate applied to this request.")


class PlanLinks(BaseModel):
    self: str
    report: str


class PlanOut(_Out):
    """POST /v1/plans and GET /v1/plans/{id}: the plan of `trainplan plan`, stored."""

    id: str = Field(min_length=32, max_length=32)
    created_at: str = Field(description="ISO 8601, UTC.")
    links: PlanLinks
    layouts: list[dict[str, Any]]
    parameters: dict[str, Any]
    launch: dict[str, Any] | None = Field(
        default=None, description="The launch of layouts[0] in training.framework (as POST /v1/layouts' "
                                  "`launch`, or `{refused, problems}` naming the rule) and its `placement`.")


class EstimateOut(_Out):
    """POST /v1/estimate: one layout's accounting and prediction."""

    fits: bool
    gpus: int
    step_time_s: float | None
    memory_per_gpu_bytes: dict[str, Any]
    layout: dict[str, Any]
