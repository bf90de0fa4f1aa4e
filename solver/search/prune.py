"""Exact pruning of whole row groups before the cost tables are built (bound and incumbent).

A group is (tp, pp, cp, dp, sp, micro_batch, ep, etp); its rows vary vpp, recompute and ZeRO
stage.
Every layout of a group has a step time of at least (solver.cost.step.compose_step_time,
all terms >= 0, layers_on_rank(L, pp, vpp) = ceil(L / (pp vpp)) vpp >= L / pp)

    lower = (L / pp) x (m + (pp - 1) / v_max) x min over recompute of layer_s + m x head_extra_s

(layer_s = compute + TP + CP time of one layer, v_max the largest vpp of the group's rows;
for a MoE model L x layer_s becomes L x layer_s + N_moe x the MoE layer's extra time, the
busiest rank holding at least N_moe / pp of the N_moe MoE layers;
p2p, DP and optimizer terms bounded below by 0). Groups are visited by increasing bound,
raised level by level when a group comes up and re-queued (_lower_s: for a MoE model the
MoE layer's link-free floor, then its exact all-to-all; then over only the layouts that fit
memory, with their least p2p time; then their least DP + optimizer and MTP head time), so
the costlier terms are evaluated only for groups whose cheaper bound is below the cut;
before those levels a group's bound gains the least DP + optimizer time of the ZeRO stages
whose model state alone fits (solver.search.dp_floor: every fitting layout adds at least
that to its pipeline part), which for a model whose state binds the memory (DeepSeek-V3 on
2,048 H800) drops most groups before their MoE all-to-all and memory terms are evaluated; a
group none of whose layouts fits memory is dropped there (it holds no top-K layout); each
visited group's layouts are evaluated in full (the same memoized terms, the same
memory test), and once K fitting layouts are known, a group whose bound exceeds the K-th
best objective (plus a float margin) cannot hold a top-K layout and is dropped along with
all later ones, unless its bound is within the tie limit (solver.search.ties) of the best
layout seen. Within the kept groups a pipeline row is kept only when its best fitting
layout (exact, from the same evaluation) is within the K-th best objective or the tie
limit: no other row can hold a top-K or tied layout (interleaving counts of a 1,000-layer
model would otherwise all enter the tables). A group's interleaved rows are evaluated only
when one of its vpp 1 rows fits (they hold at least the same activations), and when nothing
fits anywhere the vpp 1 rows alone are kept for the explanation. With a deadline
(min_gpus_deadline), a group whose bound times the run's steps passes the deadline is
dropped, and only layouts surely within it count toward K.
With options.split_stages (and for a MoE model's first/last splits, solver.search.moe_split)
every stage is charged separately (solver.cost.step,
compose_split_step_time), and step = (m - 1/v) t_max + sum_r t_r / v >= (sum_r t_r / pp)
(m + (pp - 1) / v) with sum_r t_r >= L x layer_s + head_extra_s is the bound instead.
"""
from __future__ import annotations

import heapq
import math
from operator import itemgetter
from types import SimpleNamespace
from collections.abc import Callable

from solver.search import dp_floor, moe_split
from solver.search.cpsat import RECOMPUTE_NAMES
from solver.search.model import pipe_group
from solver.search.objective import objective_units, run_steps, wall_factor_of
from solver.search.ties import tie_slack_units
from solver.specs import LayoutSpec

# Bound levels of _lower_s.
CHEAP, EXACT_MOE, FITTING, REFINED = 0, 1, 2, 3
# The shape handed to objective_units for the step_time objective, which reads none of it.
_NO_SHAPE = SimpleNamespace()
# A pipeline row's group (model.pipe_group, as one C call: the hot loops use it) and its vpp.
_GROUP_OF = itemgetter(0, 1, 2, 3, 6, 5, 8, 9)
_VPP_OF = itemgetter(4)
# Relative float margin on the K-th best objective (summation-order differences are ~1e-15).
MARGIN = 1e-9


