"""Uneven pipeline splits of mixture-of-experts models in the search: the first and last
stages' layer counts around equal middle stages, the form Megatron-LM's
--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers write.

Megatron-LM d98e8a64 (megatron/core/transformer/transformer_config.py L2294-2355, "Uneven PP";
megatron/training/arguments.py L985-997 skips the num_layers % pp check when either flag is
set): the first and the last stage each hold >= 1 layer; the other pp - 2 stages hold the
remaining layers in equal parts, and there are remaining layers exactly when there are middle
stages. With interleaving (vpp > 1) the same form over the pp x vpp model chunks (the first
chunk, the last, equal chunks between; chunk j on rank j mod pp) is written as
--pipeline-model-parallel-layout, which lists every virtual stage's layers
(pipeline_parallel_layer_layout.py; service.launchers.megatron.layout_string), since the
first/last flags need counts divisible by vpp.

Which frameworks (FIRST_LAST_FRAMEWORKS): Megatron-Core and torchtitan. torchtitan (pytorch/
torchtitan b5bcd76c) takes the modules of every model chunk, parallelism.module_fqns_per_model_part
(torchtitan/config/configs.py L187-195), as given (distributed/pipeline_parallel.py pipeline_llm
L88-93: generated only when None) and builds stage s from list s on rank s mod pp under 1F1B and
Interleaved1F1B (_get_pp_rank_to_stage_indices_mapping L532-569, "loop" style), the chunk
placement moe_stages charges; the export (service.launchers.torchtitan.module_fqns) writes the
split's chunks, tok_embeddings with the first and norm + lm_head with the last, where
moe_stages charges the embedding and the head. The modules moe_stages places as Megatron does
and torchtitan would not never run there at pp > 1: multi-token prediction (MTPDecoder raises)
and tied embeddings (Decoder.Config.update_from_config raises), solver.frameworks.models.
DeepSpeed keeps the even rule: its PipelineModule places layers by a method, 'uniform',
'parameters' (balanced parameter counts) or 'type:<layer>', never by given counts
(deepspeed/runtime/pipe/module.py _partition_layers L396-420, edaa7221), so a chosen split
cannot be written.

When: options.moe_splits (on by default in plans, solver.search.api.plan_options) or
split_stages. The search's bounds on split rows (prune's FITTING and REFINED levels,
fitting_lower_s; may_fit in the evaluation of a group) hold for every split of the family:
the memory floor of solver.cost.moe_stages.mean_floor_parts (per group, then per pair), then
the busiest rank of the pair's own split under RankLines, then the exact step time of the
pairs that may fit.

The split a layout gets (first_last_split): the one with the fastest slowest stage under the
cost model's per-stage times (solver.cost.step.compose_split_step_time: each stage's dense and
MoE layers, the embedding on the first, LM head + loss + MTP on the last; the step is
m x t_max + (sum_r t_r - t_max) / v and sum_r t_r does not depend on the split), then the least
activation level max_r n_r x min(pp - r, m) (1F1B: rank r keeps min(pp - r, m) micro-batches;
interleaved: max_r n_r), then the fewest first-chunk layers, then the middle count nearest the
mean. It reads only the time terms, so the exhaustive evaluator
(solver.search.exhaustive.with_search_split) and the CP-SAT tables (solver.search.terms) give a
layout the same split; its memory is the busiest rank's under solver.cost.moe_stages (via
step.split_memory_terms, the estimate's own function).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
import math
from functools import lru_cache
from itertools import accumulate

import numpy as np

from solver.cost.moe_comm import slot_comm_s
from solver.cost.moe_layer import moe_layer_mask
from solver.cost.moe_stages import (
    floor_activation_bytes, floor_rest_bytes, floor_state_bytes, fp8_copy_parts, layer_parts, mean_floor_parts,
    rank_activation_bytes, rank_buffers, rank_flight, rank_memory_lines, state_bytes_per_param,
)
from solver.cost.state import framework_state_bytes
from solver.cost.step import TimeTerms, compose_memory, split_memory_terms, stage_extras_s
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec

# Frameworks whose export writes a first/last split for a MoE model (service.launchers.megatron
# _pipeline_args: --decoder-first/last-pipeline-num-layers, Megatron-LM d98e8a64
# transformer_config.py L2294-2355; service.launchers.torchtitan module_fqns:
# module_fqns_per_model_part, pytorch/torchtitan b5bcd76c torchtitan/config/configs.py L187-195).
FIRST_LAST_FRAMEWORKS = frozenset({"megatron-core", "torchtitan"})
# Stage times are compared on this grid (seconds) so that float summation-order differences
# between the evaluator's and the tables' time terms (~1e-16 s) cannot pick different splits.
TIME_GRID_S = 1e-12
# Relative margin of may_fit's memory bound: RankLines sums moe_stage_terms' terms in another
# order (float rounding ~1e-15 relative), so a pair past it surely does not fit.
MEMORY_MARGIN = 1e-9


def applies(model: ModelSpec, training: TrainingSpec | None, allow_uneven: bool, pp: int, vpp: int) -> bool:
    """A MoE layout whose layers do not divide over its pp x vpp chunks gets a first/last split
    (pp > 1, uneven stages allowed, a framework in FIRST_LAST_FRAMEWORKS, >= 1 layer a chunk)."""
    chunks = pp * vpp
    return (model.moe is not None and training is not None and allow_uneven and pp > 1
            and model.layers % chunks != 0 and model.layers >= chunks
            and training.framework in FIRST_LAST_FRAMEWORKS)


def allowed(options) -> bool:
    """The search options ask for MoE first/last splits: options.moe_splits (on by default in
    plans, solver.search.api.plan_options) or split_stages, with allow_uneven_pipeline."""
    return bool((options.moe_splits or options.split_stages) and options.allow_uneven_pipeline)


def rule(model: ModelSpec, training: TrainingSpec, allow_uneven: bool) -> Callable[[int, int], bool] | None:
    """applies() for one problem as a function of (pp, vpp), memoized (the search asks it for every
    row); None where it never applies (a dense model, splits not asked for, another framework),
    so the default search skips every check."""
    if model.moe is None or not allow_uneven or training.framework not in FIRST_LAST_FRAMEWORKS:
        return None
    return lru_cache(maxsize=None)(lambda pp, vpp: applies(model, training, allow_uneven, pp, vpp))


def candidates(layers: int, chunks: int):
    """Every (first, middle, last) chunk layer count of the form (module docstring): first,
    last >= 1, middle x (chunks - 2) = layers - first - last, middle >= 1."""
    if chunks == 2:
        for f in range(1, layers):
            yield f, 0, layers - f
        return
    for c in range(1, (layers - 2) // (chunks - 2) + 1):
        rest = layers - c * (chunks - 2)
        for f in range(1, rest):
            yield f, c, rest - f


def first_last_split(terms: TimeTerms, *, layers: int, pp: int, vpp: int, grad_accum: int) -> tuple[int, ...]:
    """The split a MoE layout gets (module docstring), as pp x vpp chunk layer counts (chunk j
    on rank j mod pp): every candidate's rank times at once (numpy, elementwise in
    compose_split_step_time's order, so each t_r is the float it computes)."""
    fam = family(layers, pp, vpp, terms.moe_mask or (False,) * layers)
    layer_s = terms.layer_compute_s + terms.layer_tp_comm_s + terms.layer_cp_comm_s
    extra = np.array(stage_extras_s(terms, pp))
    moe_comm = slot_comm_s(terms.moe_comm_s, terms.moe_a2a_unpaired_s, terms.moe_overlap, pp, vpp, grad_accum)
    moe_s = terms.moe_compute_s + moe_comm + terms.moe_tp_comm_s
    # as compose_split_step_time's t_r: n_r x layer_s + p2p + extra_r + (k_r x moe_s if k_r else 0)
    t = fam.n * layer_s + terms.p2p_per_microbatch_s + extra + np.where(fam.k != 0, fam.k * moe_s, 0.0)
    # layers held per micro-batch in flight: 1F1B min(pp - r, m); interleaved, the same on every rank
    flight = np.array([min(pp - r, grad_accum) if vpp == 1 else 1 for r in range(pp)])
    level = (fam.n * flight).max(axis=1)
    best = np.lexsort((fam.first, level, np.rint(t.max(axis=1) / TIME_GRID_S)))[0]
    return fam.sizes[best]


