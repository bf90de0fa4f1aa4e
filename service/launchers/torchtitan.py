"""torchtitan export."""
from __future__ import annotations

from typing import Any

from solver.cost.accounting import batch_plan
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec


def _split_points(split: list[int]) -> list[str]:
    """torchtitan split points: the first layer of every stage after the first ('layers.k')."""
    points, first = [], 0
    for layers in split[:-1]:
        first += layers
        points.append(f"layers.{first}")
    return points


def torchtitan_config(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec,
                      split: list[int] | None = None) -> dict[str, dict[str, Any]]:
    """torchtitan job-config sections for the layout.

    ZeRO 0 -> DDP (data_parallel_replicate_degree = dp); ZeRO 3 -> FSDP2 sharding
    (data_parallel_shard_degree = dp). torchtitan has no ZeRO-1/2 as such: the nearest is
    FSDP2 without resharding after forward (weights stay gathered through backward), noted
    in the result. torchtitan's TP always shards the sequence (sequence parallelism).
    """
    batch = batch_plan(t, layout.dp, layout.micro_batch)
    local = layout.micro_batch * (batch.grad_accum if layout.pp > 1 else 1)
    par: dict[str, Any] = {
        "data_parallel_replicate_degree": layout.dp if layout.zero_stage == 0 else 1,
        "data_parallel_shard_degree": 1 if layout.zero_stage == 0 else layout.dp,
        "tensor_parallel_degree": layout.tp,
        "pipeline_parallel_degree": layout.pp,
        "context_parallel_degree": layout.cp,
    }
    if layout.zero_stage in (1, 2):
        par["fsdp_reshard_after_forward"] = "never"
    if layout.pp > 1:
        stages = layout.pp * layout.vpp
        par["pipeline_parallel_schedule"] = "Interleaved1F1B" if layout.vpp > 1 else "1F1B"
        par["pipeline_parallel_microbatch_size"] = layout.micro_batch
        if split and len(split) == stages and len(set(split)) > 1:
            par["pipeline_parallel_split_points"] = _split_points(split)
        elif m.layers % stages == 0:
            par["pipeline_parallel_layers_per_stage"] = m.layers // stages
    return {
        "training": {"local_batch_size": local, "global_batch_size": batch.sequences_per_step,
                     "seq_len": t.seq_len,
                     "mixed_precision_param": "bfloat16" if t.precision.weight_bytes == 2 else "float32"},
        "parallelism": par,
        "activation_checkpoint": {"mode": layout.recompute},
    }


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def to_toml(sections: dict[str, dict[str, Any]]) -> str:
    """TOML text of flat sections (values: bool, int, float, str, lists of those)."""
    out: list[str] = []
    for name, body in sections.items():
        out.append(f"[{name}]")
        out += [f"{key} = {_toml_value(val)}" for key, val in body.items()]
        out.append("")
    return "\n".join(out)


