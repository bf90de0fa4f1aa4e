"""Alpha-beta collective times over a GroupLink: what the cost model calls.

Units: message sizes in bytes (1 GB = 1e9 bytes), bandwidths in GB/s per GPU per
direction (busbw in the nccl-tests sense), times in seconds.

`message_bytes` is the per-rank buffer as nccl-tests reports "size": the all-reduce
buffer, the full (gathered) output of all-gather, the full input of reduce-scatter,
the send buffer of all-to-all, the payload of a point-to-point send.

Ring forms (Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication
operations in MPICH", sec. 4; Patarasuk & Yuan 2009 for the all-reduce bound), p ranks,
alpha = per-step latency, B = bandwidth:
    all-reduce       2 (p-1) alpha + 2 (p-1)/p  n / B
    reduce-scatter     (p-1) alpha +   (p-1)/p  n / B      (all-gather the same)
    all-to-all         (p-1) alpha +   (p-1)/p  n / B_a2a  (pairwise exchange)
    point-to-point           alpha +            n / B
Hierarchical forms (two-level all-reduce as in Jia et al. 2018, "Highly scalable deep
learning training system with mixed-precision", sec. 3.3; NCCL's NVLS/tree idea):
k ranks share an NVLink domain, m = p / k domains:
    all-reduce  = RS_intra(n, k) + AR_inter(n / k, m) + AG_intra(n, k)
    RS / AG     = RS_intra(n, k) + RS_inter(n / k, m)   (AG mirrored)
The functions are pure and take only floats and a GroupLink so the search can call them
millions of times.
"""
from __future__ import annotations

from typing import Literal

from topology.groups import GroupLink

Algorithm = Literal["ring", "hierarchical", "auto"]
GB = 1e9


def _ring_rs_s(n_bytes: float, p: int, bw_gb_s: float, alpha_s: float) -> float:
    if p <= 1:
        return 0.0
    return (p - 1) * alpha_s + (p - 1) / p * n_bytes / (bw_gb_s * GB)


def _ring_ar_s(n_bytes: float, p: int, bw_gb_s: float, alpha_s: float) -> float:
    return 2.0 * _ring_rs_s(n_bytes, p, bw_gb_s, alpha_s)


_Levels = tuple[int, int, tuple[float, float], tuple[float, float]]


def _levels(link: GroupLink) -> _Levels | None:
    """(k ranks per domain, m domains, intra (GB/s, s), inter (GB/s, s)) when the group
    splits evenly over domains and both levels have figures."""
    k = link.ranks_per_node
    ib, il = link.intra_bandwidth_gb_s, link.intra_latency_s
    eb, el = link.inter_bandwidth_gb_s, link.inter_latency_s
    if link.size <= 1 or k <= 1 or k >= link.size or link.size % k:
        return None
    if ib is None or il is None or eb is None or el is None:
        return None
    return k, link.size // k, (ib, il), (eb, el)


def _hier_ar_s(n: float, link: GroupLink) -> float | None:
    lv = _levels(link)
    if lv is None:
        return None
    k, m, intra, inter = lv
    return 2 * _ring_rs_s(n, k, *intra) + _ring_ar_s(n / k, m, *inter)


def _hier_rs_s(n: float, link: GroupLink) -> float | None:
    lv = _levels(link)
    if lv is None:
        return None
    k, m, intra, inter = lv
    return _ring_rs_s(n, k, *intra) + _ring_rs_s(n / k, m, *inter)


def _pick(ring_s: float, hier_s: float | None, algorithm: Algorithm) -> float:
    if algorithm == "ring" or hier_s is None:
        return ring_s
    if algorithm == "hierarchical":
        return hier_s
    return min(ring_s, hier_s)


def allreduce_time_s(message_bytes: float, link: GroupLink, algorithm: Algorithm = "ring") -> float:
    """All-reduce of `message_bytes` per rank over the group. "hierarchical" falls back to
    ring when the group does not split evenly over NVLink domains; "auto" takes the faster."""
    ring = _ring_ar_s(message_bytes, link.size, link.bandwidth_gb_s, link.latency_s)
    if algorithm == "ring":
        return ring
    return _pick(ring, _hier_ar_s(message_bytes, link), algorithm)


def reduce_scatter_time_s(message_bytes: float, link: GroupLink, algorithm: Algorithm = "ring") -> float:
    """Reduce-scatter of a `message_bytes` input per rank (each keeps 1/p)."""
    ring = _ring_rs_s(message_bytes, link.size, link.bandwidth_gb_s, link.latency_s)
    if algorithm == "ring":
        return ring
    return _pick(ring, _hier_rs_s(message_bytes, link), algorithm)


def allgather_time_s(message_bytes: float, link: GroupLink, algorithm: Algorithm = "ring") -> float:
    """All-gather producing `message_bytes` per rank; the mirror image of reduce-scatter."""
    return reduce_scatter_time_s(message_bytes, link, algorithm)


def alltoall_time_s(message_bytes: float, link: GroupLink) -> float:
    """All-to-all of a `message_bytes` send buffer per rank (1/p to each peer).

    Uses the routed all-to-all bandwidth; where it was not computed (very large groups,
    see groups.A2A_FLOW_LIMIT) the ring figure stands in, an optimistic bound.
    """
    bw, alpha = link.alltoall_bandwidth_gb_s, link.alltoall_latency_s
    if bw is None or alpha is None:
        bw, alpha = link.bandwidth_gb_s, link.latency_s
    return _ring_rs_s(message_bytes, link.size, bw, alpha)  # same (p-1) alpha + (p-1)/p n / B form


def p2p_time_s(message_bytes: float, link: GroupLink) -> float:
    """One point-to-point send between neighbouring ranks of the group (e.g. PP stages)."""
    if link.size <= 1:
        return 0.0
    return link.latency_s + message_bytes / (link.bandwidth_gb_s * GB)