@dataclass(frozen=True)
class Family:
    """The first/last splits of `layers` over pp x vpp chunks (candidates()): chunk sizes, and per
    candidate and rank its layers n, MoE layers k (chunk j on rank j mod pp) and first chunk."""

    sizes: tuple[tuple[int, ...], ...]
    n: np.ndarray
    k: np.ndarray
    first: np.ndarray
    ranks: dict  # sizes -> (layers per rank, MoE layers per rank)


@lru_cache(maxsize=256)
def family(layers: int, pp: int, vpp: int, mask: tuple[bool, ...]) -> Family:
    """The Family of a model's layers (mask: which are MoE) over pp x vpp chunks."""
    chunks, mean = pp * vpp, layers / (pp * vpp)
    # exact ties (same slowest stage, level and first chunk) go to the middle count nearest the mean
    order = sorted(candidates(layers, chunks), key=lambda x: (abs(x[1] - mean) if chunks > 2 else 0, x))
    sizes = tuple((f, *([c] * (chunks - 2)), last) for f, c, last in order)
    before = [0, *accumulate(int(b) for b in mask)]  # MoE layers among the first i layers
    ns, ks = [], []
    for split in sizes:
        n, k, start = [0] * pp, [0] * pp, 0
        for j, size in enumerate(split):
            n[j % pp] += size
            k[j % pp] += before[start + size] - before[start]
            start += size
        ns.append(n)
        ks.append(k)
    return Family(sizes, np.array(ns), np.array(ks), np.array([s[0] for s in sizes]),
                  {s: (n, k) for s, n, k in zip(sizes, ns, ks, strict=True)})


