"""Request bodies for benchmarks.load: the seed problem, and the distinct problems a capacity
planner sends (which model, how many nodes of which GPU, which network, which sequence length
and batch), each a problem no solve worker has seen.

Every field is one both servers of the benchmark accept: presets that exist in the old ref
(529325d) and in this checkout, and inline clusters in the schema both read.
"""
from __future__ import annotations

import itertools
import json
import random
from typing import Any

SEED: dict[str, Any] = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
                        "options": {"top_k": 3, "time_limit_s": 2}}

# The planner's axes. Dense model presets of both refs; node counts of 8-GPU servers from
# 16 to 128 (128 to 1,024 GPUs); H100 and H200 (presets of both refs); inter-node bandwidth
# per GPU of one 200 Gb/s, one 400 Gb/s and two 400 Gb/s NICs at ~90% busbw (as the seed
# cluster's 45 GB/s: topology/data/clusters/dgx-h100-superpod.json); sequence 4k or 8k;
# 2 Mi or 4 Mi tokens per step.
MODELS = ("seed-70b", "llama3-70b", "llama3-8b")
NODES = (16, 24, 32, 48, 64, 80, 96, 128)
GPUS = ("h100-sxm-80gb", "h200-sxm-141gb")
INTER_NODE_GB_S = (22.5, 45.0, 90.0)
SEQ_LENS = (4096, 8192)
BATCH_TOKENS = (2**21, 2**22)


def planner_problems(seed: int = 0) -> list[dict]:
    """Every combination of the planner's axes (576 problems), in a shuffled order."""
    out = []
    for i, (model, nodes, gpu, bw, seq, batch) in enumerate(itertools.product(
            MODELS, NODES, GPUS, INTER_NODE_GB_S, SEQ_LENS, BATCH_TOKENS)):
        cluster = {"name": f"plan-{i}", "nodes": nodes, "gpus_per_node": 8, "gpu": gpu,
                   "intra_node": {"bandwidth_gb_s": 450, "latency_us": 3},
                   "inter_node": {"bandwidth_gb_s": bw, "latency_us": 10}}
        training = {"tokens": 300e9, "seq_len": seq, "global_batch_tokens": batch}
        out.append({"model": model, "cluster": cluster, "training": training,
                    "options": dict(SEED["options"])})
    random.Random(seed).shuffle(out)
    return out


class Workloads:
    """Bodies per phase: 'seed' the seed request `n` times (a scheduler asking again);
    'distinct' the next `n` planner problems (none repeats until all 576 were sent)."""

    def __init__(self, seed: int = 0) -> None:
        self._problems = [json.dumps(p).encode() for p in planner_problems(seed)]
        self._next = 0

    def bodies(self, workload: str, n: int) -> list[bytes]:
        if workload == "seed":
            return [json.dumps(SEED).encode()] * n
        out = [self._problems[(self._next + i) % len(self._problems)] for i in range(n)]
        self._next += n
        return out
