"""Typed `topology` field of a cluster spec: one frozen model per graph generator.

A discriminated union on `kind` (STYLE.md habit 2). Every model is frozen and holds only
tuples, so a ClusterSpec carrying one stays hashable (group_links is memoized on it).

Units: bandwidths in GB/s (1e9 bytes/s) per direction per link; latencies in microseconds.
Where a generator needs the in-node NVLink figure it takes the cluster's `intra_node`;
`flat` and `nvlink_domain` also take `inter_node` as the per-GPU scale-out link.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class StrictModel(BaseModel):
    """Base of every input spec: strict types, unknown keys rejected, immutable.

    Defined here, the one module spec.py imports, and re-exported as topology.spec.StrictModel."""

    # allow_inf_nan=False: JSON's NaN/Infinity (Python's json reads them) are refused as
    # "not a finite number", never compared against a range or stored.
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

# JSON arrays become tuples (hashable) while their items stay strictly typed.
_Tuple = Field(strict=False)

VertexType = Literal["gpu", "nvswitch", "nic", "leaf", "spine", "core", "switch"]


class FlatTopology(StrictModel):
    """The seed's description: one NVSwitch per node (intra_node per GPU) and a
    dedicated per-GPU NIC into a non-blocking core (inter_node per GPU)."""

    kind: Literal["flat"] = Field(description="Generator name.")


class NvlinkDomainTopology(StrictModel):
    """NVLink domains spanning several nodes (trays), e.g. GB200 NVL72 = 18 trays x 4 GPUs.

    Inside a domain every GPU reaches one NVSwitch fabric at `intra_node`; across domains
    each GPU has its own NIC (`inter_node`) into a non-blocking core.
    """

    kind: Literal["nvlink_domain"] = Field(description="Generator name.")
    nodes_per_domain: int = Field(ge=1, le=4096, description="Nodes (trays) sharing one NVLink domain.")


class FatTreeTopology(StrictModel):
    """Two-level fat tree: nodes -> NICs -> leaf switches -> spine switches."""

    kind: Literal["fat_tree"] = Field(description="Generator name.")
    nodes_per_leaf: int = Field(ge=1, le=4096, description="Nodes whose NICs hang off one leaf switch.")
    oversubscription: float = Field(
        default=1.0, ge=1.0, le=64.0,
        description="Leaf downlink : uplink capacity ratio (2.0 means 2:1 oversubscribed).")
    nics_per_node: int = Field(ge=1, le=64, description="Scale-out NICs per node (GPUs share them evenly).")
    nic_gb_s: float = Field(ge=0.01, le=10_000, description="Effective per-direction bandwidth of one NIC, GB/s.")
    spines: int = Field(default=4, ge=1, le=4096, description="Spine switches; traffic is spread evenly (ECMP).")
    nic_latency_us: float = Field(
        default=5.0, ge=0, le=1_000,
        description="GPU-to-leaf one-way latency through the NIC, microseconds.")
    switch_latency_us: float = Field(
        default=0.5, ge=0, le=1_000, description="Leaf-to-spine hop latency, microseconds.")


class RailOptimizedTopology(FatTreeTopology):
    """Rail-optimized fat tree (DGX SuperPOD style): NIC r of every node in a scalable
    unit of `nodes_per_leaf` nodes goes to that unit's rail-r leaf; spines join all leaves."""

    kind: Literal["rail_optimized"] = Field(description="Generator name.")  # type: ignore[assignment]


class VertexSpec(StrictModel):
    id: str = Field(min_length=1, max_length=200, description="Unique vertex name.")
    type: VertexType = Field(description="Vertex role.")
    node: int | None = Field(default=None, ge=0, description="Node index (GPUs only; required there).")
    domain: int | None = Field(
        default=None, ge=0, description="NVLink domain (GPUs only); defaults to the node index.")


class EdgeSpec(StrictModel):
    a: str = Field(min_length=1, description="One end (vertex id).")
    b: str = Field(min_length=1, description="Other end (vertex id).")
    bandwidth_gb_s: float = Field(ge=0.01, le=1_000_000, description="Per-direction capacity, GB/s.")
    latency_us: float = Field(ge=0, le=1_000_000, description="One-way latency of this hop, microseconds.")
    kind: Literal["nvlink", "pcie", "network"] = Field(default="network", description="Link technology.")


class GraphTopology(StrictModel):
    """An explicit graph. GPUs are listed in rank-slot order within each node."""

    kind: Literal["graph"] = Field(description="Generator name.")
    vertices: Annotated[tuple[VertexSpec, ...], _Tuple] = Field(min_length=1, description="Vertices.")
    links: Annotated[tuple[EdgeSpec, ...], _Tuple] = Field(description="Bidirectional links.")

    @model_validator(mode="after")
    def _check(self) -> GraphTopology:
        ids = [v.id for v in self.vertices]
        if len(set(ids)) != len(ids):
            raise ValueError("vertex ids must be unique")
        known = set(ids)
        bad = sorted({e for link in self.links for e in (link.a, link.b) if e not in known})
        if bad:
            raise ValueError(f"links name unknown vertices {bad[:5]}")
        if any(link.a == link.b for link in self.links):
            raise ValueError("a link joins a vertex to itself")
        if any(v.type == "gpu" and v.node is None for v in self.vertices):
            raise ValueError("every gpu vertex needs a 'node'")
        return self


TopologySpec = Annotated[
    FlatTopology | NvlinkDomainTopology | FatTreeTopology | RailOptimizedTopology | GraphTopology,
    Field(discriminator="kind"),
]
