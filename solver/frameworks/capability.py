"""The framework capability rules: plain predicates over a few layout fields, plus the
full list of rules one layout breaks (with the framework source that imposes each).

The search applies the predicates field group by field group (solver.search.rules: the
CP-SAT tables and the exhaustive oracle share them); `estimate` reports `violations`.
Each predicate reads only its profile facts (solver/data/frameworks/<name>.json).
"""
from __future__ import annotations

from dataclasses import dataclass

from solver.frameworks.profile import FrameworkProfile, Source

PP_INSIDE_DP = "tp-cp-pp-dp"  # the rank order with PP ranks inside each DP replica


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


def order_ok(fw: FrameworkProfile, pp: int, rank_order: str) -> bool:
    """PP ranks inside a DP replica (rank order 'tp-cp-pp-dp') only where the framework places
    ranks so (Capabilities.pp_inside_dp); at pp 1 both orders are the same placement."""
    return pp == 1 or rank_order != PP_INSIDE_DP or fw.capabilities.pp_inside_dp.value


def shard_ok(fw: FrameworkProfile, tp: int, pp: int, cp: int, zero: int) -> bool:
    """The ZeRO stage is one the framework runs at this PP (and with this TP / CP)."""
    caps = fw.capabilities
    if zero not in fw.zero_stages(pp):
        return False
    if zero == 0 and cp > 1 and not caps.zero0_with_cp.value:
        return False
    return not (zero == 3 and tp > 1 and not caps.zero3_with_tp.value)


def expert_ok(fw: FrameworkProfile, *, tp: int, pp: int, cp: int, sp: bool, ep: int, etp: int) -> bool:
    """A MoE model's expert degrees at these dense degrees: EP only where the framework has it
    (and with PP / CP where it composes), SP where the framework requires it with TP, and the
    framework's ETP rule."""
    return not _expert_problems(fw, tp=tp, pp=pp, cp=cp, sp=sp, ep=ep, etp=etp)


def expert_shard_ok(fw: FrameworkProfile, *, tp: int, cp: int, dp: int, zero: int, ep: int, etp: int) -> bool:
    """A MoE model at this ZeRO stage: a stage the framework runs with experts, and EP x ETP
    folds onto the ranks the framework gives the expert group (expert_fold_ok)."""
    return zero in fw.capabilities.experts.moe_zero_stages.value and \
        expert_fold_ok(fw, expert_region_ranks(fw, tp=tp, cp=cp, dp=dp, zero=zero), zero, ep, etp)


def expert_fold_ok(fw: FrameworkProfile, ranks: int, zero: int, ep: int, etp: int) -> bool:
    """EP x ETP divides the expert region's ranks; and where the region is torchtitan's
    (tp_cp_dp_shard) and the state is replicated (ZeRO-0: dp_shard 1), EP spans it whole:
    torchtitan fully_shards routed experts with EP > 1 over efsdp = dp_shard x cp x tp / ep
    (distributed/fsdp.py apply_fsdp_to_decoder, parallel_dims.py), which ZeRO-0's replicated
    expert state (what the memory model charges) needs to be 1."""
    if ranks % (ep * etp):
        return False
    region = fw.capabilities.experts.expert_ranks.value
    return not (region == "tp_cp_dp_shard" and zero == 0 and ep > 1 and ranks != ep * etp)


def expert_region_ranks(fw: FrameworkProfile, *, tp: int, cp: int, dp: int, zero: int) -> int:
    """Ranks of one pipeline stage that EP x ETP folds onto (ExpertCapabilities.expert_ranks)."""
    region = fw.capabilities.experts.expert_ranks.value
    if region == "tp_cp_dp":
        return tp * cp * dp
    if region == "tp_cp_dp_shard":  # DDP replicas (ZeRO-0) are dp_replicate, outside EP
        return tp * cp * (dp if zero > 0 else 1)
    return dp


def expert_tp_allowed(fw: FrameworkProfile, tp: int, ep: int, etp: int) -> bool:
    """The framework's expert-TP rule (ExpertCapabilities.expert_tensor_parallel)."""
    rule = fw.capabilities.experts.expert_tensor_parallel.value
    if rule == "one_with_ep":
        return etp == (1 if ep > 1 else tp)
    return rule == "any" or etp == tp