def prune_keys(lm, t, keys: list[tuple], accum: Callable[[int, int], int]) -> list[tuple]:
    """The pipeline keys of the groups that can hold a top-K layout (see module docstring).

    t: the memoized terms (solver.search.terms._Terms, with its usable memory limit);
    accum(dp, mb) -> accumulation.
    """
    options, training = lm.options, lm.training
    deadline = options.deadline_s if options.objective == "min_gpus_deadline" else None
    by_group: dict[tuple, list[tuple]] = {}
    for key in keys:
        by_group.setdefault(_GROUP_OF(key), []).append(key)
    steps: dict[tuple[int, int], int] = {}

    def run_steps_of(g: tuple) -> int:
        if (g[3], g[5]) not in steps:
            steps[(g[3], g[5])] = run_steps(training, LayoutSpec(dp=g[3], micro_batch=g[5]))
        return steps[(g[3], g[5])]

    factor = wall_factor_of(lm.spec, lm.cluster, training) if options.objective == "min_cost" else None

    def objective(g: tuple, step_s: float) -> float:
        if options.objective == "step_time":  # objective_units reads no layout field
            return objective_units(options, training, _NO_SHAPE, step_s)
        tp, pp, cp, dp, _sp, mb, _ep, _etp = g
        # what objective_units and wall_factor_of read
        shape = SimpleNamespace(gpus=tp * pp * cp * dp, tp=tp, pp=pp, cp=cp, dp=dp, micro_batch=mb)
        return objective_units(options, training, shape, step_s, factor(shape) if factor else 1.0)

    # (objective bound, group, level, the level's step-time bound s, dp_floor.floor_s or None)
    bounds: list[tuple] = []
    for g, lower_s in zip(by_group, _cheap_bounds(lm, t, by_group, accum), strict=True):
        if deadline is not None and run_steps_of(g) * lower_s > deadline * (1 + MARGIN):
            continue  # no layout of the group ends by the deadline
        bounds.append((objective(g, lower_s), g, CHEAP, lower_s, None))
    heapq.heapify(bounds)
    worst_k: list[float] = []  # max-heap (negated) of the K best objectives seen
    kept: set[tuple] = set()
    row_best: dict[tuple, float] = {}  # per pipeline key, its best fitting objective
    fitted: dict[tuple, tuple] = {}  # per group, _fitting of its rows (the fitting and refined levels)
    tied = math.inf  # the tie limit (solver.search.ties) of the best layout seen
    zeros: dict[tuple, tuple[int, ...]] = {}  # dp_floor.state_zeros' memo
    while bounds:
        lb, g, level, lower_s, dp_s = heapq.heappop(bounds)
        if len(worst_k) >= options.top_k and lb > max(-worst_k[0], tied) * (1 + MARGIN) + 1.0:
            break
        if level < REFINED and dp_s is None:  # first the DP + optimizer floor (dp_floor): a fitting layout
            dp_s = dp_floor.floor_s(lm, t, g, by_group[g], accum(g[3], g[5]), zeros)  # adds it to the pipeline
            if dp_s == math.inf:  # bounds below REFINED. None: no ZeRO stage's model state fits, so the
                kept.add(g)  # group holds no top-K layout
            else:
                heapq.heappush(bounds, (max(lb, objective(g, lower_s + dp_s)), g, level, lower_s, dp_s))
            continue
        if level < REFINED:  # the next bound level (_lower_s), evaluated only when the group comes up
            level = level + 1 if level or t.moe_mask else FITTING  # dense: the cheap bound is exact in MoE
            lower_s = _lower_s(lm, t, g, by_group[g], accum, level, fitted)
            if lower_s == math.inf:  # no layout of the group fits memory: it holds no top-K layout
                kept.add(g)
            else:  # REFINED holds the least DP + optimizer time of the stages that fit, >= the floor
                step_s = lower_s + dp_s if level < REFINED else lower_s
                heapq.heappush(bounds, (max(lb, objective(g, step_s)), g, level, lower_s, dp_s))
            continue
        kept.add(g)
        for key, value in _group_values(lm, t, g, by_group[g], accum):
            obj = objective(g, value)
            row_best[key] = min(obj, row_best.get(key, math.inf))
            if deadline is not None and run_steps_of(g) * value * (1 + MARGIN) > deadline:
                continue  # counted only when surely within the deadline
            # A seen layout is no better than the best, so its tie limit is no lower than the
            # best's (the limit grows with the objective; with GPUs first, another GPU count
            # is a GPU weight away): groups past it cannot hold a tied layout.
            tied = min(tied, obj + tie_slack_units(options.objective, obj, value))
            if len(worst_k) < options.top_k:
                heapq.heappush(worst_k, -obj)
            elif obj < -worst_k[0]:
                heapq.heapreplace(worst_k, -obj)
    if not row_best:  # nothing fits (_group_values: nor does any interleaved row): the groups'
        flat = [k for k in keys if pipe_group(k) in kept and k[4] == 1]  # vpp 1 rows stand for them
        return flat or [k for k in keys if pipe_group(k) in kept]
    # Row level: a pipeline row whose best fitting layout is past the K-th best objective and
    # the tie limit (or that fits with no shard row) holds no top-K or tied layout.
    cut = max(-worst_k[0], tied) * (1 + MARGIN) + 1.0 if len(worst_k) >= options.top_k else math.inf
    best = {k for k, obj in row_best.items() if obj <= cut}
    return [k for k in keys if k in best]


