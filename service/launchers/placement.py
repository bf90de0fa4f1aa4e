"""Rank placement of a layout and the torchrun arguments it implies (framework-neutral)."""
from __future__ import annotations

from collections import Counter
from typing import Any

from solver.specs import LayoutSpec
from topology.spec import ClusterSpec

RANKS_LISTED_MAX = 4096  # placements list every rank up to this world size


def _groups_of_rank0(order: tuple[str, ...], dims: dict[str, int]) -> dict[str, list[int]]:
    """Rank 0's group of each kind: ranks 0, s, 2s, ... with s the product of the faster dims."""
    out, stride = {}, 1
    for kind in order:
        out[kind] = [i * stride for i in range(dims[kind])]
        stride *= dims[kind]
    return {k: out[k] for k in ("tp", "cp", "dp", "pp")}


def rank_placement(cluster: ClusterSpec, layout: LayoutSpec) -> dict[str, Any]:
    """Rank -> (node, local GPU) from topology.placement.place in the layout's rank order
    (Megatron's default TP, CP, DP, PP, or TP, CP, PP, DP); unavailable nodes get no rank.

    `ranks[r]` is [node, local GPU] of rank r (listed up to RANKS_LISTED_MAX ranks);
    `groups_of_rank0` gives the TP, CP, DP and PP groups that contain rank 0.
    Raises: InfeasibleError when the layout needs more GPUs than are available.
    """
    from topology.placement import parse_order, place

    dims = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    placed = place(cluster, dims, parse_order(layout.rank_order))
    per_node = Counter(s.node for s in placed.slots)
    counts = sorted(set(per_node.values()))
    out: dict[str, Any] = {
        "order": "-".join(placed.order), "world_size": layout.gpus,
        "gpus_per_node": cluster.gpus_per_node, "nodes": sorted(per_node),
        "ranks_per_node": counts[0] if len(counts) == 1 else counts,
        "domain_aligned": placed.aligned,
        "rule": ("rank = tp + TP*(cp + CP*(dp + DP*pp))" if layout.rank_order == "tp-cp-dp-pp"
                 else "rank = tp + TP*(cp + CP*(pp + PP*dp))") + "; ranks[r] = [node, local GPU]",
        "groups_of_rank0": _groups_of_rank0(placed.order, dims),
    }
    if layout.gpus <= RANKS_LISTED_MAX:
        out["ranks"] = [[s.node, s.local] for s in placed.slots]
    return out


def torchrun_args(placement: dict[str, Any]) -> list[str]:
    """torchrun arguments for a placement: one process per placed GPU on each node used.

    torchrun needs the same process count on every node; a placement with uneven nodes
    (domain alignment leaving GPUs idle) gets the largest count and a note in `launchers`.
    """
    per_node = placement["ranks_per_node"]
    nproc = per_node if isinstance(per_node, int) else max(per_node)
    return ["--nnodes", str(len(placement["nodes"])), "--nproc-per-node", str(nproc)]