def lower_step_s(body_s: float, *, layers: int, n_moe: int, pp: int, m: int, vpps: tuple[int, int], layer_s: float,
                 moe_s: float, head_s: float) -> float:
    """A lower bound on the pipeline part of the step time of a group's layouts (DP and optimizer
    left out, solver.search.prune), split or not, with vpp in [vpps[0], vpps[1]].

    body_s <= L x layer_s + N x moe_s (the layers' time summed over the ranks), moe_s <= a MoE
    layer's extra. Split: step = (m - 1/v) t_max + S / v with S = sum_r t_r >= body_s + head_s,
    and t_max >= S_body / pp; the rank with the most layers holds n >= ceil(L / pp) of them, at
    least n - (L - N) MoE, so t_max >= n x layer_s + max(0, n - (L - N)) x moe_s when both
    terms are >= 0. The bound is non-decreasing in t_max and S (m - 1/v >= 0) and linear in 1/v,
    so its least over the vpp range is at an end. A busiest-rank row of the group (even chunks,
    step.compose_step_time) is (m + (pp - 1)/v) x stage + m x head with stage >= the same t_max
    bound, and (pp - 1) t_max + m v head_s >= S - t_max: the bound holds for it too."""
    t_max = body_s / pp
    if layer_s >= 0 and moe_s >= 0:
        n = -(-layers // pp)
        t_max = max(t_max, n * layer_s + max(0, n - (layers - n_moe)) * moe_s)
    total = body_s + head_s
    return min((m - 1 / v) * t_max + total / v for v in vpps)


def split_total_bytes(ctx, layout: LayoutSpec, grad_accum: int) -> float:
    """Memory per GPU of the busiest rank of layout.pipeline_layers (step.split_memory_terms,
    solver.cost.moe_stages; the estimate's own composition)."""
    return compose_memory(split_memory_terms(ctx, layout, grad_accum))["total"]


def dense_uneven(lm) -> bool | None:
    """solver.search.terms._Terms' split_uneven: a dense model's split_stages choice (None: the
    busiest-rank model, always for a MoE model, whose splits are first/last ones)."""
    o = lm.options
    return o.allow_uneven_pipeline if o.split_stages and lm.spec.moe is None else None


def rule_for(lm) -> Callable[[int, int], bool] | None:
    """rule() for a LayoutModel's problem and options."""
    return rule(lm.spec, lm.training, allowed(lm.options))


def row_split(t, key: tuple, m: int) -> tuple[int, ...] | None:
    """first_last_split of a table row (tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp) from the memoized
    time terms t (solver.search.terms._Terms; t.first_last: rule_for), m micro-batches; None where
    no first/last split applies (the busiest-rank model). Memoized on t (the pruning's bounds and
    the tables ask for the same rows)."""
    memo = t.__dict__.setdefault("_first_last_splits", {})
    if (key, m) not in memo:
        pp, vpp = key[1], key[4]
        split = None
        if t.first_last is not None and t.first_last(pp, vpp):
            split = first_last_split(t.time_terms(*key), layers=t.ctx.model.layers, pp=pp, vpp=vpp, grad_accum=m)
        memo[(key, m)] = split
    return memo[(key, m)]


def row_act(ctx, split: tuple[int, ...], m: int, *key) -> float:
    """The largest rank's activation bytes of a MoE table row with its split (solver.cost.moe_stages):
    the row's memory column, used only to find the lightest layout when nothing fits."""
    tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp = key
    ns, ks = family(ctx.model.layers, pp, vpp, moe_layer_mask(ctx.model)).ranks[split]
    return max(rank_activation_bytes(ctx, moe_layout(tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp, 0, None), m, ns, ks))


def _memo(t, name: str) -> dict:
    """A memo dict kept on the problem's terms t (solver.search.terms._Terms)."""
    return t.__dict__.setdefault(name, {})


def _state(t, tp: int, pp: int, dp: int, cp: int, zero: int, ep: int, etp: int) -> tuple[float, float]:
    """solver.cost.moe_stages.state_bytes_per_param, its per-parameter bytes memoized on the
    (pp, ZeRO stage, sharding ranks) they read."""
    memo = _memo(t, "_split_state")
    if (tp, pp, dp, cp, zero, ep, etp) not in memo:
        per = _memo(t, "_split_whole")

        def whole(d: int) -> float:
            if (pp, zero, d) not in per:
                per[(pp, zero, d)] = framework_state_bytes(t.ctx.training, 1.0, pp=pp, dp=d, cp=1, zero=zero).total
            return per[(pp, zero, d)]
        memo[(tp, pp, dp, cp, zero, ep, etp)] = state_bytes_per_param(t.ctx, tp=tp, pp=pp, dp=dp, cp=cp, zero=zero,
                                                                       ep=ep, etp=etp, whole=whole)
    return memo[(tp, pp, dp, cp, zero, ep, etp)]


def _acts(t, tp: int, pp: int, cp: int, vpp: int, mb: int, sp, rc, ep: int, etp: int, m: int) -> tuple:
    """solver.cost.moe_stages.activation_parts of a row, from its layer parts and MTP activations
    memoized on the fields they read."""
    memo = _memo(t, "_split_layer")
    if (tp, cp, sp, rc, mb, ep, etp) not in memo:
        memo[(tp, cp, sp, rc, mb, ep, etp)] = (
            *layer_parts(t.ctx, tp=tp, cp=cp, sp=bool(sp), recompute=rc, micro_batch=mb, ep=ep, etp=etp),
            t.mtp_act(tp, cp, bool(sp), rc, mb, ep, etp))
    flights = _memo(t, "_split_flight")
    if (pp, vpp, m) not in flights:
        flights[(pp, vpp, m)] = rank_flight(pp, vpp, m)
    bufs = _memo(t, "_split_buffers")
    if (tp, cp, sp, mb, pp, vpp, m) not in bufs:
        bufs[(tp, cp, sp, mb, pp, vpp, m)] = rank_buffers(t.ctx, tp=tp, cp=cp, sp=bool(sp), micro_batch=mb, pp=pp,
                                                          vpp=vpp, grad_accum=m, flight=flights[(pp, vpp, m)])
    return (*memo[(tp, cp, sp, rc, mb, ep, etp)], flights[(pp, vpp, m)], bufs[(tp, cp, sp, mb, pp, vpp, m)])


def _copies(t, tp: int, ep: int, etp: int) -> tuple:
    memo = _memo(t, "_split_copies")
    if (tp, ep, etp) not in memo:
        memo[(tp, ep, etp)] = fp8_copy_parts(t.ctx, tp=tp, ep=ep, etp=etp)
    return memo[(tp, ep, etp)]


def floor_parts(t, shard: tuple, vpp: int, rc: str, m: int) -> tuple[float, float, float]:
    """solver.cost.moe_stages.mean_floor_parts of the layout of a MoE shard row (tp, pp, cp, dp,
    sp, zero, mb, ep, etp) with pipeline fields vpp and rc: a lower bound on the busiest rank's
    memory under any split, as (state, activations, rest) bytes, each memoized on the fields
    it reads."""
    tp, pp, cp, dp, sp, zero, mb, ep, etp = shard
    counts = _memo(t, "_split_counts")
    if pp not in counts:
        counts[pp] = mean_floor_parts(t.ctx, pp=pp, n_moe=t.moe_layers)
    states = _memo(t, "_split_floor_state")
    if (tp, pp, dp, cp, zero, ep, etp) not in states:
        states[(tp, pp, dp, cp, zero, ep, etp)] = floor_state_bytes(counts[pp],
                                                                    _state(t, tp, pp, dp, cp, zero, ep, etp))
    acts = _memo(t, "_split_floor_act")
    akey = (tp, pp, cp, vpp, mb, sp, rc, ep, etp, m)
    if akey not in acts:
        acts[akey] = floor_activation_bytes(counts[pp], _acts(t, *akey))
    rests = _memo(t, "_split_floor_rest")
    if (tp, pp, ep, etp) not in rests:
        rests[(tp, pp, ep, etp)] = floor_rest_bytes(t.ctx, counts[pp], _copies(t, tp, ep, etp))
    return states[(tp, pp, dp, cp, zero, ep, etp)], acts[akey], rests[(tp, pp, ep, etp)]


def lines(t, shard: tuple, vpp: int, rc: str, m: int):
    """solver.cost.moe_stages.RankLines of the layout of a MoE shard row with pipeline fields vpp
    and rc, memoized on t."""
    memo = _memo(t, "_split_lines")
    if (shard, vpp, rc, m) not in memo:
        tp, pp, cp, dp, sp, zero, mb, ep, etp = shard
        rest = t.rest(*shard)
        memo[(shard, vpp, rc, m)] = rank_memory_lines(
            t.ctx, tp=tp, pp=pp, ep=ep, etp=etp, zero=zero, shards=dp * cp,
            state=_state(t, tp, pp, dp, cp, zero, ep, etp),
            acts=_acts(t, tp, pp, cp, vpp, mb, sp, rc, ep, etp, m), logits=rest[3], comm_buffers=rest[4])
    return memo[(shard, vpp, rc, m)]


def may_fit(t, shard: tuple, vpp: int, rc: str, m: int) -> bool:
    """False only when the layout of a shard row (tp, pp, cp, dp, sp, zero, mb, ep, etp) with
    pipeline fields vpp, rc and its first/last split surely does not fit memory: a lower bound
    on its busiest rank exceeds the usable memory by more than MEMORY_MARGIN. First the bound
    over every split (floor_parts: no split needed), then the busiest rank of its own split under
    RankLines (the estimate's terms regrouped). True for rows without a first/last split (the
    exact test decides)."""
    tp, pp, cp, dp, sp, _zero, mb, ep, etp = shard
    if t.first_last is None or not t.first_last(pp, vpp):
        return True
    limit = t.usable * (1 + MEMORY_MARGIN)
    if sum(floor_parts(t, shard, vpp, rc, m)) > limit:
        return False
    split = row_split(t, (tp, pp, cp, dp, vpp, mb, bool(sp), rc, ep, etp), m)
    ns, ks = family(t.ctx.model.layers, pp, vpp, t.moe_mask).ranks[split]
    return lines(t, shard, vpp, rc, m).busiest_bytes(ns, ks) <= limit


def group_may_fit(t, g: tuple, rows: Sequence[tuple[tuple, str]], zeros, m: int) -> bool:
    """False only when no layout of a group's first/last split rows (rows: (pipeline key,
    recompute name)) can fit memory. floor_parts is additive, so the group's least state part
    (over its ZeRO stages) plus its least activation part plus the rest bounds every pair
    below; the activation part of a recompute level is least at vpp 1 (the first rank's
    micro-batches in flight min(pp, m) and the last rank's 1 are at most the interleaved
    memory.in_flight_microbatches, >= min(pp, m) >= 1), so that row stands for its level."""
    tp, pp, cp, dp, sp, mb, ep, etp = g
    z0 = zeros[0]
    state, _, rest = floor_parts(t, (tp, pp, cp, dp, sp, z0, mb, ep, etp), 1, rows[0][1], m)
    least_state = min([state] + [floor_parts(t, (tp, pp, cp, dp, sp, z, mb, ep, etp), 1, rows[0][1], m)[0]
                                 for z in zeros[1:]])
    least_act = min(floor_parts(t, (tp, pp, cp, dp, sp, z0, mb, ep, etp), 1, rc, m)[1] for rc in {rc for _, rc in rows})
    return least_state + least_act + rest <= t.usable * (1 + MEMORY_MARGIN)


def row_pipe_s(t, key: tuple, m: int) -> float:
    """The pipeline seconds of a table row (tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp) with its
    first/last split (terms._Terms.pipe_s, the value its row holds), memoized without the
    row's activation column."""
    memo = _memo(t, "_split_pipe")
    if (key, m) not in memo:
        memo[(key, m)] = t.pipe_s(*key, m, row_split(t, key, m))
    return memo[(key, m)]


def fitting_lower_s(t, g: tuple, rows: Sequence[tuple[tuple, str]], zeros, m: int, dp_opt: bool,
                    flat: tuple[Sequence[tuple[tuple, str]], set] = ((), set())) -> float:
    """The least step time (pipeline part, plus DP + optimizer when dp_opt) over the layouts of
    a group (tp, pp, cp, dp, sp, mb, ep, etp) whose first/last split rows (rows: (pipeline key,
    recompute name)) may fit memory (group_may_fit, then may_fit per pair), and over its rows
    without a split that fit (flat: those rows and the ZeRO stages that fit them, from the
    tables' exact test), math.inf when none: a lower bound on every fitting layout of the
    group (solver.search.prune's FITTING and REFINED levels). Each pair's value is the one the
    evaluation of the group computes (terms._Terms.row's pipeline seconds, dp_opt), so the
    bound is the group's best layout up to the memory test."""
    tp, pp, cp, dp, sp, mb, ep, etp = g
    best = math.inf
    if rows and group_may_fit(t, g, rows, zeros, m):
        for key, rc in rows:
            vpp, pipe_s = key[4], None
            for z in zeros:
                if not may_fit(t, (tp, pp, cp, dp, sp, z, mb, ep, etp), vpp, rc, m):
                    continue
                if pipe_s is None:
                    pipe_s = row_pipe_s(t, (tp, pp, cp, dp, vpp, mb, bool(sp), rc, ep, etp), m)
                best = min(best, pipe_s + (t.dp_opt(tp, cp, dp, pp, z, m, ep, etp) if dp_opt else 0.0))
    flat_rows, flat_zeros = flat
    if flat_rows:
        dp_s = min(t.dp_opt(tp, cp, dp, pp, z, m, ep, etp) for z in flat_zeros) if dp_opt else 0.0
        best = min(best, min(t.row(tp, pp, cp, dp, key[4], mb, bool(sp), rc, ep, etp, m)[1]
                             for key, rc in flat_rows) + dp_s)
    return best


def pair_bytes(ctx, shard: tuple, vpp: int, rc: str, m: int, split: tuple[int, ...]) -> float:
    """Memory per GPU of a (MoE split row, shard row) pair: the busiest rank's
    (step.split_memory_terms, the estimate's own composition)."""
    tp, pp, cp, dp, sp, zero, mb, ep, etp = shard
    return split_total_bytes(ctx, moe_layout(tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp, zero, split), m)


def moe_layout(tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp, zero, split) -> LayoutSpec:
    """The LayoutSpec of a MoE table row (solver.search.terms) with its explicit split, for
    solver.cost.moe_stages (rc: the recompute level's name)."""
    return LayoutSpec(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, sequence_parallel=bool(sp), zero_stage=zero,
                      micro_batch=mb, recompute=rc, ep=ep, etp=etp, pipeline_layers=split)
