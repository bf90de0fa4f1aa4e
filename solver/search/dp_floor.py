"""A lower bound on the DP + optimizer seconds of a row group's layouts that fit memory, which
solver.search.prune adds to a group's pipeline bound before its costlier levels are evaluated.

Units: seconds (s), bytes per GPU.

A layout's step time is its pipeline part plus dp_exposed_s + optimizer_s at its ZeRO stage
(solver.cost.step.compose_step_time adds them; the tables' shard row holds them:
solver.search.terms._Terms.dp_opt, the same value the evaluation adds to the pipeline part).
Without explicit splits a layout fits when step_memory.total_bytes(weights, gradients,
optimizer, activations, logits, comm buffers, overhead) <= the usable memory
(terms._Terms.memory_total of the shard's memory_rest and the row's activations), every term
>= 0 bytes. The same sum with the activations, logits and comm buffers at 0 is no larger
(IEEE addition is monotone and x + 0 == x, the terms summed in the same order), so a layout
fits only at a ZeRO stage whose model state and framework overhead alone fit (state_zeros),
and

    floor_s = min over those stages of dp_opt(stage, m) <= dp_opt of every fitting layout

(math.inf when no stage's model state fits: the group holds no fitting layout). The floor
reads neither the recompute level nor vpp (no DP term does), so it covers the whole group
(tp, pp, cp, dp, sp, micro_batch, ep, etp); the stages depend on (tp, pp, cp, dp, ep, etp)
and on which kinds of rows the group has only, and are found once per such tuple.

A MoE row with a first/last split (solver.search.moe_split) fits only where moe_split.may_fit
holds, which is False when the busiest-rank floor state + activations + rest
(moe_stages.mean_floor_parts, every part >= 0 bytes) exceeds usable x (1 + MEMORY_MARGIN);
with the activations at 0 the sum is no larger, so such a row fits only at a stage whose
floor state + rest is within that (_split_state_fits). A group with rows of both kinds takes
the union. With a dense model's explicit splits (options.split_stages) a rank holds its own
stage's state, and every stage the framework allows is taken.
"""
from __future__ import annotations

import math

from solver.cost.moe_stages import floor_rest_bytes, floor_state_bytes, mean_floor_parts
from solver.search import moe_split


def floor_s(lm, t, g: tuple, rows: list[tuple], m: int, memo: dict) -> float:
    """The least dp_opt (s) over the ZeRO stages a fitting layout of group g (its pipeline
    keys: rows) may have (state_zeros), m micro-batches per step; math.inf when there is none
    (module docstring). t: the memoized terms (solver.search.terms._Terms); memo:
    state_zeros' memo, one dict per search."""
    tp, pp, cp, dp, _sp, _mb, ep, etp = g
    zeros = state_zeros(lm, t, g, rows, memo)
    return min((t.dp_opt(tp, cp, dp, pp, z, m, ep, etp) for z in zeros), default=math.inf)


def state_zeros(lm, t, g: tuple, rows: list[tuple], memo: dict) -> tuple[int, ...]:
    """The framework's ZeRO stages (lm.zero_stages) at which a layout of the group may fit on
    its model state alone (module docstring), memoized in memo per (tp, pp, cp, dp, ep, etp)
    and the kinds of rows the group has."""
    tp, pp, cp, dp, _sp, _mb, ep, etp = g
    dense_splits = t.split_uneven is not None or (lm.options.split_stages and t.first_last is None)
    first_last = {bool(t.first_last(pp, v)) for v in {r[4] for r in rows}} if t.first_last is not None else {False}
    key = (tp, pp, cp, dp, ep, etp, dense_splits, frozenset(first_last))
    if key not in memo:
        zeros = tuple(lm.zero_stages(tp, pp, cp, dp, ep, etp))
        if not dense_splits:
            overhead = t.ctx.options.framework_overhead_bytes
            zeros = tuple(z for z in zeros if (False in first_last and t.memory_total(
                _state_rest(t, tp, pp, cp, dp, z, ep, etp, overhead), 0.0) <= t.usable)
                or (True in first_last and _split_state_fits(t, tp, pp, cp, dp, z, ep, etp)))
        memo[key] = zeros
    return memo[key]


def _split_state_fits(t, tp, pp, cp, dp, zero, ep, etp) -> bool:
    """moe_split.may_fit's floor test with the activations at 0 (module docstring)."""
    parts = mean_floor_parts(t.ctx, pp=pp, n_moe=t.moe_layers)
    state = floor_state_bytes(parts, moe_split._state(t, tp, pp, dp, cp, zero, ep, etp))
    rest = floor_rest_bytes(t.ctx, parts, moe_split._copies(t, tp, ep, etp))
    return state + 0.0 + rest <= t.usable * (1 + moe_split.MEMORY_MARGIN)


def _state_rest(t, tp, pp, cp, dp, zero, ep, etp, overhead: float) -> tuple[float, ...]:
    """memory_rest's (weights, gradients, optimizer, logits, comm buffers, overhead) bytes with
    the logits and comm buffers at 0."""
    st = t.state(tp, pp, dp, cp, zero, ep, etp)
    return st.weights, st.gradients, st.optimizer, 0.0, 0.0, overhead