def _expert_problems(fw: FrameworkProfile, *, tp: int, pp: int, cp: int, sp: bool, ep: int,
                     etp: int) -> list[tuple[str, str, object]]:
    """(rule, reason, cited fact) of every expert rule these degrees break."""
    ex = fw.capabilities.experts
    out: list[tuple[str, str, object]] = []
    if ep > 1 and not ex.expert_parallel.value:
        out.append(("expert_parallel", f"no expert parallelism (ep {ep})", ex.expert_parallel))
    if ep > 1 and pp > 1 and not ex.expert_with_pp.value:
        out.append(("expert_with_pp", f"ep {ep} cannot combine with pp {pp}", ex.expert_with_pp))
    if ep > 1 and cp > 1 and not ex.expert_with_cp.value:
        out.append(("expert_with_cp", f"ep {ep} cannot combine with cp {cp}", ex.expert_with_cp))
    if tp > 1 and not sp and ex.moe_tp_needs_sp.value:
        out.append(("moe_tp_needs_sp", f"expert layers with tp {tp} need sequence parallelism", ex.moe_tp_needs_sp))
    if not expert_tp_allowed(fw, tp, ep, etp):
        rule = ex.expert_tensor_parallel.value
        out.append(("expert_tensor_parallel", f"expert TP {etp} breaks the '{rule}' rule at tp {tp}, ep {ep}",
                    ex.expert_tensor_parallel))
    return out


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
               zero: int, accum: int, moe: bool = False, dp: int = 1, ep: int = 1,
               etp: int | None = None, rank_order: str = "tp-cp-dp-pp") -> list[Violation]:
    """Every capability rule of `fw` the layout breaks (empty: the framework runs it).
    moe: the model has expert layers (then dp, ep and etp, None = tp, are checked too)."""
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
    if not order_ok(fw, pp, rank_order):
        add("pp_inside_dp", f"rank order {rank_order} at pp {pp}: pipeline stages are always the outermost "
            "dimension (tp-cp-dp-pp)", caps.pp_inside_dp)
    _shard_violations(fw, tp, pp, cp, zero, add)
    if moe:
        _expert_violations(fw, tp=tp, pp=pp, cp=cp, dp=dp, sp=sp, zero=zero, ep=ep,
                           etp=tp if etp is None else etp, add=add)
    return out


def expert_violations(fw: FrameworkProfile, *, tp: int, pp: int, cp: int, dp: int, sp: bool, zero: int,
                      ep: int, etp: int) -> list[Violation]:
    """The expert rules of `fw` a MoE layout breaks (etp: the expert TP in effect)."""
    out: list[Violation] = []

    def add(rule: str, reason: str, fact) -> None:
        out.append(Violation(rule, f"{fw.name}: {reason}", fact.sources))

    _expert_violations(fw, tp=tp, pp=pp, cp=cp, dp=dp, sp=sp, zero=zero, ep=ep, etp=etp, add=add)
    return out


def _expert_violations(fw: FrameworkProfile, *, tp: int, pp: int, cp: int, dp: int, sp: bool, zero: int,
                       ep: int, etp: int, add) -> None:
    ex = fw.capabilities.experts
    for rule, reason, fact in _expert_problems(fw, tp=tp, pp=pp, cp=cp, sp=sp, ep=ep, etp=etp):
        add(rule, reason, fact)
    if zero not in ex.moe_zero_stages.value:
        add("moe_zero_stages", f"ZeRO-{zero} is not offered with expert layers "
            f"(stages {list(ex.moe_zero_stages.value)})", ex.moe_zero_stages)
    ranks = expert_region_ranks(fw, tp=tp, cp=cp, dp=dp, zero=zero)
    if ranks % (ep * etp):
        add("expert_ranks", f"ep x etp ({ep} x {etp}) must divide the {ex.expert_ranks.value} ranks "
            f"({ranks})", ex.expert_ranks)
    elif not expert_fold_ok(fw, ranks, zero, ep, etp):
        add("expert_ranks", f"with ZeRO-0 the experts' FSDP group (efsdp = {ranks} / {ep}) must be 1: "
            f"ep must span the {ranks} tp x cp ranks", ex.expert_ranks)


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
