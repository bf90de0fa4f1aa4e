"""What every launcher export shares: the model values a spec may leave unstated (with the
default each export then uses, stated in its notes) and the refusal of a layout a framework
cannot run (a SpecError naming the framework's rule and its source)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from solver.errors import Problem, SpecError
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec

# RoFormer (Su et al. 2021, eq. 15) uses base 10000; it is Megatron-LM's --rotary-base default
# and torchtitan's RoPE.Config.theta default (tests/fixtures/frameworks/*.json).
ROPE_BASE_DEFAULT = 10000.0
# Megatron-LM --norm-epsilon and torchtitan RMSNorm.Config.eps both default to 1e-5.
NORM_EPS_DEFAULT = 1e-5


@dataclass(frozen=True)
class ModelValues:
    """Model-defining values an export writes, and a note for each one that was defaulted."""

    rope_base: float
    norm_eps: float
    notes: list[str] = field(default_factory=list)


def model_values(m: ModelSpec) -> ModelValues:
    """The spec's rotary base and norm epsilon, or the documented defaults (noted)."""
    notes = []
    if m.position_embedding == "rope" and m.rope_base is None:
        notes.append(f"model.rope_base is not stated: the export uses the RoFormer default "
                     f"{ROPE_BASE_DEFAULT:g}; set it to the model's value (Llama 3: 500000)")
    if m.norm_eps is None:
        notes.append(f"model.norm_eps is not stated: the export uses {NORM_EPS_DEFAULT:g}")
    notes.append(f"dropout {m.dropout:g} (model.dropout) is written explicitly: Megatron-LM's own default is 0.1")
    return ModelValues(m.rope_base or ROPE_BASE_DEFAULT, m.norm_eps or NORM_EPS_DEFAULT, notes)


def refuse(framework: str, rules: list[tuple[str, str]]) -> None:
    """Raise SpecError when any (field, rule) applies; does nothing for an empty list."""
    if rules:
        problems = [Problem(f, r) for f, r in rules]
        raise SpecError(f"{framework} cannot run this layout as planned: "
                        + "; ".join(str(p) for p in problems), problems)


def _cite(cap: Any) -> str:
    src = cap.sources[0]
    return f"{src.repository} {src.path}"


def capability_rules(framework: str, t: TrainingSpec, layout: LayoutSpec,
                     split: list[int] | None) -> list[tuple[str, str]]:
    """The framework profile's capability rules (solver/data/frameworks/<name>.json, each
    cited to the framework's source) that the layout breaks, as (field, rule)."""
    from solver.frameworks import load_framework

    profile = load_framework(framework)
    caps = profile.capabilities
    out: list[tuple[str, str]] = []
    recipes = profile.fp8.recipes
    if t.compute_precision != "bf16" and t.compute_precision not in recipes.value:
        out.append(("training.compute_precision", f"{framework} runs FP8 recipes {list(recipes.value)}, "
                    f"not '{t.compute_precision}' ({_cite(recipes)})"))
    stages = (caps.zero_stages_with_pp if layout.pp > 1 else caps.zero_stages_without_pp)
    if layout.zero_stage not in stages.value:
        where = "with" if layout.pp > 1 else "without"
        out.append(("layout.zero_stage", f"{framework} runs ZeRO stages {list(stages.value)} {where} "
                    f"pipeline parallelism, not {layout.zero_stage} ({_cite(stages)})"))
    if layout.cp > 1 and layout.zero_stage == 0 and not caps.zero0_with_cp.value:
        out.append(("layout.zero_stage", f"{framework} shards parameters over the CP ranks: ZeRO-0 "
                    f"with cp > 1 is not possible ({_cite(caps.zero0_with_cp)})"))
    if layout.tp > 1 and not caps.tensor_parallel.value:
        out.append(("layout.tp", f"{framework} has no tensor parallelism ({_cite(caps.tensor_parallel)})"))
    if layout.tp > 1 and layout.zero_stage == 3 and not caps.zero3_with_tp.value:
        out.append(("layout.zero_stage", f"{framework} does not combine ZeRO-3 with tensor parallelism "
                    f"({_cite(caps.zero3_with_tp)})"))
    if layout.sequence_parallel and not caps.sequence_parallel.value:
        out.append(("layout.sequence_parallel", f"{framework} has no Megatron-style sequence "
                    f"parallelism ({_cite(caps.sequence_parallel)})"))
    kernels = caps.context_parallel_kernels
    if layout.cp > 1 and t.attention_kernel not in kernels.value:
        out.append(("layout.cp", f"{framework} runs context parallelism with attention kernels "
                    f"{list(kernels.value)}, not '{t.attention_kernel}' ({_cite(kernels)})"))
    if layout.vpp > 1 and not caps.interleaving.value:
        out.append(("layout.vpp", f"{framework} has no interleaved pipeline schedule "
                    f"({_cite(caps.interleaving)})"))
    elif layout.vpp > 1 and layout.pp < caps.interleave_min_pp.value:
        out.append(("layout.pp", f"{framework} interleaves only at pp >= {caps.interleave_min_pp.value} "
                    f"({_cite(caps.interleave_min_pp)})"))
    if layout.vpp > 1:
        out += _microbatch_rules(framework, caps.interleave_microbatches, t, layout)
    if layout.pp > 1 and layout.rank_order == "tp-cp-pp-dp" and not caps.pp_inside_dp.value:
        out.append(("layout.rank_order", f"{framework} places pipeline stages outermost (rank order "
                    f"tp-cp-dp-pp), not {layout.rank_order} ({_cite(caps.pp_inside_dp)})"))
    if split and len(set(split)) > 1 and not caps.uneven_pipeline.value:
        out.append(("layout.pipeline_layers", f"{framework} splits pipeline stages evenly only "
                    f"({_cite(caps.uneven_pipeline)})"))
    return out


