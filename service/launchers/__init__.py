"""Launcher exports for one layout, each checked against its framework's own options and
rules: Megatron-LM arguments (megatron.py), a torchtitan configuration module
(torchtitan.py), a DeepSpeed config and launcher line (deepspeed.py), and the rank-to-GPU
placement (placement.py).

A framework that cannot run a layout as planned refuses it with a SpecError naming the rule
(its profile's capability, solver/data/frameworks/<name>.json, or its own check);
`launchers` reports such a refusal in place of that framework's block.
"""
from __future__ import annotations

from typing import Any

from service.launchers.common import capability_rules, dense_model_rules, expert_capability_rules, refuse
from service.launchers.deepspeed import deepspeed_config, deepspeed_export, deepspeed_rules
from service.launchers.megatron_moe import moe_rules
from service.launchers.megatron import (
    megatron_args, megatron_command, megatron_env, megatron_export, megatron_rules,
)
from service.launchers.placement import RANKS_LISTED_MAX, rank_placement, torchrun_args
from service.launchers.torchtitan import (
    torchtitan_export, torchtitan_rules, torchtitan_settings,
)
from solver.errors import SpecError
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec

__all__ = ["BLOCKS", "RANKS_LISTED_MAX", "deepspeed_config", "export_layout", "framework_rules", "launchers",
           "megatron_args", "megatron_command", "megatron_env", "plan_launch", "rank_placement", "refusal",
           "torchrun_args", "torchtitan_settings"]

# launch-block key of each framework in `launchers`
BLOCKS = {"megatron-core": "megatron", "torchtitan": "torchtitan", "deepspeed": "deepspeed"}


def layout_split(layout: LayoutSpec, split: list[int] | None) -> list[int] | None:
    """The layers per pipeline stage or chunk an export writes: the layout's own
    pipeline_layers when it has them (per model chunk under interleaving), else `split`. A
    search result's `pipeline_split` is per pipeline rank (solver.search.api._split): for an
    uneven interleaved layout it cannot give the pp x vpp chunks Megatron's
    --pipeline-model-parallel-layout lists, so the layout's chunks come first."""
    return list(layout.pipeline_layers) if layout.pipeline_layers else split


def framework_rules(framework: str, m: ModelSpec, t: TrainingSpec, layout: LayoutSpec,
                    split: list[int] | None) -> list[tuple[str, str]]:
    """Every rule of `framework` the layout breaks: its profile's capabilities, then the
    framework's own checks on the exported configuration. Empty when it runs."""
    split = layout_split(layout, split)
    out = dense_model_rules(m, framework, t) + capability_rules(framework, t, layout, split)
    out += expert_capability_rules(framework, m, t, layout)
    if framework == "megatron-core":
        out += megatron_rules(m, t, layout, split) + moe_rules(m, t, layout)
    elif framework == "torchtitan":
        out += torchtitan_rules(m, layout)
    else:
        out += deepspeed_rules(layout)
    return list(dict.fromkeys(out))


def export_layout(framework: str, m: ModelSpec, t: TrainingSpec, layout: LayoutSpec,
                  placement: dict[str, Any], split: list[int] | None = None) -> dict[str, Any]:
    """The launch block of one framework. Raises: SpecError naming every rule it breaks."""
    split = layout_split(layout, split)
    refuse(framework, framework_rules(framework, m, t, layout, split))
    run = torchrun_args(placement)
    if framework == "megatron-core":
        return megatron_export(m, t, layout, run, split)
    if framework == "torchtitan":
        return torchtitan_export(m, t, layout, run, split)
    return deepspeed_export(m, t, layout, placement)


def refusal(exc: SpecError) -> dict[str, Any]:
    """A framework's refusal of a layout, in place of its launch block."""
    return {"refused": exc.message, "problems": [p.as_dict() for p in exc.problems]}


def launchers(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec, placement: dict[str, Any],
              split: list[int] | None = None) -> dict[str, Any]:
    """Every framework's launch block for one layout (placement from `rank_placement`;
    `split` the layers per pipeline stage or chunk when uneven); a refusal where a
    framework cannot run it."""
    out: dict[str, Any] = {}
    for framework, key in BLOCKS.items():
        try:
            out[key] = export_layout(framework, m, t, layout, placement, split)
        except SpecError as exc:
            out[key] = refusal(exc)
    return out


def plan_launch(m: ModelSpec, cluster: Any, t: TrainingSpec, entry: dict[str, Any]) -> dict[str, Any]:
    """The launch of a plan's recommended layout (`entry`: its layouts[0], LayoutSpec fields with
    pipeline_layers and pipeline_split) in the framework training.framework names: that
    framework's block (export_layout) or its refusal naming the rule, and the placement. What
    `trainplan plan` and POST /v1/plans return as `launch`, so the layout ranked first is the
    one launched (benchmarks/audit_plan.py checks it)."""
    from solver.plan import layout_fields

    layout = LayoutSpec.model_validate(layout_fields(entry), strict=False)
    placement = rank_placement(cluster, layout)
    try:
        block = export_layout(t.framework, m, t, layout, placement, entry.get("pipeline_split"))
    except SpecError as exc:
        block = refusal(exc)
    return {"framework": t.framework, "rank": entry.get("rank", 1), **block, "placement": placement}
