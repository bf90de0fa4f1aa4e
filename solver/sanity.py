"""Sanity warnings (not errors) about a run's inputs and prediction: things that are valid
but rarely meant, printed next to the result (issue 12: never change an input silently).

Each warning is one sentence naming the quantity and why it is suspicious.
"""
from __future__ import annotations

from typing import Any

from solver.specs import TrainingSpec
from topology.spec import ClusterSpec

# Below this MFU a layout leaves most of the GPUs' peak unused: well under the 35-55% that
# large dense runs report (e.g. Llama 3 405B: 38-43%, arXiv:2407.21783 Table 4).
LOW_MFU = 0.10


def batch_warnings(training: TrainingSpec, batch: dict[str, Any]) -> list[str]:
    """The global batch actually used versus the target, then input_warnings.

    `batch`: the plan/estimate 'batch' entry (tokens_per_step, dp, micro_batch, grad_accum)."""
    out = []
    used, target = batch["tokens_per_step"], training.global_batch_tokens
    if used != target:
        out.append(f"global batch: {used:,} tokens per step used, not the target {target:,} "
                   f"({used / target - 1:+.1%}): DP {batch['dp']} x micro-batch {batch['micro_batch']} "
                   f"x {batch['grad_accum']} accumulation x seq_len {training.seq_len:,} is the nearest "
                   "whole number of micro-batches")
    return out + input_warnings(training)


def input_warnings(training: TrainingSpec) -> list[str]:
    """A one-sequence global batch; seq_len 1."""
    out = []
    target = training.global_batch_tokens
    if target // training.seq_len <= 1:
        out.append(f"the global batch is one sequence ({target:,} tokens at seq_len {training.seq_len:,})")
    if training.seq_len == 1:
        out.append("seq_len is 1: every sequence is a single token")
    return out


def scale_warnings(training: TrainingSpec, cluster: ClusterSpec, mfu: float | None,
                   where: str = "the recommended layout") -> list[str]:
    """Low MFU at the recommended layout; a cluster far beyond the batch's useful DP (fewer
    sequences per step than nodes: every replica would need more than a node of model
    parallelism)."""
    out = []
    if mfu is not None and mfu < LOW_MFU:
        conv = "causal" if training.causal_attention_flops else "non-causal"
        out.append(f"MFU {mfu:.1%} ({conv} attention FLOPs) at {where} is below {LOW_MFU:.0%}: most of the "
                   "GPUs' peak goes unused (communication, bubbles or a tiny batch)")
    sequences = max(1, training.global_batch_tokens // training.seq_len)
    nodes = cluster.available_gpus // cluster.gpus_per_node
    if sequences < nodes:
        out.append(f"the cluster ({cluster.available_gpus:,} GPUs, {nodes:,} nodes) is far beyond the "
                   f"batch's useful data parallelism ({sequences:,} sequences per step)")
    return out
