"""Collective and point-to-point times, and the communication terms of a layout.

Unit legend: `_bytes` bytes (the full, unsharded buffer of a collective unless a name says
otherwise); `_s` seconds; `bandwidth_gb_s` per-GPU busbw, 1e9 bytes/s; `latency_s` per step.

Collectives use the alpha-beta ring model (Thakur, Rabenseifner & Gropp 2005, Sec. 2;
Patarasuk & Yuan 2009): on n ranks, all-reduce = 2(n-1) steps moving 2(n-1)/n of the
buffer per rank; reduce-scatter and all-gather = (n-1) steps moving (n-1)/n of it. Times
use busbw in the nccl-tests sense (NVIDIA nccl-tests PERFORMANCE.md: busbw = algbw x
2(n-1)/n for all-reduce, x (n-1)/n for reduce-scatter / all-gather), so
t = steps x latency + factor x bytes / busbw.
Group bandwidths and latencies come from topology.groups.group_links.
"""
from __future__ import annotations

import math

from topology.groups import GroupLink


def allreduce_s(message_bytes: float, link: GroupLink) -> float:
    """Ring all-reduce: 2(n-1) alpha + 2(n-1)/n bytes / busbw (Patarasuk & Yuan 2009)."""
    n = link.size
    if n <= 1 or message_bytes <= 0:
        return 0.0
    return 2 * (n - 1) * link.latency_s + 2.0 * (n - 1) / n * message_bytes / (link.bandwidth_gb_s * 1e9)


def reduce_scatter_s(message_bytes: float, link: GroupLink) -> float:
    """Ring reduce-scatter of a full buffer: (n-1) alpha + (n-1)/n bytes / busbw."""
    n = link.size
    if n <= 1 or message_bytes <= 0:
        return 0.0
    return (n - 1) * link.latency_s + (n - 1) / n * message_bytes / (link.bandwidth_gb_s * 1e9)


def allgather_s(message_bytes: float, link: GroupLink) -> float:
    """Ring all-gather into a full buffer: same cost as reduce-scatter (Thakur et al. 2005)."""
    return reduce_scatter_s(message_bytes, link)


def p2p_s(message_bytes: float, bandwidth_gb_s: float, latency_s: float) -> float:
    """One point-to-point transfer: latency + bytes / bandwidth."""
    if message_bytes <= 0:
        return 0.0
    return latency_s + message_bytes / (bandwidth_gb_s * 1e9)


def bucketed_s(total_bytes: float, bucket_bytes: float, link: GroupLink, collective) -> tuple[float, float]:
    """(total, last bucket) time of a collective run bucket by bucket (each bucket pays latency)."""
    if total_bytes <= 0 or link.size <= 1:
        return 0.0, 0.0
    buckets = max(1, math.ceil(total_bytes / bucket_bytes))
    per = collective(total_bytes / buckets, link)
    return buckets * per, per
