"""Memory helpers of the search's memoized terms (solver.search.terms._Terms).

Unit legend: `_bytes` bytes per GPU; layer counts are whole layers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from solver.search.rules import DENSE_ETP
from solver.specs import Recompute


@dataclass(frozen=True, slots=True)
class MtpShape:
    """The LayoutSpec fields step_memory.mtp_activation_bytes reads (names as LayoutSpec's).
    Cheaper to build than a LayoutSpec, and a field the function starts to read that is not
    here raises AttributeError instead of being read at its default."""

    tp: int
    cp: int
    sequence_parallel: bool
    recompute: Recompute
    micro_batch: int
    ep: int
    etp: int | None

    @property
    def expert_tp(self) -> int:
        """As LayoutSpec.expert_tp: etp, or tp when unset."""
        return self.tp if self.etp is None else self.etp


def no_split_fits(t: Any, shard: tuple, rc: str, m: int) -> bool:
    """A shortcut (vpp = 1) for the terms t (solver.search.terms._Terms): True only when no
    split of the layers fits memory, so that the exact per-stage limits
    (step.stage_layer_limits) run only near the memory limit.

    Rank r with n layers needs at least a_r + b_r n bytes (stage_profile, stage_state: model
    state linear in its parameters, k bytes each; activations per_layer x n x min(pp - r, m);
    the embedding's stored values and full recompute's extra layer left out), so it holds at
    most (limit - a_r) / b_r layers; one more layer of slack per rank covers float rounding.
    """
    tp, pp, cp, dp, sp, zero, mb, _ep, etp = shard
    if etp != DENSE_ETP:  # MoE: per-layer parameters differ by layer; the exact limits decide
        return False
    pc, layers = t.ctx.params, t.ctx.model.layers
    st = t.stage_state(1, tp, pp, dp, cp, zero)
    k = st.weights + st.gradients + st.optimizer
    _, _, _, logits, comm, overhead = t.rest(*shard)
    act = t.layer_act(tp, cp, bool(sp), rc, mb)
    room = t.usable * (1 + 1e-9) - comm - overhead
    held = 0
    for r in range(pp):
        fixed = ((pc.embedding + pc.position_embedding) * k if r == 0 else 0.0) + (
            (pc.final_norm + pc.lm_head) * k + logits if r == pp - 1 else 0.0)
        cap = (room - fixed) / (k * pc.per_layer + act * min(pp - r, m)) + 1.0
        if cap < 1.0:
            return True
        held += min(layers, math.floor(cap))
    return held < layers
