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
    peak_fp8_tflops: float | None = Field(
        default=None, ge=0.1, le=100_000,
        description="Dense FP8 peak (without sparsity), TFLOP/s per GPU; None where the GPU has no "
                    "FP8 tensor cores or its datasheet does not state it. The cost model's FP8 GEMMs "
                    "(training.compute_precision) run at this peak; BF16 work at peak_tflops.")
    compute_capability: float | None = Field(
        default=None, ge=1, le=100,
        description="CUDA compute capability (8.0 A100, 9.0 H100/H200, 10.0 B200/GB200); None for "
                    "a non-NVIDIA or unstated GPU. Decides which FP8 recipes run: block-scaled FP8 "
                    "needs >= 9.0, MXFP8 >= 10.0 (Transformer Engine's recipe support checks).")

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


# Llama 3 405B pre-training (Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 3.3.4):
# 419 unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs. The rate counts every
# unexpected job interruption (about 78% confirmed or suspected hardware: faulty GPUs, HBM3,
# software bugs, network switches/cables, host maintenance, SRAM, system processors, ...);
# it excludes the 47 planned interruptions (firmware, configuration and dataset updates).
LLAMA3_INTERRUPTIONS = 419
LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54
DEFAULT_INTERRUPTIONS_PER_GPU_HOUR = LLAMA3_INTERRUPTIONS / (LLAMA3_GPUS * LLAMA3_DAYS * 24)
# Llama 3 Sec. 3.3.1: the Tectonic file system serving the 16K-GPU cluster sustains 2 TB/s
# (peak 7 TB/s). Without a storage spec the aggregate write bandwidth scales with the cluster
# at that ratio: 2,000 GB/s / 16,384 GPUs = 0.122 GB/s per GPU (62.5 GB/s for 512 GPUs).
DEFAULT_STORAGE_GB_S_PER_GPU = 2_000 / LLAMA3_GPUS


class StorageSpec(StrictModel):
    """Checkpoint storage (GB/s = 1e9 bytes/s). Defaults and their basis are in the field docs."""

    aggregate_write_gb_s: float | None = Field(
        default=None, gt=0, le=1e7,
        description="Sustained aggregate write bandwidth of the file system, GB/s. Default: "
                    "0.122 GB/s per GPU of the cluster (Llama 3's 2 TB/s for 16,384 GPUs, Sec. 3.3.1).")
    aggregate_read_gb_s: float | None = Field(
        default=None, gt=0, le=1e7,
        description="Sustained aggregate read bandwidth, GB/s. Default: the write bandwidth.")
    per_node_write_gb_s: float = Field(
        default=25.0, gt=0, le=1e5,
        description="Write limit of one node, GB/s. Default 25: one 200 Gb/s storage NIC port at "
                    "line rate (DGX H100 in-band/storage ConnectX-7).")
    per_node_read_gb_s: float | None = Field(
        default=None, gt=0, le=1e5, description="Read limit of one node, GB/s. Default: the write limit.")
    host_copy_gb_s: float = Field(
        default=25.0, gt=0, le=1e5,
        description="Device-to-host copy bandwidth per GPU that an asynchronous save blocks on, "
                    "GB/s. Default 25: below half of PCIe Gen5 x16's 64 GB/s per direction (pageable "
                    "copies, shared host links).")


class FailureSpec(StrictModel):
    """Interruptions and what one costs (seconds)."""

    interruptions_per_gpu_hour: float = Field(
        default=DEFAULT_INTERRUPTIONS_PER_GPU_HOUR, ge=0, le=1.0,
        description="Unexpected job interruptions per GPU-hour. Default 1.97e-5: Llama 3 405B's 419 "
                    "in 54 days on 16,384 H100 (Dubey et al. 2024, Sec. 3.3.4; about 78% hardware).")
    detect_s: float = Field(
        default=300.0, ge=0, le=1e6,
        description="Time from a failure to the decision to restart, s. Default 300: the rank "
                    "heartbeat timeout of NVIDIA's fault-tolerance launcher (nvidia-resiliency-ext, "
                    "as configured in Megatron Bridge), the bound for a hang; a crash is seen sooner.")
    relaunch_s: float = Field(
        default=600.0, ge=0, le=1e6,
        description="Job relaunch to the first step, checkpoint load excluded: scheduler requeue, "
                    "process start, NCCL init, s. Default 600: the setup-section timeout in NVIDIA's "
                    "Megatron Bridge fault-tolerance example (launch to first step).")


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
    storage: StorageSpec = Field(
        default_factory=StorageSpec, description="Checkpoint storage bandwidths (defaults documented).")
    failures: FailureSpec = Field(
        default_factory=FailureSpec, description="Interruption rate and restart costs (defaults documented).")
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
    if err.get("type") == "finite_number":
        return f"not a finite number (got {err.get('input')}; NaN and Infinity are refused)"
    return msg.removeprefix("Value error, ")