def keys_within(lm, t, keys: list[tuple], accum: Callable[[int, int], int], bound_s: float) -> list[tuple]:
    """The pipeline keys of the groups whose step-time lower bound (module docstring) is at
    most bound_s: every layout with a step time <= bound_s lies in them (a rank count needs
    only those; solver.search.api.layout_rank)."""
    by_group: dict[tuple, list[tuple]] = {}
    for key in keys:
        by_group.setdefault(pipe_group(key), []).append(key)
    kept = {g for g, rows in by_group.items() if _lower_s(lm, t, g, rows, accum) <= bound_s * (1 + MARGIN)}
    return [k for k in keys if pipe_group(k) in kept]


def _lower_s(lm, t, g: tuple, rows: list[tuple], accum, level: int = CHEAP,
             fitted: dict | None = None) -> float:
    """A lower bound on the step time of the group's layouts (module docstring) at one of four
    levels, each at least the one before; a group is raised a level when it reaches the front
    of the queue, so the costlier terms are evaluated only for the groups that get there.

    CHEAP (every layout): for a MoE model the MoE layer's extra is its link-free floor.
    EXACT_MOE (every layout): the MoE layer's exact extra (queries the EP links).
    FITTING (the layouts that fit memory; math.inf when none does): the bound over only the
    rows that fit with some ZeRO stage (_fitting), plus the least of their p2p times (the
    stage holds p2p_per_microbatch_s of its own vpp, >= 0; compose_step_time).
    REFINED (the layouts that fit memory): plus the least DP + optimizer time of the ZeRO
    stages that fit (every step adds one: dp_exposed_s + optimizer_s, >= 0) and the least
    head time with the multi-token-prediction modules over the fitting recompute levels
    (step.time_terms' head_extra_s = head_extra_s + mtp_s, mtp_s >= 0).
    fitted: group -> _fitting of its rows, filled and read when given (prune_keys passes one
    dict per search, the rows of a group being always the same there).
    """
    if level < FITTING:
        return _base_lower_s(lm, t, g, rows, accum, level >= EXACT_MOE)
    tp, pp, cp, dp, sp, mb, ep, etp = g
    m = accum(dp, mb)
    if t.first_last is not None and _explicit_splits(None, t, pp, rows):  # MoE first/last splits
        zeros = lm.zero_stages(tp, pp, cp, dp, ep, etp)
        split = [(r, RECOMPUTE_NAMES[r[7]]) for r in rows if t.first_last(pp, r[4])]
        flat, flat_zeros = _fitting(t, g, [r for r in rows if not t.first_last(pp, r[4])], zeros, m)
        return moe_split.fitting_lower_s(t, g, split, zeros, m, level >= REFINED,
                                         ([(r, RECOMPUTE_NAMES[r[7]]) for r in flat], flat_zeros))
    fit = fitted.get(g) if fitted is not None else None
    if fit is None:
        fit = _fitting(t, g, rows, lm.zero_stages(tp, pp, cp, dp, ep, etp), m)
        if fitted is not None:
            fitted[g] = fit
    rows, zeros = fit
    if not rows:
        return math.inf
    base = _base_lower_s(lm, t, g, rows, accum, True)
    if _explicit_splits(lm.options, t, pp, rows):  # explicit splits: the stage bound above, plus DP + optimizer
        return base + (min(t.dp_opt(tp, cp, dp, pp, z, m, ep, etp) for z in zeros) if level >= REFINED else 0.0)
    v_max = max(r[4] for r in rows)
    lower = base + min(t.p2p(tp, cp, dp, pp, v, mb) for v in {r[4] for r in rows}) * (m + (pp - 1) / v_max)
    if level < REFINED:
        return lower
    spb = bool(sp)
    head = t.head(tp, cp, spb, mb, pp)
    mtp = min(t.head_mtp(tp, cp, spb, RECOMPUTE_NAMES[rc], mb, ep, etp, dp, pp) for rc in {r[7] for r in rows}) \
        if lm.spec.mtp_layers else head
    return lower + m * (mtp - head) + min(t.dp_opt(tp, cp, dp, pp, z, m, ep, etp) for z in zeros)


