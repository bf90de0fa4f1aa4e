"""The framework capability rules: plain predicates over a few layout fields, plus the
full list of rules one layout breaks (with the framework source that imposes each).

The search applies the predicates field group by field group (solver.search.rules: the
CP-SAT tables and the exhaustive oracle share them); `estimate` reports `violations`.
Each predicate reads only its profile facts (solver/data/frameworks/<name>.json).
"""
from __future__ import annotations

from dataclasses import dataclass

from solver.frameworks.profile import FrameworkProfile, Source


def tensor_ok(fw: FrameworkProfile, tp: int, sp: bool) -> bool:
    """TP only where the framework has it; Megatron-style SP only where it has that."""
    caps = fw.capabilities
    return (tp == 1 or caps.tensor_parallel.value) and (not sp or caps.sequence_parallel.value)


def context_ok(fw: FrameworkProfile, kernel: str, cp: int) -> bool:
    """CP > 1 only with an attention kernel the framework's CP runs (Megatron: TE fused)."""
    return cp == 1 or kernel in fw.capabilities.context_parallel_kernels.value


def interleave_ok(fw: FrameworkProfile, pp: int, vpp: int) -> bool:
    """Virtual stages only with an interleaved schedule, at pp >= its smallest PP."""
    caps = fw.capabilities
    return vpp == 1 or (caps.interleaving.value and pp >= caps.interleave_min_pp.value)


def interleave_batch_ok(fw: FrameworkProfile, pp: int, vpp: int, accum: int) -> bool:
    """Micro-batches per step of an interleaved schedule: a multiple of pp (Megatron-LM
    schedules.py, default group size) or of max(1, accum // pp) rounds (PyTorch
    ScheduleInterleaved1F1B)."""
    if vpp == 1:
        return True
    if fw.capabilities.interleave_microbatches.value == "multiple_of_pp":
        return accum % pp == 0
    return accum % max(1, accum // pp) == 0


def shard_ok(fw: FrameworkProfile, tp: int, pp: int, cp: int, zero: int) -> bool:
    """The ZeRO stage is one the framework runs at this PP (and with this TP / CP)."""
    caps = fw.capabilities
    if zero not in fw.zero_stages(pp):
        return False
    if zero == 0 and cp > 1 and not caps.zero0_with_cp.value:
        return False
    return not (zero == 3 and tp > 1 and not caps.zero3_with_tp.value)


@dataclass(frozen=True)
class Violation:
    """One capability rule a layout breaks."""

    rule: str
    reason: str
    sources: tuple[Source, ...]

    def as_dict(self) -> dict:
        return {"rule": self.rule, "reason": self.reason,
                "sources": [s.model_dump() for s in self.sources]}


def violations(fw: FrameworkProfile, *, kernel: str, tp: int, pp: int, cp: int, vpp: int, sp: bool,
               zero: int, accum: int) -> list[Violation]:
    """Every capability rule of `fw` the layout breaks (empty: the framework runs it)."""
    caps, name, out = fw.capabilities, fw.name, []

    def add(rule: str, reason: str, fact) -> None:
        out.append(Violation(rule, f"{name}: {reason}", fact.sources))

    if tp > 1 and not caps.tensor_parallel.value:
        add("tensor_parallel", f"no tensor parallelism (tp {tp})", caps.tensor_parallel)
    if sp and not caps.sequence_parallel.value:
        add("sequence_parallel", "no Megatron-style sequence parallelism", caps.sequence_parallel)
    if not context_ok(fw, kernel, cp):
        add("context_parallel", f"cp {cp} needs attention kernel in "
            f"{list(caps.context_parallel_kernels.value) or 'none (no CP)'}, run uses '{kernel}'",
            caps.context_parallel_kernels)
    if vpp > 1 and not caps.interleaving.value:
        add("interleaving", f"no interleaved schedule (vpp {vpp})", caps.interleaving)
    elif vpp > 1 and pp < caps.interleave_min_pp.value:
        add("interleave_min_pp", f"interleaving needs pp >= {caps.interleave_min_pp.value}",
            caps.interleave_min_pp)
    if not interleave_batch_ok(fw, pp, vpp, accum):
        add("interleave_microbatches", f"{accum} micro-batches do not meet the "
            f"{caps.interleave_microbatches.value} rule at pp {pp}", caps.interleave_microbatches)
    _shard_violations(fw, tp, pp, cp, zero, add)
    return out


def _shard_violations(fw: FrameworkProfile, tp: int, pp: int, cp: int, zero: int, add) -> None:
    caps = fw.capabilities
    if zero not in fw.zero_stages(pp):
        fact = caps.zero_stages_with_pp if pp > 1 else caps.zero_stages_without_pp
        where = f"with pp {pp}" if pp > 1 else "without pipeline parallelism"
        add("zero_stage", f"ZeRO-{zero} is not offered {where} (stages {list(fact.value)})", fact)
    elif zero == 0 and cp > 1 and not caps.zero0_with_cp.value:
        add("zero0_with_cp", f"replicated state (ZeRO-0) cannot combine with cp {cp}", caps.zero0_with_cp)
    elif zero == 3 and tp > 1 and not caps.zero3_with_tp.value:
        add("zero3_with_tp", f"ZeRO-3 cannot combine with tp {tp}", caps.zero3_with_tp)