def _microbatch_rules(framework: str, rule: Any, t: TrainingSpec, layout: LayoutSpec) -> list[tuple[str, str]]:
    """Micro-batches per step (M) an interleaved schedule accepts: Megatron's default group
    needs M a multiple of pp (and >= pp); torch's Interleaved1F1B needs M a multiple of its
    rounds, max(1, M // pp)."""
    from solver.cost.accounting import batch_plan

    m, pp = batch_plan(t, layout.dp, layout.micro_batch).grad_accum, layout.pp
    if rule.value == "multiple_of_pp" and (m < pp or m % pp):
        return [("layout.micro_batch", f"{framework}'s interleaved schedule needs the {m} micro-batches "
                 f"per step to be a multiple of pp ({pp}) ({_cite(rule)})")]
    rounds = max(1, m // pp)
    if rule.value == "rounds" and m % rounds:
        return [("layout.micro_batch", f"{framework}'s interleaved schedule needs the {m} micro-batches "
                 f"per step to be a multiple of its {rounds} rounds ({_cite(rule)})")]
    return []


def dense_model_rules(m: ModelSpec, framework: str = "megatron-core",
                      t: TrainingSpec | None = None) -> list[tuple[str, str]]:
    """Model parts (and model-level training options) the framework's export cannot express:
    solver.frameworks.models.model_rules, the same rules the search applies up front."""
    from solver.frameworks.models import model_rules

    return model_rules(framework, m, t)


def expert_capability_rules(framework: str, m: ModelSpec, t: TrainingSpec,
                            layout: LayoutSpec) -> list[tuple[str, str]]:
    """The framework profile's expert rules (capabilities.experts, each cited) a MoE layout
    breaks, as (field, rule); a dense model's layout with ep > 1 is LayoutSpec's own check."""
    from solver.frameworks import load_framework
    from solver.frameworks.capability import expert_violations

    if m.moe is None:
        return []
    fields = {"moe_tp_needs_sp": "layout.sequence_parallel", "moe_zero_stages": "layout.zero_stage",
              "expert_tensor_parallel": "layout.etp"}
    found = expert_violations(load_framework(framework), tp=layout.tp, pp=layout.pp, cp=layout.cp, dp=layout.dp,
                              sp=layout.sequence_parallel, zero=layout.zero_stage, ep=layout.ep,
                              etp=layout.expert_tp)
    return [(fields.get(v.rule, "layout.ep"), f"{v.reason} ({v.sources[0].repository} {v.sources[0].path})")
            for v in found]
