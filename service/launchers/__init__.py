"""Launcher exports for one layout, each checked against its framework's own options:
Megatron-LM arguments (megatron.py), torchtitan (torchtitan.py), DeepSpeed (deepspeed.py),
and the rank-to-GPU placement (placement.py).

A framework that cannot run a layout as planned refuses it with a SpecError naming its rule;
`launchers` reports such a refusal in place of that framework's block.
"""
from __future__ import annotations

from typing import Any

from service.launchers.deepspeed import deepspeed_config, deepspeed_warnings
from service.launchers.megatron import megatron_args, megatron_command, megatron_env, megatron_export
from service.launchers.placement import RANKS_LISTED_MAX, rank_placement, torchrun_args
from service.launchers.torchtitan import to_toml, torchtitan_config
from solver.errors import SpecError
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec

__all__ = ["RANKS_LISTED_MAX", "deepspeed_config", "deepspeed_warnings", "launchers", "megatron_args",
           "megatron_command", "megatron_env", "megatron_export", "rank_placement", "refusal",
           "to_toml", "torchrun_args", "torchtitan_config"]


def refusal(exc: SpecError) -> dict[str, Any]:
    """A framework's refusal of a layout, in place of its launch block."""
    return {"refused": exc.message, "problems": [p.as_dict() for p in exc.problems]}


def launchers(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec, placement: dict[str, Any],
              split: list[int] | None = None) -> dict[str, Any]:
    """Every launcher export for one layout (placement from `rank_placement`; `split` the
    layers per pipeline stage when uneven); a framework that refuses gets its refusal."""
    try:
        megatron = megatron_export(m, t, layout, torchrun_args(placement), split)
    except SpecError as exc:
        megatron = refusal(exc)
    titan = torchtitan_config(m, t, layout, split)
    titan_notes = ["torchtitan TP always shards the sequence (sequence parallelism)"]
    return {
        "megatron": megatron,
        "torchtitan": {"config": titan, "toml": to_toml(titan), "notes": titan_notes},
        "deepspeed": {"config": deepspeed_config(t, layout), "warnings": deepspeed_warnings(layout)},
    }
