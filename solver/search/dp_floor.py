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
only and are found once per such tuple. With explicit splits (options.split_stages, a
dense model's uneven splits, a MoE group's first/last split rows) a rank holds its own
stage's state, so every stage the framework allows is taken.
"""
from __future__ import annotations

import math


def floor_s(lm, t, g: tuple, m: int, split: bool, memo: dict) -> float:
    """The least dp_opt (s) over the ZeRO stages a fitting layout of group g may have
    (state_zeros), m micro-batches per step; math.inf when there is none (module docstring).
    t: the memoized terms (solver.search.terms._Terms); split: the group has explicit splits;
    memo: state_zeros' memo, one dict per search."""
    tp, pp, cp, dp, _sp, _mb, ep, etp = g
    zeros = state_zeros(lm, t, g, split, memo)
    return min((t.dp_opt(tp, cp, dp, pp, z, m, ep, etp) for z in zeros), default=math.inf)


def state_zeros(lm, t, g: tuple, split: bool, memo: dict) -> tuple[int, ...]:
    """The framework's ZeRO stages (lm.zero_stages) whose model state and overhead alone fit
    the usable memory (all of them with explicit splits), memoized in memo per
    (tp, pp, cp, dp, ep, etp, split)."""
    tp, pp, cp, dp, _sp, _mb, ep, etp = g
    key = (tp, pp, cp, dp, ep, etp, split)
    if key not in memo:
        zeros = tuple(lm.zero_stages(tp, pp, cp, dp, ep, etp))
        if not split:
            overhead = t.ctx.options.framework_overhead_bytes
            zeros = tuple(z for z in zeros if t.memory_total(_state_rest(t, tp, pp, cp, dp, z, ep, etp, overhead),
                                                             0.0) <= t.usable)
        memo[key] = zeros
    return memo[key]


def _state_rest(t, tp, pp, cp, dp, zero, ep, etp, overhead: float) -> tuple[float, ...]:
    """memory_rest's (weights, gradients, optimizer, logits, comm buffers, overhead) bytes with
    the logits and comm buffers at 0."""
    st = t.state(tp, pp, dp, cp, zero, ep, etp)
    return st.weights, st.gradients, st.optimizer, 0.0, 0.0, overhead
