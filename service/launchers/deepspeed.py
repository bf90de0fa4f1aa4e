"""DeepSpeed export: the JSON config and the launcher line."""
from __future__ import annotations

from typing import Any

from solver.cost.accounting import batch_plan
from solver.specs import LayoutSpec, TrainingSpec


def deepspeed_config(t: TrainingSpec, layout: LayoutSpec) -> dict[str, Any]:
    """DeepSpeed JSON config (batch and ZeRO); TP/PP/CP are set by the model code."""
    batch = batch_plan(t, layout.dp, layout.micro_batch)
    cfg: dict[str, Any] = {
        "train_batch_size": batch.sequences_per_step,
        "train_micro_batch_size_per_gpu": layout.micro_batch,
        "gradient_accumulation_steps": batch.grad_accum,
        "zero_optimization": {"stage": layout.zero_stage, "overlap_comm": True,
                              "contiguous_gradients": True},
        "bf16": {"enabled": t.precision.weight_bytes == 2},
    }
    return cfg


def deepspeed_warnings(layout: LayoutSpec) -> list[str]:
    """Known incompatibilities of the layout with DeepSpeed's engines."""
    out = []
    if layout.pp > 1 and layout.zero_stage > 1:
        out.append("DeepSpeed's pipeline engine supports ZeRO 0/1 only (runtime/pipe/engine.py); "
                   "use Megatron-LM or torchtitan for pipeline + ZeRO 2/3")
    if layout.cp > 1:
        out.append("context parallelism is not a DeepSpeed config option; the model code "
                   "(e.g. Megatron-DeepSpeed or Ulysses) must provide it")
    return out


