"""Collective and point-to-point times used by the cost model.

Unit legend: `_bytes` bytes (the full, unsharded buffer of a collective, nccl-tests "size");
`_s` seconds. Group bandwidths and latencies come from topology.groups.group_links.

The alpha-beta ring formulas live in topology.collectives (Thakur, Rabenseifner & Gropp
2005; Patarasuk & Yuan 2009; busbw in the nccl-tests sense): on n ranks,
all-reduce = 2(n-1) alpha + 2(n-1)/n bytes / busbw; reduce-scatter and all-gather =
(n-1) alpha + (n-1)/n bytes / busbw; point-to-point = alpha + bytes / bandwidth.
The cost model uses the ring algorithm (NCCL's choice for the large messages that matter
here); the calibrated constants assume it.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from topology.collectives import allgather_time_s, allreduce_time_s, p2p_time_s, reduce_scatter_time_s
from topology.groups import GroupLink


def allreduce_s(message_bytes: float, link: GroupLink) -> float:
    """Ring all-reduce of a buffer over the group (0 for one rank or an empty buffer)."""
    return allreduce_time_s(message_bytes, link) if link.size > 1 and message_bytes > 0 else 0.0


def reduce_scatter_s(message_bytes: float, link: GroupLink) -> float:
    """Ring reduce-scatter of a full buffer (each rank keeps 1/n)."""
    return reduce_scatter_time_s(message_bytes, link) if link.size > 1 and message_bytes > 0 else 0.0


def allgather_s(message_bytes: float, link: GroupLink) -> float:
    """Ring all-gather into a full buffer: the mirror of reduce-scatter."""
    return allgather_time_s(message_bytes, link) if link.size > 1 and message_bytes > 0 else 0.0


def p2p_s(message_bytes: float, link: GroupLink) -> float:
    """One point-to-point transfer to a neighbour in the group: latency + bytes / bandwidth."""
    return p2p_time_s(message_bytes, link) if message_bytes > 0 else 0.0


def bucketed_s(total_bytes: float, bucket_bytes: float, link: GroupLink,
               collective: Callable[[float, GroupLink], float]) -> tuple[float, float]:
    """(total, last bucket) seconds of a collective run bucket by bucket; each bucket pays
    the latency term (Megatron-LM / PyTorch DDP gradient buckets, Li et al. 2020 Sec. 3.2.3)."""
    if total_bytes <= 0 or link.size <= 1:
        return 0.0, 0.0
    buckets = max(1, math.ceil(total_bytes / bucket_bytes))
    per = collective(total_bytes / buckets, link)
    return buckets * per, per
