"""Cluster specification (validated once at the boundary).

Units: bandwidths in GB/s (1 GB = 1e9 bytes), effective per-GPU busbw for large
collectives in the nccl-tests sense, per direction; latencies in microseconds;
memory in GB; compute in TFLOP/s (dense BF16).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import Field, ValidationError, model_validator

from topology.errors import Problem, SpecError
from topology.graph_spec import StrictModel, TopologySpec


class GpuSpec(StrictModel):
    name: str = Field(min_length=1, max_length=100, description="GPU model name, e.g. 'h100-sxm-80gb'.")
    memory_gb: float = Field(ge=0.1, le=10_000, description="HBM capacity per GPU in GB (1e9 bytes).")
    peak_tflops: float = Field(ge=0.1, le=100_000, description="Dense BF16 peak, TFLOP/s per GPU.")
    hbm_gb_s: float = Field(ge=1, le=1_000_000, description="HBM bandwidth per GPU, GB/s.")

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9

    @property
    def peak_flops(self) -> float:
        """Peak FLOP/s."""
        return self.peak_tflops * 1e12


class LinkSpec(StrictModel):
    bandwidth_gb_s: float = Field(
        ge=0.01, le=100_000,
        description="Effective per-GPU bandwidth for large collectives (nccl-tests busbw), GB/s.",
    )
    latency_us: float = Field(ge=0, le=1_000_000, description="Per-message latency, microseconds.")


class ClusterSpec(StrictModel):
    name: str = Field(min_length=1, max_length=100, description="Cluster name.")
    nodes: int = Field(ge=1, le=1_000_000, description="Number of nodes.")
    gpus_per_node: int = Field(ge=1, le=1024, description="GPUs per node (per NVLink domain for flat clusters).")
    gpu: GpuSpec = Field(description="The GPU every node carries.")
    intra_node: LinkSpec = Field(description="The in-node (NVLink/NVSwitch) link, per GPU.")
    inter_node: LinkSpec = Field(description="The cross-node link, effective per rank under load.")
    topology: TopologySpec | None = Field(
        default=None,
        description="Optional graph generator or explicit graph (topology.graph_spec); replaces the flat links.",
    )
    unavailable_nodes: Annotated[tuple[int, ...], Field(strict=False)] = Field(
        default=(), description="Indices of nodes that are down or busy; placement avoids them.",
    )

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        if self.nodes * self.gpus_per_node > 10_000_000:
            raise ValueError("nodes: nodes x gpus_per_node exceeds 10,000,000 GPUs")
        bad = [n for n in self.unavailable_nodes if not 0 <= n < self.nodes]
        if bad:
            raise ValueError(f"unavailable_nodes: {bad} outside 0..{self.nodes - 1}")
        if len(set(self.unavailable_nodes)) >= self.nodes:
            raise ValueError("unavailable_nodes: every node is unavailable")
        return self

    @property
    def gpus(self) -> int:
        """All GPUs in the cluster."""
        return self.nodes * self.gpus_per_node

    @property
    def available_gpus(self) -> int:
        """GPUs on nodes that are not down or busy."""
        return (self.nodes - len(set(self.unavailable_nodes))) * self.gpus_per_node


_Spec = TypeVar("_Spec", bound=StrictModel)


def parse_spec(cls: type[_Spec], data: Any, root: str) -> _Spec:
    """Validate `data` as `cls`; raise SpecError with one Problem per error.

    Field paths are dotted from `root` (e.g. 'cluster.gpu.memory_gb').
    Raises: SpecError.
    """
    if isinstance(data, cls):
        return data
    try:
        return cls.model_validate(data) if not isinstance(data, (str, bytes)) else cls.model_validate_json(data)
    except ValidationError as exc:
        problems = [_problem(root, err) for err in exc.errors()]
        raise SpecError(f"invalid {root}: " + "; ".join(map(str, problems)), problems) from None


def _problem(root: str, err: Mapping[str, Any]) -> Problem:
    """One Problem; a cross-field message 'field: reason' is filed under that field."""
    path, reason = _path(root, err["loc"]), _reason(err)
    field, sep, rest = reason.partition(": ")
    if err.get("type") == "value_error" and sep and field.replace("_", "").isalnum():
        return Problem(f"{path}.{field}", rest)
    return Problem(path, reason)


def _path(root: str, loc: tuple) -> str:
    parts = [root] + [str(p) for p in loc if p != "__root__"]
    return ".".join(parts)


def _reason(err: Mapping[str, Any]) -> str:
    msg = err.get("msg", "invalid")
    if err.get("type") == "extra_forbidden":
        return "unknown field"
    if err.get("type") == "missing":
        return "required field is missing"
    return msg.removeprefix("Value error, ")