def _fitting(t, g: tuple, rows: list[tuple], zeros: tuple[int, ...], m: int) -> tuple[list[tuple], set[int]]:
    """(rows, ZeRO stages) of the group's layouts that fit memory: the pairs whose
    compose_memory total (TermRows' fit test: the row's activations with the shard's model
    state, logits, buffers and overhead, terms._Terms.pair_total) is within the usable
    memory. Only without explicit splits (the split, hence the memory, then depends on the
    time terms): with them every row and stage is returned.

    Without splits the total never decreases as the activations grow (terms.term_rows:
    monotone_fit), so a stage fits some row iff it fits the row of least activations, and
    an interleaved row, which holds at least the activations of its recompute level's vpp 1
    row (_group_values), cannot fit when that row fits no stage; and a row with no more
    activations than one that fits, fits (no fewer than one that fits no stage: fits none)."""
    tp, pp, cp, dp, sp, mb, ep, etp = g
    if t.split_uneven is not None or _explicit_splits(None, t, pp, rows):
        return rows, set(zeros)
    rests = [(t.rest(tp, pp, cp, dp, sp, z, mb, ep, etp), z) for z in zeros]
    fit_rows, acts = [], []
    skip: set[int] = set()  # recompute levels whose vpp 1 row fits no stage
    fit_hi, miss_lo = -math.inf, math.inf  # the most activations seen to fit, the least seen to fit no stage
    for key in sorted(rows, key=lambda k: k[4] > 1):  # vpp 1 rows first (stable)
        if key[4] > 1 and key[7] in skip:
            continue
        act = t.per_layer_act(tp, cp, bool(sp), RECOMPUTE_NAMES[key[7]], mb, pp, key[4], m, ep, etp)
        if act <= fit_hi:  # (monotone) the stage that fits fit_hi fits act
            fits = True
        elif act >= miss_lo:  # no stage fits miss_lo, so none fits act
            fits = False
        else:
            fits = any(t.memory_total(rest, act) <= t.usable for rest, _z in rests)
            fit_hi, miss_lo = (max(fit_hi, act), miss_lo) if fits else (fit_hi, min(miss_lo, act))
        if fits:
            fit_rows.append(key)
            acts.append(act)
        elif key[4] == 1:
            skip.add(key[7])
    if not fit_rows:
        return [], set()
    least = min(acts)
    return fit_rows, {z for rest, z in rests if t.memory_total(rest, least) <= t.usable}


