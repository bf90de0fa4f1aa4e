"""DeepSpeed export of a mixture-of-experts model: the arguments each MoE layer of the model
code passes to DeepSpeed's native MoE layer, and what the optimizer needs.

DeepSpeed sets experts in the model code, not in its JSON config: every MoE feed-forward is
`deepspeed.moe.layer.MoE(hidden_size, expert, num_experts, ep_size, k, capacity_factor,
eval_capacity_factor, min_capacity, use_residual, noisy_gate_policy, drop_tokens, use_rts,
use_tutel, enable_expert_tensor_parallelism, top2_2nd_expert_sampling)` (deepspeedai/DeepSpeed
edaa7221267243c7be7fb49c5d5f5c4fb97b4641 deepspeed/moe/layer.py; the names are in
tests/fixtures/frameworks/deepspeed.json, extracted by benchmarks/extract_framework_options.py).
Rules at that commit:
- num_experts % ep_size == 0 (layer.py assert); the expert-parallel groups are carved out of
  the data-parallel ranks (utils/groups.py _create_expert_and_data_parallel: the profile's
  expert_ranks "dp");
- drop_tokens=False is "equivalent to infinite capacity" (layer.py docstring; sharded_moe.py
  sets the capacity to the busiest expert's count): trainplan's dropless default;
  with training.moe_capacity_factor the capacity is capacity_factor x k x tokens / experts
  (sharded_moe.py _capacity, top2gating / topkgating);
- top2_2nd_expert_sampling defaults to True, which adds Gumbel noise to the second choice
  (top2gating): the export turns it off so top-2 routing is the plain top-2 the cost model
  assumes; top-k gates are renormalised over the chosen experts for k >= 2;
- experts are split over the TP group with enable_expert_tensor_parallelism (layer.py:
  groups._create_expert_data_and_model_parallel): expert TP equals TP (the profile's
  expert_tensor_parallel "equals_tp");
- ZeRO-3 is refused with native MoE layers (runtime/engine.py _validate_zero3_moe_compatibility
  L1872-1893; the profile's moe_zero_stages);
- expert parameters need their own optimizer groups: the engine makes them itself for a
  config-defined optimizer (engine.py _configure_optimizer -> configure_moe_param_groups); a
  client optimizer must be built over deepspeed.moe.utils.
  split_params_into_different_moe_groups_for_optimizer(param_groups) (moe/utils.py).
The gate is softmax only, has no bias and there are no shared experts: models needing them
are refused up front (solver.frameworks.models).
"""
from __future__ import annotations

from itertools import groupby
from typing import Any

from solver.model_parts import MoESpec
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec



def _experts(m: ModelSpec) -> MoESpec:
    """The model's MoE part (callers export MoE models only)."""
    if m.moe is None:
        raise ValueError(f"{m.name} has no experts")
    return m.moe

def moe_layer_arguments(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec) -> dict[str, Any]:
    """Keyword arguments of deepspeed.moe.layer.MoE for every MoE layer (the expert module,
    a SwiGLU FFN of width expert_ffn_hidden, is the model code's)."""
    e, cf = _experts(m), t.moe_capacity_factor
    return {"hidden_size": m.hidden, "num_experts": e.experts, "ep_size": layout.ep,
            "k": e.experts_per_token,
            "capacity_factor": 1.0 if cf is None else cf, "eval_capacity_factor": 1.0 if cf is None else cf,
            "drop_tokens": cf is not None, "use_residual": False,
            "enable_expert_tensor_parallelism": layout.tp > 1, "top2_2nd_expert_sampling": False}


def moe_layer_ranges(m: ModelSpec) -> list[list[int]]:
    """The MoE layers as [first, last] ranges of 0-based layer indices."""
    mask = [_experts(m).is_moe_layer(i) for i in range(m.layers)]
    out, i = [], 0
    for on, run in groupby(mask):
        n = len(list(run))
        if on:
            out.append([i, i + n - 1])
        i += n
    return out


def deepspeed_moe(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec) -> dict[str, Any]:
    """The `moe` block of the DeepSpeed export (None-free; a MoE model only)."""
    return {"layer": "deepspeed.moe.layer.MoE", "arguments": moe_layer_arguments(m, t, layout),
            "layers": moe_layer_ranges(m), "expert_ffn_hidden": _experts(m).expert_ffn_hidden,
            "optimizer_groups": "deepspeed.moe.utils.split_params_into_different_moe_groups_for_optimizer"}


def moe_notes(m: ModelSpec, layout: LayoutSpec) -> list[str]:
    """What the model code does with the `moe` block."""
    return [f"each MoE layer's FFN (layers {moe_layer_ranges(m)}) is MoE(expert=<SwiGLU FFN of width "
            f"{_experts(m).expert_ffn_hidden}>, **moe.arguments); forward returns (output, l_aux, exp_counts): add "
            "the model's auxiliary-loss coefficient x l_aux to the loss (DeepSpeed's gate always computes it)",
            "a client optimizer must be built over split_params_into_different_moe_groups_for_optimizer("
            "param_groups) (deepspeed/moe/utils.py); an optimizer defined in the config gets the MoE groups "
            "from the engine",
            f"the expert groups need data-parallel ranks divisible by ep_size {layout.ep} "
            "(deepspeed/utils/groups.py)"]
