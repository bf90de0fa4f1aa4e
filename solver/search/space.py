"""The candidate space: per-field domains and the full enumeration (for the oracle).

A layout is the LayoutSpec fields (tp, pp, vpp, cp, dp, zero_stage, micro_batch,
recompute, sequence_parallel, and for a MoE model ep and etp); accumulation follows from (dp, micro_batch). Domains are
filtered field by field with the rules in solver.search.rules; `enumerate_layouts` applies
every rule to whole layouts and is deliberately a plain nested loop.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal
from collections.abc import Iterable, Iterator

from solver.search import rules
from solver.search.options import SearchOptions
from solver.specs import LayoutSpec, ModelSpec, Recompute, TrainingSpec
from topology.spec import ClusterSpec


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class Domains:
    """Values each layout field may take before cross-field rules."""

    tp: tuple[int, ...]
    pp: tuple[int, ...]
    vpp: tuple[int, ...]
    cp: tuple[int, ...]
    dp: tuple[int, ...]
    micro_batch: tuple[int, ...]
    zero_stage: tuple[Literal[0, 1, 2, 3], ...]
    recompute: tuple[Recompute, ...]
    sequence_parallel: tuple[bool, ...] = (False, True)
    ep: tuple[int, ...] = (1,)
    etp: tuple[int, ...] = (rules.DENSE_ETP,)  # a dense model: LayoutSpec.etp None


def _degree_values(cluster: ClusterSpec, options: SearchOptions, upper: int) -> list[int]:
    """Degrees up to `upper`: divisors of the GPU count, or any count when GPUs may vary."""
    g = rules.gpu_target(cluster, options)
    if options.gpus_may_vary:
        return list(range(1, min(upper, g) + 1))
    return [d for d in divisors(g) if d <= upper]


def _dp_values(cluster: ClusterSpec, training: TrainingSpec, options: SearchOptions,
               raw: bool) -> list[int]:
    """DP degrees for which some micro-batch meets the batch rule (all degrees when raw)."""
    if raw:
        return _degree_values(cluster, options, rules.gpu_target(cluster, options))
    cands = _degree_values(cluster, options, rules.micro_batch_limit(training, options, 1))
    return [d for d in cands if micro_batches(training, options, d)]


def micro_batches(training: TrainingSpec, options: SearchOptions, dp: int) -> list[int]:
    """Micro-batches (ascending) that meet the batch rule with `dp` replicas: every one up to
    options.max_micro_batch, or, by default, every one the batch rule admits."""
    top = rules.micro_batch_limit(training, options, dp)
    if options.max_micro_batch is not None:
        top = min(top, options.max_micro_batch)
    return [m for m in _batch_candidates(training, options, dp, top) if rules.batch_ok(training, options, dp, m)]


def _batch_candidates(training: TrainingSpec, options: SearchOptions, dp: int, top: int) -> Iterable[int]:
    """Micro-batches up to `top` (ascending) that may meet the batch rule: a superset of those
    rules.batch_ok accepts, found without testing every one up to `top`.

    batch_ok holds when m x a (a: the accumulation) lies in [lo, hi] = global batch tokens x
    (1 -+ tolerance) / (dp x seq_len). Since m x a <= hi, m or a is at most sqrt(hi): the
    candidates are every m up to sqrt(hi) and, for each a up to sqrt(hi), the m of
    [lo / a, hi / a] (each widened by one for float rounding). When they are not fewer than
    `top`, every m up to `top`."""
    per_pass = dp * training.seq_len
    hi = training.global_batch_tokens * (1 + options.batch_tolerance) / per_pass
    lo = training.global_batch_tokens * (1 - options.batch_tolerance) / per_pass
    root = math.isqrt(int(hi)) + 2
    found = set(range(1, min(root, top) + 1))
    for a in range(1, root + 1):
        found.update(range(max(1, math.ceil(lo / a) - 1), min(top, math.floor(hi / a) + 1) + 1))
        if len(found) >= top:
            return range(1, top + 1)
    return sorted(found)


def vpp_limit(model: ModelSpec, options: SearchOptions) -> int:
    """Largest virtual-stage count to consider: options.max_vpp, or by default L // 2 (vpp > 1
    needs pp >= 2 and pp x vpp chunks of >= 1 layer, rules.pipeline_ok), so no count the
    pipeline rule admits is left out."""
    return options.max_vpp if options.max_vpp is not None else max(1, model.layers // 2)


def domains(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
            options: SearchOptions, raw: bool = False) -> Domains:
    """Per-field domains (each value is valid for its own field's rules).

    raw=True keeps values that break their own family's rule (for explanations: the
    family's constraint, not the domain, then rejects them and can appear in a core).
    """
    g = rules.gpu_target(cluster, options)
    raw = raw and not options.gpus_may_vary  # raw ranges of a varying GPU count are too large
    tps = [t for t in _degree_values(cluster, options, g if raw else min(model.heads, g))
           if raw or (rules.tensor_ok(model, cluster, options, t)
                      and any(rules.framework_tensor_ok(training, t, s) for s in (False, True)))]
    pps = _degree_values(cluster, options, g if raw else model.layers)
    vpps = [v for v in range(1, vpp_limit(model, options) + 1)
            if raw or any(rules.pipeline_ok(model, options, p, v, training)
                          and rules.framework_pipeline_ok(training, p, v) for p in pps)]
    cps = [c for c in _degree_values(cluster, options, options.max_cp)
           if raw or (rules.context_ok(training, c) and rules.framework_context_ok(training, c, model))]
    dps = _dp_values(cluster, training, options, raw)
    experts = expert_domains(model, cluster, options)
    if raw:
        mb_top = options.max_micro_batch or rules.micro_batch_limit(training, options, 1)
        mbs = list(range(1, mb_top + 1))
    else:
        mbs = sorted({m for d in dps for m in micro_batches(training, options, d)})
    return Domains(
        tp=tuple(tps), pp=tuple(pps), vpp=tuple(vpps), cp=tuple(cps), dp=tuple(dps),
        micro_batch=tuple(mbs),
        zero_stage=tuple(sorted(options.zero_stages)), recompute=tuple(options.recompute),
        ep=experts[0], etp=experts[1])


def expert_domains(model: ModelSpec, cluster: ClusterSpec,
                   options: SearchOptions) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ep, etp) domains: for a MoE model the divisors of the routed experts (ep) and the
    TP-like degrees that split the expert FFN width (etp); for a dense model ep 1 and etp
    rules.DENSE_ETP (unset). options.max_ep caps EP."""
    if model.moe is None:
        return (1,), (rules.DENSE_ETP,)
    g = rules.gpu_target(cluster, options)
    top = g if options.allow_tp_outside_node else min(g, cluster.gpus_per_node)
    eps = [e for e in divisors(model.moe.experts) if e <= min(g, options.max_ep or g)]
    etps = [e for e in range(1, top + 1) if model.moe.expert_ffn_hidden % e == 0
            and (options.allow_tp_outside_node or cluster.gpus_per_node % e == 0)]
    return tuple(eps), tuple(etps)


def expert_pairs(model: ModelSpec, cluster: ClusterSpec, options: SearchOptions, d: Domains,
                 tp: int, cp: int, dp: int) -> list[tuple[int, int]]:
    """(ep, etp) pairs the structural expert rule admits at these degrees."""
    return [(e, x) for e in d.ep for x in d.etp if rules.expert_ok(model, cluster, options, tp, cp, dp, e, x)]


def degrees_ok(cluster: ClusterSpec, options: SearchOptions, tp: int, pp: int, cp: int, dp: int) -> bool:
    """The GPU-count rule over the four degrees."""
    return rules.gpus_ok(cluster, options, tp * pp * cp * dp)


def enumerate_layouts(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                      options: SearchOptions) -> Iterator[LayoutSpec]:
    """Every layout that passes every structural and framework rule (memory is the cost
    model's call)."""
    d = domains(model, cluster, training, options)
    for tp in d.tp:
        for pp in d.pp:
            for cp in d.cp:
                for dp in d.dp:
                    if degrees_ok(cluster, options, tp, pp, cp, dp):
                        for ep, etp in expert_pairs(model, cluster, options, d, tp, cp, dp):
                            yield from _inner(model, training, options, d, tp, pp, cp, dp, ep, etp)


def _inner(model, training, options, d: Domains, tp: int, pp: int, cp: int, dp: int, ep: int, etp: int):
    for vpp in d.vpp:
        if not (rules.pipeline_ok(model, options, pp, vpp, training)
                and rules.framework_pipeline_ok(training, pp, vpp)):
            continue
        for mb in d.micro_batch:
            if not rules.batch_ok(training, options, dp, mb):
                continue
            if not rules.interleave_batch_ok(pp, vpp, rules.accumulation(training, dp, mb), training):
                continue
            for sp in d.sequence_parallel:
                if not (rules.sequence_parallel_ok(tp, sp) and rules.framework_tensor_ok(training, tp, sp)
                        and rules.framework_expert_ok(training, tp, pp, cp, sp, ep, etp)):
                    continue
                for zero in d.zero_stage:
                    if not (rules.framework_shard_ok(training, tp, pp, cp, zero)
                            and rules.framework_expert_shard_ok(training, tp, cp, dp, zero, ep, etp)):
                        continue
                    for rec in d.recompute:
                        if not rules.moe_overlap_ok(training, pp, vpp, ep, etp, rec):
                            continue
                        yield LayoutSpec(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, sequence_parallel=sp,
                                         zero_stage=zero, micro_batch=mb, recompute=rec, ep=ep,
                                         etp=None if etp == rules.DENSE_ETP else etp)