def _base_lower_s(lm, t, g: tuple, rows: list[tuple], accum, exact_moe: bool) -> float:
    """The cheap bound of _lower_s (module docstring), or with exact_moe the MoE layer's exact
    extra in place of its floor."""
    tp, pp, cp, dp, sp, mb, _ep, _etp = g
    exact = exact_moe and t.moe_layers > 0
    if not (t.first_last is not None or lm.options.split_stages):  # no explicit splits (_explicit_splits)
        return _plain_lower_s(lm.spec.layers, t, g, rows, accum(dp, mb), exact)
    m = accum(dp, mb)
    vpps = {r[4] for r in rows}
    v_max = max(vpps)
    head = t.head(tp, cp, bool(sp), mb, pp)  # without the MTP modules' time (>= 0): still a lower bound
    terms = [_rc_terms(t, g, rc, exact) for rc in {r[7] for r in rows}]
    n_moe, layers = t.moe_layers, lm.spec.layers
    if t.first_last is not None and any(t.first_last(pp, v) for v in vpps):  # MoE first/last splits
        vs = (min(vpps), v_max)
        return min(moe_split.lower_step_s(_rank_lower_s(layers, n_moe, pp, layer_s, moe_s) * pp,
                                          layers=layers, n_moe=n_moe, pp=pp, m=m, vpps=vs,
                                          layer_s=layer_s, moe_s=moe_s, head_s=head)
                   for layer_s, moe_s in terms)
    work = min(_rank_lower_s(layers, n_moe, pp, layer_s, moe_s) for layer_s, moe_s in terms)
    if _explicit_splits(lm.options, t, pp, rows):  # explicit splits: step >= (sum_r t_r / pp)(m + (pp-1)/v)
        return (work * pp + head) / pp * (m + (pp - 1) / v_max)
    return work * (m + (pp - 1) / v_max) + m * head


def _plain_lower_s(layers: int, t, g: tuple, rows: list[tuple], m: int, exact: bool) -> float:
    """_base_lower_s of a group without explicit splits, m micro-batches per step: the least
    _rank_lower_s over the recompute levels of its rows (each level once) x (m + (pp - 1) /
    v_max) + m x head_extra_s. Every group's cheap bound is computed (_cheap_bounds): this is
    the search's hottest loop, kept to the term lookups and the arithmetic.

    With exact (a MoE model), the levels are taken by increasing floor work and a level's
    exact MoE extra is queried only while its floor work is below the least exact work so far:
    the floor is at most the exact extra (_rc_terms) and _rank_lower_s never decreases as the
    MoE extra grows (in floats too: each branch is monotone and they meet in order at 0), so a
    level skipped cannot lower the minimum."""
    tp, pp, cp, dp, sp, mb, ep, etp = g
    spb, n_moe = bool(sp), t.moe_layers
    floors = []
    for rc in {r[7] for r in rows}:
        rcn = RECOMPUTE_NAMES[rc]
        layer = t.layer(tp, cp, spb, rcn, mb)
        moe_s = t.moe_compute(tp, cp, rcn, mb, ep, etp)[0] - 0.5 * layer[1] if n_moe else 0.0
        floors.append((_rank_lower_s(layers, n_moe, pp, sum(layer), moe_s), rc, layer))
    v_max = max(map(_VPP_OF, rows))
    if exact and n_moe:
        work = math.inf
        for floor, rc, layer in sorted(floors, key=lambda f: f[0]):
            if floor >= work:
                break
            moe_s = sum(t.moe(tp, cp, spb, RECOMPUTE_NAMES[rc], mb, ep, etp, dp, pp))
            work = min(work, _rank_lower_s(layers, n_moe, pp, sum(layer), moe_s))
    else:
        work = min(f[0] for f in floors)
    return work * (m + (pp - 1) / v_max) + m * t.head(tp, cp, spb, mb, pp)


def _cheap_bounds(lm, t, by_group: dict[tuple, list[tuple]], accum) -> list[float]:
    """_lower_s at CHEAP of every group, in by_group's order."""
    if t.first_last is not None or lm.options.split_stages:
        return [_lower_s(lm, t, g, rows, accum) for g, rows in by_group.items()]
    layers = lm.spec.layers
    return [_plain_lower_s(layers, t, g, rows, accum(g[3], g[5]), False) for g, rows in by_group.items()]


