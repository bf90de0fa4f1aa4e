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

Which frameworks: Megatron-Core only (FIRST_LAST_FRAMEWORKS). torchtitan and DeepSpeed keep
the even rule for MoE models: the per-stage MoE memory (solver.cost.moe_stages) places the
embedding, head and multi-token-prediction modules as Megatron's gpt_model.py does, and their
MoE exports were not checked for uneven stages.

The split a layout gets (first_last_split): the one with the fastest slowest stage under the
cost model's per-stage times (solver.cost.step.compose_split_step_time: each stage's dense and
MoE layers, the embedding on the first, LM head + loss + MTP on the last; the step is
m x t_max + (sum_r t_r - t_max) / v and sum_r t_r does not depend on the split), then the least
activation level max_r n_r x min(pp - r, m) (1F1B: rank r keeps min(pp - r, m) micro-batches;
interleaved: max_r n_r), then the fewest first-chunk layers. It reads only the time terms, so the exhaustive evaluator
(solver.search.exhaustive.with_search_split) and the CP-SAT tables (solver.search.terms) give a
layout the same split; its memory is the busiest rank's under solver.cost.moe_stages (via
step.split_memory_terms, the estimate's own function).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from itertools import accumulate

from solver.cost.step import TimeTerms, compose_memory, split_memory_terms, stage_extras_s
from solver.cost.moe_comm import slot_comm_s
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec

# Frameworks whose export writes a first/last split for a MoE model (service.launchers.megatron
# _pipeline_args: --decoder-first/last-pipeline-num-layers; Megatron-LM d98e8a64
# transformer_config.py L2294-2355).
FIRST_LAST_FRAMEWORKS = frozenset({"megatron-core"})
# Stage times are compared on this grid (seconds) so that float summation-order differences
# between the evaluator's and the tables' time terms (~1e-16 s) cannot pick different splits.
TIME_GRID_S = 1e-12


def applies(model: ModelSpec, training: TrainingSpec | None, allow_uneven: bool, pp: int, vpp: int) -> bool:
    """A MoE layout whose layers do not divide over its pp x vpp chunks gets a first/last split
    (pp > 1, uneven stages allowed, a framework in FIRST_LAST_FRAMEWORKS, >= 1 layer a chunk)."""
    chunks = pp * vpp
    return (model.moe is not None and training is not None and allow_uneven and pp > 1
            and model.layers % chunks != 0 and model.layers >= chunks
            and training.framework in FIRST_LAST_FRAMEWORKS)


def allowed(options) -> bool:
    """The search options ask for MoE first/last splits: options.split_stages (opt-in: the search
    has no cheap memory bound for split rows yet, so groups that cannot fit are evaluated in full,
    README) with allow_uneven_pipeline."""
    return bool(options.split_stages and options.allow_uneven_pipeline)


def rule(model: ModelSpec, training: TrainingSpec, allow_uneven: bool) -> Callable[[int, int], bool] | None:
    """applies() for one problem as a function of (pp, vpp); None where it never applies (a dense
    model, splits not asked for, another framework), so the default search skips every check."""
    if model.moe is None or not allow_uneven or training.framework not in FIRST_LAST_FRAMEWORKS:
        return None
    return lambda pp, vpp: applies(model, training, allow_uneven, pp, vpp)


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
    on rank j mod pp)."""
    layer_s = terms.layer_compute_s + terms.layer_tp_comm_s + terms.layer_cp_comm_s
    extra = stage_extras_s(terms, pp)
    moe_comm = slot_comm_s(terms.moe_comm_s, terms.moe_a2a_unpaired_s, terms.moe_overlap, pp, vpp, grad_accum)
    moe_s = terms.moe_compute_s + moe_comm + terms.moe_tp_comm_s
    mask = terms.moe_mask or (False,) * layers
    before = [0, *accumulate(int(b) for b in mask)]  # MoE layers among the first i layers
    chunks = pp * vpp
    # layers held per micro-batch in flight: 1F1B min(pp - r, m); interleaved, the same on every rank
    flight = [min(pp - r, grad_accum) if vpp == 1 else 1 for r in range(pp)]
    # Each layer adds at least `least` to its rank's time (when > 0, candidates whose busiest rank
    # must be slower than the best found are skipped: they cannot be chosen; ranks_floor_s).
    least = min([layer_s] + ([layer_s + moe_s] if before[-1] else []))
    best, best_key = None, None
    for f, c, last in _ordered(layers, chunks):
        if best_key is not None and least > 0:
            floor = _ranks_floor(f, c, last, pp, vpp) * least + terms.p2p_per_microbatch_s
            if round(floor / TIME_GRID_S) > best_key[0] + 1:
                continue
        sizes = [f, *([c] * (chunks - 2)), last]
        n, k, start = [0] * pp, [0] * pp, 0
        for j, size in enumerate(sizes):
            n[j % pp] += size
            k[j % pp] += before[start + size] - before[start]
            start += size
        # as compose_split_step_time's t_r
        t = max(n_r * layer_s + terms.p2p_per_microbatch_s + e + (k_r * moe_s if k_r else 0.0)
                for n_r, k_r, e in zip(n, k, extra, strict=True))
        key = (round(t / TIME_GRID_S), max(a * b for a, b in zip(n, flight, strict=True)), f)
        if best_key is None or key < best_key:
            best, best_key = tuple(sizes), key
    assert best is not None  # layers >= chunks (applies) leaves at least one candidate
    return best


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


@lru_cache(maxsize=256)
def _ordered(layers: int, chunks: int) -> tuple[tuple[int, int, int], ...]:
    """candidates(), the middle count nearest the mean chunk first (the fastest splits lie there)."""
    mean = layers / chunks
    return tuple(sorted(candidates(layers, chunks), key=lambda x: (abs(x[1] - mean) if chunks > 2 else 0, x)))


def _ranks_floor(f: int, c: int, last: int, pp: int, vpp: int) -> int:
    """Layers on the rank holding the most (chunk j on rank j mod pp)."""
    middle = vpp * c if pp > 2 else 0
    return max(middle, f + (vpp - 1) * c, last + (vpp - 1) * c)


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
    no first/last split applies (the busiest-rank model)."""
    pp, vpp = key[1], key[4]
    if t.first_last is None or not t.first_last(pp, vpp):
        return None
    return first_last_split(t.time_terms(*key), layers=t.ctx.model.layers, pp=pp, vpp=vpp, grad_accum=m)


def row_act(ctx, split: tuple[int, ...], m: int, *key) -> float:
    """The largest rank's activation bytes of a MoE table row with its split (solver.cost.moe_stages):
    the row's memory column, used only to find the lightest layout when nothing fits."""
    from solver.cost.moe_stages import moe_stage_terms
    tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp = key
    lo = moe_layout(tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp, 0, split)
    return max(x.activations for x in moe_stage_terms(ctx, lo, m, logits=0.0, comm_buffers=0.0))


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
