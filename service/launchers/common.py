"""What every launcher export shares: the model values a spec may leave unstated (with the
default each export then uses, stated in its notes) and the refusal of a layout a framework
cannot run (a SpecError naming the framework's rule and its source)."""
from __future__ import annotations

from dataclasses import dataclass, field

from solver.errors import Problem, SpecError
from solver.specs import ModelSpec

# RoFormer (Su et al. 2021, eq. 15) uses base 10000; it is Megatron-LM's --rotary-base default
# and torchtitan's RoPE.Config.theta default (tests/fixtures/frameworks/*.json).
ROPE_BASE_DEFAULT = 10000.0
# Megatron-LM --norm-epsilon and torchtitan RMSNorm.Config.eps both default to 1e-5.
NORM_EPS_DEFAULT = 1e-5
# trainplan's cost model charges no dropout masks (solver.cost.options: dropout False), so every
# export turns dropout off explicitly (Megatron-LM defaults to 0.1 for both).
DROPOUT = 0.0


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
    notes.append("dropout is off (0.0): the cost model charges no dropout masks")
    return ModelValues(m.rope_base or ROPE_BASE_DEFAULT, m.norm_eps or NORM_EPS_DEFAULT, notes)


def refuse(framework: str, rules: list[tuple[str, str]]) -> None:
    """Raise SpecError when any (field, rule) applies; does nothing for an empty list."""
    if rules:
        problems = [Problem(f, r) for f, r in rules]
        raise SpecError(f"{framework} cannot run this layout as planned: "
                        + "; ".join(str(p) for p in problems), problems)