def _rc_terms(t, g: tuple, rc: int, exact: bool) -> tuple[float, float]:
    """(one layer's time, a lower bound on a MoE layer's extra) at recompute level rc (an
    index of RECOMPUTE_NAMES). The floor (exact False) is the MoE extra's compute less the
    dense FFN's TP collectives a MoE layer may drop (moe_comm.moe_layer_comm: all-to-all and
    expert-TP time >= 0, the TP change >= -0.5 x layer_tp_comm_s), so no link is queried;
    exact: the MoE extra itself. _plain_lower_s computes the same inline."""
    tp, pp, cp, dp, sp, mb, ep, etp = g
    rcn = RECOMPUTE_NAMES[rc]
    layer = t.layer(tp, cp, bool(sp), rcn, mb)
    if not t.moe_layers:
        return sum(layer), 0.0
    if exact:
        return sum(layer), sum(t.moe(tp, cp, bool(sp), rcn, mb, ep, etp, dp, pp))
    return sum(layer), t.moe_compute(tp, cp, rcn, mb, ep, etp)[0] - 0.5 * layer[1]


def _explicit_splits(lm_options, t, pp: int, rows: list[tuple]) -> bool:
    """Rows of the group carry explicit splits: options.split_stages (dense), or a MoE row whose
    layers do not divide over its pp x vpp chunks (solver.search.moe_split). The split bound is
    also a lower bound for the group's busiest-rank rows: (sum_r t_r / pp)(m + (pp - 1)/v) has
    head_extra_s x (m + (pp - 1)/v) / pp <= m x head_extra_s of it."""
    return bool(lm_options is not None and lm_options.split_stages and t.first_last is None) or (
        t.first_last is not None and any(t.first_last(pp, v) for v in {r[4] for r in rows}))


def _rank_lower_s(layers: int, n_moe: int, pp: int, layer_s: float, moe_s: float) -> float:
    """A lower bound on the busiest rank's layer time per micro-batch, n x layer_s + k x moe_s
    (step.compose_step_time: n = layers_on_rank >= L / pp, k = busiest_moe_layers, between
    N_moe / pp and min(n, N_moe)). moe_s (the MoE layer's extra) may be negative: a MoE block
    can cost less than the dense FFN it replaces; then the least of the piecewise-linear
    n x layer_s + min(n, N) x moe_s over n >= L / pp is taken (at L / pp or at N)."""
    n0 = layers / pp
    if moe_s >= 0:
        return n0 * layer_s + (n_moe / pp) * moe_s
    if n0 >= n_moe:
        return n0 * layer_s + n_moe * moe_s
    return (n_moe if layer_s + moe_s < 0 else n0) * (layer_s + moe_s)


def _group_values(lm, t, g: tuple, rows: list[tuple], accum) -> list[tuple[tuple, float]]:
    """(pipeline key, step time s) of every fitting layout of the group (pipeline part +
    DP/optimizer part)."""
    tp, pp, cp, dp, sp, mb, ep, etp = g
    m = accum(dp, mb)
    out: list[tuple[tuple, float]] = []
    shards = [((tp, pp, cp, dp, sp, z, mb, ep, etp), t.dp_opt(tp, cp, dp, pp, z, m, ep, etp))
              for z in lm.zero_stages(tp, pp, cp, dp, ep, etp)]

    def values(key: tuple) -> None:
        vpp, rcn = key[4], RECOMPUTE_NAMES[key[7]]
        for shard, dp_s in shards:
            if not moe_split.may_fit(t, shard, vpp, rcn, m):  # a MoE split surely past the memory
                continue
            _, pipe_s, total = t.choice(shard, vpp, rcn, m)  # the split the search assigns the pair
            if total <= t.usable:
                out.append((key, pipe_s + dp_s))

    flat = [k for k in rows if k[4] == 1]
    for key in flat:
        values(key)
    # An interleaved row holds at least the activations of its vpp = 1 row (same recompute
    # level and shard: memory.in_flight_microbatches, on the same L/pp layers; no other memory
    # term reads vpp), so when no vpp = 1 row fits, none of them does either.
    skip = set() if out else {k[7] for k in flat}
    for key in rows:
        if key[4] > 1 and key[7] not in skip:
            values(key)
    return out

