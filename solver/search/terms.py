"""The cost model's terms (solver.cost.step) as CP-SAT tables, composed the same way.

solver/cost/step.py documents each term and the few layout scalars it depends on. Each
term is evaluated in Python over only those scalars (memoized: far fewer cost-function
calls than layouts). The products of the composition are then tabulated over their small
joint domain, the pipeline key (tp, pp, cp, dp, vpp, micro_batch, sp, recompute, ep, etp),
using
step.compose_step_time itself on the memoized term values:

  pipe_us(key)   = (m + (pp-1)/vpp) x stage       (compose_step_time with DP/optimizer 0)
  shard_us(tp, pp, cp, dp, sp, zero, mb, ep, etp) = dp_exposed_s + optimizer_s
  step_us        = pipe_us + shard_us             (error <= 0.5 + 0.5 us)

Memory is not rounded at all: a (pipeline, shard) pair fits when step.compose_memory's
total of activation_bytes(key) and the shard's model_state, logits, comm_buffers and
framework overhead (summed in the same order) is within step.usable_memory_bytes, the
evaluator's own test. solver.search.model turns the two tables into the CP-SAT model.
The expert degrees (ep, etp) reach the cost functions only for a MoE model (expert_kw): a
dense model's calls are exactly the dense ones. A MoE row adds step.time_terms' MoE layer
extra (solver.cost.moe_comm.moe_layer_extra_s, over the EP group's links at this dp, pp and
rank order) and step_memory.moe_activation_extra_bytes, the evaluator's own functions.
"""
from __future__ import annotations

import time
from functools import lru_cache
from typing import Any, cast

from solver.cost import memory as M
from solver.cost import terms as T
from solver.cost.context_caches import clear_context_caches
from solver.cost.estimate import make_context
from solver.cost.moe_comm import moe_a2a_unpaired_s, moe_layer_comm_s, moe_layer_compute, overlap_applies
from solver.cost.moe_layer import moe_layer_mask
from solver.cost.mtp import mtp_s
from solver.cost.step_memory import moe_activation_extra_of, mtp_activation_bytes, total_bytes
from solver.cost.step import (
    TimeTerms, chosen_split, compose_memory, compose_split_step_time, compose_step_time,
    dominant_stages, memory_aware_split, stage_layer_limits, stage_memory_terms, stage_profile, stage_state,
    usable_memory_bytes,
)
from solver.cost.terms import CostContext, with_rank_order, layers_on_rank
from solver.errors import SolverTimeoutError
from solver.search import moe_split
from solver.search.cpsat import RECOMPUTE_NAMES, LayoutModel
from solver.search.gc_pause import without_cyclic_gc
from solver.search.model import TermRows, pipe_group, shard_group
from solver.search.prune import keys_within, prune_keys
from solver.search.rules import DENSE_ETP, accumulation
from solver.search.term_memory import MtpShape, no_split_fits
from solver.search.term_share import share_terms
from solver.search.scaling import time_int
from solver.specs import LayoutSpec, Recompute

STEP_ERROR_UNITS = 0.5 + 0.5  # two rounded tables
# The _Terms memos TermRows' fits and memory closures read (row, shard and pair values).
TABLE_MEMOS = frozenset({"row", "rest", "choice", "pair_memory", "variant_memory"})


def expert_kw(ep: int, etp: int) -> dict[str, int]:
    """The expert degrees as cost-function keywords: none for a dense model (etp DENSE_ETP)."""
    return {} if etp == DENSE_ETP else {"ep": ep, "etp": etp}


class _Terms:
    """Memoized term evaluations for one problem (each keyed by its own scalars only)."""

    def __init__(self, ctx: CostContext, split_uneven: bool | None = None, with_time: bool = True,
                 first_last=None) -> None:
        """split_uneven: None charges every stage as the busiest rank (the default cost
        model); True/False gives each pp > 1 row the split step.chosen_split assigns.
        with_time=False: pipeline seconds are 0 (memory-only questions); time terms are then
        evaluated only where a split is chosen (the split decides the memory)."""
        self.ctx, self.split_uneven, self.with_time, self.first_last = ctx, split_uneven, with_time, first_last
        self.emb = lru_cache(maxsize=None)(
            lambda tp, cp, mb: T.embedding_s(ctx, tp=tp, cp=cp, micro_batch=mb))
        self.layer = lru_cache(maxsize=None)(self._layer)
        self.head = lru_cache(maxsize=None)(self._head)
        self.p2p = lru_cache(maxsize=None)(self._p2p)
        self.per_layer_act = lru_cache(maxsize=None)(self._act)
        # the parts of _act and memory_rest that do not read the expert degrees, memoized apart
        self.dense_act = lru_cache(maxsize=None)(
            lambda tp, cp, sp, rc, mb, pp, vpp, m: M.activation_bytes(
                ctx, tp=tp, cp=cp, sp=sp, recompute=rc, micro_batch=mb, pp=pp, vpp=vpp, grad_accum=m))
        self.buffers = lru_cache(maxsize=None)(  # (logits, comm buffers) bytes
            lambda tp, pp, cp, dp, sp, zero, mb: (
                M.logits_bytes(ctx, tp=tp, cp=cp, micro_batch=mb),
                M.comm_buffer_bytes(ctx, tp=tp, cp=cp, dp=dp, pp=pp, sp=sp, zero=zero, micro_batch=mb)))
        self.state = lru_cache(maxsize=None)(self._state)
        self.dp_opt = lru_cache(maxsize=None)(self._dp_opt)
        self.optimizer = lru_cache(maxsize=None)(lambda tp, cp, dp, pp, zero, ep, etp: T.optimizer_s(  # reads no m
            ctx, tp=tp, cp=cp, dp=dp, pp=pp, zero=zero, **expert_kw(ep, etp)))
        self.stage_state = lru_cache(maxsize=None)(
            lambda params, tp, pp, dp, cp, zero: stage_state(ctx, params, tp=tp, pp=pp, dp=dp, cp=cp, zero=zero))
        self.row = lru_cache(maxsize=None)(self._row)
        self.rest = lru_cache(maxsize=None)(
            lambda tp, pp, cp, dp, sp, zero, mb, ep, etp: self.memory_rest(tp, pp, cp, dp, bool(sp), zero, mb,
                                                                           ep, etp))
        self.pair_memory = lru_cache(maxsize=None)(self._pair_memory)
        self.variant_memory = lru_cache(maxsize=None)(self._variant_memory)
        self.choice = lru_cache(maxsize=None)(self._choice)
        self.usable = usable_memory_bytes(ctx)
        self.layer_act = lru_cache(maxsize=None)(
            lambda tp, cp, sp, rc, mb: M.layer_activation_bytes(ctx, tp=tp, cp=cp, sp=sp, recompute=rc,
                                                                micro_batch=mb))
        self.uniform_profile = lru_cache(maxsize=None)(
            lambda tp, cp, sp, rc, mb, pp, m, n: stage_profile(
                ctx, tp=tp, cp=cp, sp=bool(sp), recompute=rc, micro_batch=mb, pp=pp, vpp=1, grad_accum=m,
                split=(n,) * pp))
        self.moe_mask = moe_layer_mask(ctx.model)
        self.moe_layers = sum(self.moe_mask)  # MoE layers of the model
        # moe_comm.moe_layer_extra_s in its two parts: the compute does not read dp, pp or links
        self.moe_compute = lru_cache(maxsize=None)(
            lambda tp, cp, rc, mb, ep, etp: moe_layer_compute(ctx, tp=tp, cp=cp, recompute=rc, micro_batch=mb,
                                                              ep=ep, etp=etp))
        self.moe = lru_cache(maxsize=None)(self._moe)
        self.moe_unpaired = lru_cache(maxsize=None)(  # step.time_terms' moe_a2a_unpaired_s
            lambda tp, cp, sp, rc, mb, ep, etp, dp, pp: moe_a2a_unpaired_s(
                ctx, tp=tp, cp=cp, sp=sp, recompute=rc, micro_batch=mb, ep=ep, etp=etp, dp=dp, pp=pp))
        self.head_mtp = lru_cache(maxsize=None)(self._head_mtp)
        self.mtp_act = lru_cache(maxsize=None)(self._mtp_act)

    def _layer(self, tp, cp, sp, rc, mb) -> tuple[float, float, float]:
        kw = {"tp": tp, "cp": cp, "recompute": rc, "micro_batch": mb}
        return (T.layer_compute_s(self.ctx, sp=sp, **kw), T.layer_tp_comm_s(self.ctx, sp=sp, **kw),
                T.layer_cp_comm_s(self.ctx, **kw))

    def _head(self, tp, cp, sp, mb, pp) -> float:
        return T.head_extra_s(self.ctx, tp=tp, cp=cp, sp=sp, micro_batch=mb, pp=pp)

    def _p2p(self, tp, cp, dp, pp, vpp, mb) -> float:
        return T.p2p_per_microbatch_s(self.ctx, tp=tp, cp=cp, dp=dp, pp=pp, vpp=vpp, micro_batch=mb)

    def _moe(self, tp, cp, sp, rc, mb, ep, etp, dp, pp) -> tuple[float, float, float]:
        """moe_comm.moe_layer_extra_s: (compute, EP/ETP communication, TP change) beyond a
        dense layer."""
        compute, _ = self.moe_compute(tp, cp, rc, mb, ep, etp)
        return (compute, *moe_layer_comm_s(self.ctx, tp=tp, cp=cp, sp=sp, recompute=rc, micro_batch=mb, ep=ep,
                                           etp=etp, dp=dp, pp=pp))

    def _head_mtp(self, tp, cp, sp, rc, mb, ep, etp, dp, pp) -> float:
        """step.time_terms' head term: head_extra_s plus the multi-token-prediction modules
        (solver.cost.mtp.mtp_s; a model without them: head_extra_s alone)."""
        head = self.head(tp, cp, sp, mb, pp)
        if not self.ctx.model.mtp_layers:
            return head
        e_tp = tp if etp == DENSE_ETP else etp
        return head + mtp_s(self.ctx, tp=tp, cp=cp, sp=sp, recompute=rc, micro_batch=mb, ep=ep, etp=e_tp,
                            dp=dp, pp=pp)

    def _act(self, tp, cp, sp, rc, mb, pp, vpp, m, ep=1, etp=DENSE_ETP) -> float:
        act = self.dense_act(tp, cp, sp, rc, mb, pp, vpp, m)
        if etp != DENSE_ETP:  # as step_memory.memory_terms adds them
            act += moe_activation_extra_of(self.ctx, tp=tp, cp=cp, micro_batch=mb, ep=ep, etp=etp, pp=pp, vpp=vpp,
                                           recompute=rc, grad_accum=m, mask=self.moe_mask)
        if self.ctx.model.mtp_layers:
            act += self.mtp_act(tp, cp, sp, rc, mb, ep, etp)
        return act

    def _mtp_act(self, tp, cp, sp, rc, mb, ep, etp) -> float:
        """step_memory.mtp_activation_bytes of a layout with these fields (memoized on them),
        handed a term_memory.MtpShape: only these fields, read as a LayoutSpec's (cast)."""
        shape = MtpShape(tp, cp, sp, rc, mb, ep, None if etp == DENSE_ETP else etp)
        return mtp_activation_bytes(self.ctx, cast(LayoutSpec, shape))

    def time_terms(self, tp, pp, cp, dp, vpp, mb, sp, rc, ep=1, etp=DENSE_ETP) -> TimeTerms:
        """The pipeline time terms of a row (DP and optimizer terms 0)."""
        compute, tp_comm, cp_comm = self.layer(tp, cp, sp, rc, mb)
        moe: dict = {}
        if etp != DENSE_ETP:  # step.time_terms' MoE fields
            moe_c, moe_x, moe_tp = self.moe(tp, cp, sp, rc, mb, ep, etp, dp, pp)
            moe = {"moe_compute_s": moe_c, "moe_comm_s": moe_x, "moe_tp_comm_s": moe_tp, "moe_mask": self.moe_mask,
                   "moe_a2a_unpaired_s": self.moe_unpaired(tp, cp, sp, rc, mb, ep, etp, dp, pp),
                   "moe_overlap": overlap_applies(self.ctx.training, ep=ep, recompute=rc)}
        return TimeTerms(compute, tp_comm, cp_comm, self.p2p(tp, cp, dp, pp, vpp, mb),
                         self.head_mtp(tp, cp, sp, rc, mb, ep, etp, dp, pp), 0.0, 0.0, self.emb(tp, cp, mb), **moe)

    def split(self, tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp, m) -> tuple[int, ...] | None:
        """The row's pipeline split (None: the busiest-rank model)."""
        if self.split_uneven is None:  # a MoE row's first/last split, else None (solver.search.moe_split)
            return moe_split.row_split(self, (tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp), m)
        terms = self.time_terms(tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp)
        return chosen_split(terms, layers=self.ctx.model.layers, pp=pp, vpp=vpp, grad_accum=m,
                            uneven=self.split_uneven)

    def pipe_s(self, tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp, m, split=None) -> float:
        """(m + (pp-1)/vpp) x stage via step.compose_step_time, or the split's
        step.compose_split_step_time (DP and optimizer terms 0)."""
        terms = self.time_terms(tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp)
        if split is not None:
            return compose_split_step_time(terms, split=split, pp=pp, vpp=vpp, grad_accum=m).step_time_s
        layers = layers_on_rank(self.ctx.model.layers, pp, vpp)
        return compose_step_time(terms, layers=layers, pp=pp, vpp=vpp, grad_accum=m).step_time_s

    def act(self, tp, cp, sp, rc, mb, pp, vpp, m, split=None, ep=1, etp=DENSE_ETP) -> tuple[float, list | None]:
        """(activation bytes, stage profile) of a row: the busiest-rank model (profile None),
        or the split's largest stage activations and its step.dominant_stages."""
        if split is None:
            return self.per_layer_act(tp, cp, sp, rc, mb, pp, vpp, m, ep, etp), None
        prof = dominant_stages(stage_profile(self.ctx, tp=tp, cp=cp, sp=sp, recompute=rc, micro_batch=mb,
                                             pp=pp, vpp=vpp, grad_accum=m, split=split))
        return max(a for _, a, _ in prof), prof

    def _row(self, tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp, m) -> tuple:
        """(split, pipeline seconds, activation bytes, stage profile) of a pipeline row
        (split, pipe_s and act; memoized: the pruning and the tables share them)."""
        split = self.split(tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp, m)
        pipe_s = self.pipe_s(tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp, m, split) if self.with_time else 0.0
        if split is not None and etp != DENSE_ETP:  # a MoE split: its busiest rank's activations
            return split, pipe_s, moe_split.row_act(self.ctx, split, m, tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp), None
        return (split, pipe_s, *self.act(tp, cp, sp, rc, mb, pp, vpp, m, split, ep, etp))

    def _pair_memory(self, shard: tuple, vpp: int, rc: str, m: int) -> float:
        """Memory per GPU of the layout of a shard row (tp, pp, cp, dp, sp, zero, mb, ep, etp)
        with pipeline fields vpp and rc (pair_total of the memoized row and shard terms)."""
        tp, pp, cp, dp, sp, _zero, mb, ep, etp = shard
        split, _, act, prof = self.row(tp, pp, cp, dp, vpp, mb, bool(sp), rc, ep, etp, m)
        if split is not None and etp != DENSE_ETP:  # a MoE split: solver.cost.moe_stages' busiest rank
            return moe_split.pair_bytes(self.ctx, shard, vpp, rc, m, split)
        return self.pair_total(shard, self.rest(*shard), act, prof)

    def _variant_memory(self, shard: tuple, vpp: int, rc: str, m: int, split: tuple[int, ...]) -> float:
        """Memory per GPU of the layout of a shard row with pipeline fields vpp, rc and `split`."""
        tp, pp, cp, _dp, sp, _zero, mb, ep, etp = shard
        act, prof = self.act(tp, cp, bool(sp), rc, mb, pp, vpp, m, split, ep, etp)
        return self.pair_total(shard, self.rest(*shard), act, prof)

    def _choice(self, shard: tuple, vpp: int, rc: Recompute, m: int) -> tuple:
        """(split, pipeline seconds, memory bytes per GPU) of the layout of a shard row with
        pipeline fields vpp and rc: the row's split when it fits, else the fastest split whose
        every stage fits (step.memory_aware_split, the evaluator's rule)."""
        tp, pp, cp, dp, sp, zero, mb, ep, etp = shard
        split0, pipe0, _, _ = self.row(tp, pp, cp, dp, vpp, mb, bool(sp), rc, ep, etp, m)
        total0 = self.pair_memory(shard, vpp, rc, m)
        if split0 is None or total0 <= self.usable or vpp > 1 or not self.split_uneven:
            return split0, pipe0, total0  # fits, or the split is the only one (even chunks)
        if no_split_fits(self, shard, rc, m):
            return split0, pipe0, total0
        layout = LayoutSpec(tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, sequence_parallel=bool(sp), zero_stage=zero,
                            micro_batch=mb, recompute=rc, ep=ep, etp=None if etp == DENSE_ETP else etp)
        split = memory_aware_split(
            self.time_terms(tp, pp, cp, dp, vpp, mb, bool(sp), rc, ep, etp), layers=self.ctx.model.layers, pp=pp,
            vpp=vpp, grad_accum=m, uneven=self.split_uneven, fits=lambda s: False, fastest=split0,
            limits=lambda: stage_layer_limits(
                self.ctx, layout, m, self.usable, state=lambda p: self.stage_state(p, tp, pp, dp, cp, zero),
                profile=lambda n: self.uniform_profile(tp, cp, sp, rc, mb, pp, m, n)))
        if split == split0:
            return split0, pipe0, total0
        pipe_s = self.pipe_s(tp, pp, cp, dp, vpp, mb, bool(sp), rc, ep, etp, m, split) if self.with_time else 0.0
        return split, pipe_s, self.variant_memory(shard, vpp, rc, m, split)

    def pair_total(self, shard: tuple, rest: tuple[float, ...], act: float, prof: list | None) -> float:
        """Memory per GPU of a (pipeline row, shard row) pair: compose_memory's total, or with
        a split the busiest stage's (step.stage_memory_terms, as step.split_memory_terms)."""
        if prof is None:
            return self.memory_total(rest, act)
        tp, pp, cp, dp, _sp, zero, _mb, _ep, _etp = shard  # explicit splits: dense models only
        kw = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "zero": zero}
        return max(compose_memory(stage_memory_terms(
            self.ctx, st, **kw, logits=rest[3], comm_buffers=rest[4],
            state=self.stage_state(st[0], tp, pp, dp, cp, zero)))["total"] for st in prof)

    def _state(self, tp, pp, dp, cp, zero, ep=1, etp=DENSE_ETP):
        return M.model_state(self.ctx, tp=tp, pp=pp, dp=dp, cp=cp, zero=zero, **expert_kw(ep, etp))

    def release_terms(self) -> None:
        """Empty every memo but those the tables' closures read (TABLE_MEMOS): the term memos
        the pruning filled for every group it visited (a term asked again is computed again)."""
        for name, memo in vars(self).items():
            if name not in TABLE_MEMOS.union(getattr(self, "shared_names", ())) and hasattr(memo, "cache_clear"):
                memo.cache_clear()

    def memory_rest(self, tp, pp, cp, dp, sp, zero, mb, ep=1, etp=DENSE_ETP) -> tuple[float, ...]:
        """(weights, gradients, optimizer, logits, comm buffers, overhead) bytes per GPU."""
        st = self.state(tp, pp, dp, cp, zero, ep, etp)
        return (st.weights, st.gradients, st.optimizer, *self.buffers(tp, pp, cp, dp, sp, zero, mb),
                self.ctx.options.framework_overhead_bytes)

    @staticmethod
    def memory_total(rest: tuple[float, ...], activations: float) -> float:
        """step.compose_memory's total (step_memory.total_bytes, the same sum)."""
        w, g, o, logits, comm, overhead = rest
        return total_bytes(w, g, o, activations, logits, comm, overhead)

    def _dp_opt(self, tp, cp, dp, pp, zero_stage, m, ep=1, etp=DENSE_ETP) -> float:
        """dp_exposed_s + optimizer_s of one step with m micro-batches per replica."""
        kw = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "zero": zero_stage, **expert_kw(ep, etp)}
        return T.dp_exposed_s(self.ctx, **kw, grad_accum=m) + self.optimizer(tp, cp, dp, pp, zero_stage, ep, etp)


@without_cyclic_gc
def term_rows(lm: LayoutModel, cost_options: Any = None, with_time: bool = True,
              prune: bool = False, deadline: float | None = None, within_s: float | None = None) -> TermRows:
    """The two cost tables over the structurally valid rows of `lm` (see module docstring).

    with_time=False leaves the time columns at 0: memory-only questions (what fits?) need
    no time terms, hence no topology queries, and build much faster (with split_stages the
    time terms still pick each row's split, which decides its memory).
    prune=True keeps only the row groups that can hold one of the lm.options.top_k best
    layouts (solver.search.prune; exact for that top-K, not for counting all layouts).
    within_s keeps only the row groups that can hold a layout of step time <= within_s
    (solver.search.prune.keys_within; exact for counting those layouts).
    deadline (time.perf_counter() seconds): building the rows, and their fit tests, raise
    SolverTimeoutError once it has passed (solver.search.explain bounds each fix this way).
    Then (or on an error) the term memos are emptied with the collector still paused, so
    reference counting frees them (solver.cost.context_caches, _Terms.release_terms).
    """
    ctx = with_rank_order(make_context(lm.spec, lm.cluster, lm.training, cost_options), lm.options.rank_orders[0])
    t = share_terms(_Terms(ctx, moe_split.dense_uneven(lm), with_time, moe_split.rule_for(lm)), lm, cost_options)
    try:
        return _term_rows(lm, t, with_time, prune, deadline, within_s)
    finally:
        t.release_terms()
        clear_context_caches()


def _term_rows(lm: LayoutModel, t: _Terms, with_time: bool, prune: bool, deadline: float | None,
               within_s: float | None) -> TermRows:
    """term_rows on the memoized terms `t` of its problem."""
    ctx = t.ctx
    def in_time() -> bool:
        if deadline is not None and time.perf_counter() > deadline:
            raise SolverTimeoutError("cost tables not built by the deadline")
        return True

    accum: dict[tuple[int, int], int] = {}  # (dp, micro_batch) -> accumulation (batch_plan)

    def accum_of(dp: int, mb: int) -> int:
        if (dp, mb) not in accum:
            accum[(dp, mb)] = accumulation(ctx.training, dp, mb)
        return accum[(dp, mb)]

    all_keys = list(lm.pipeline_rows())
    if prune and with_time:
        all_keys = prune_keys(lm, t, all_keys, accum_of)
    if within_s is not None and with_time:
        all_keys = keys_within(lm, t, all_keys, accum_of, within_s)
    keys, splits, pipe, act = [], [], [], []
    for key in all_keys:
        in_time()
        tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp = key
        split, pipe_s, a, _prof = t.row(tp, pp, cp, dp, vpp, mb, bool(sp), RECOMPUTE_NAMES[rc], ep, etp,
                                        accum_of(dp, mb))
        keys.append(key)
        splits.append(split)
        pipe.append(time_int(pipe_s))  # 0 without time columns
        act.append(a)
    shards = sorted({(tp, pp, cp, dp, sp, z, mb, ep, etp) for tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp in keys
                     for z in lm.zero_stages(tp, pp, cp, dp, ep, etp)})  # the framework's stages
    shard_units = [time_int(t.dp_opt(tp, cp, dp, pp, z, accum[(dp, mb)], ep, etp)) if with_time else 0
                   for tp, pp, cp, dp, sp, z, mb, ep, etp in shards]
    rest = [t.rest(*shard) for shard in shards if in_time()]
    if t.split_uneven:
        _add_memory_variants(t, keys, splits, pipe, act, shards, accum)

    def choice(i: int, j: int) -> tuple:
        _tp, _pp, _cp, dp, vpp, mb, _sp, rc, _ep, _etp = keys[i]
        return t.choice(shards[j], vpp, RECOMPUTE_NAMES[rc], accum[(dp, mb)])

    def memory(i: int, j: int) -> float:
        split, _, total = choice(i, j)
        if split == splits[i]:
            return total
        _tp, _pp, _cp, dp, vpp, mb, _sp, rc, _ep, _etp = keys[i]
        return t.variant_memory(shards[j], vpp, RECOMPUTE_NAMES[rc], accum[(dp, mb)], splits[i])

    def fits(i: int, j: int) -> bool:
        """The pair's layout fits and row i carries the split the search assigns it."""
        in_time()
        split, _, total = choice(i, j)
        return split == splits[i] and total <= t.usable

    # Without splits memory_total is a float sum in which the activation bytes enter once, so
    # it never decreases as they grow (IEEE rounding is monotone): fitting is a threshold on act.
    return TermRows(keys, pipe, shards, shard_units, STEP_ERROR_UNITS, fits, memory, act, [sum(r) for r in rest],
                    monotone_fit=t.split_uneven is None and all(s is None for s in splits), pipe_splits=splits)


def _add_memory_variants(t: _Terms, keys: list, splits: list, pipe: list, act: list, shards: list,
                         accum: dict) -> None:
    """One more pipeline row per (key, split) that some shard row of its group gets instead of
    the key's fastest split because that one does not fit (step.memory_aware_split); the
    pair fits only on the row whose split its layout is assigned (TermRows.fits)."""
    by_group: dict[tuple, list[tuple]] = {}
    for shard in shards:
        by_group.setdefault(shard_group(shard), []).append(shard)
    seen = set(zip(keys, splits, strict=True))
    for key, split0 in list(zip(keys, splits, strict=True)):
        tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp = key
        if split0 is None or vpp > 1:
            continue
        rcn, m = RECOMPUTE_NAMES[rc], accum[(dp, mb)]
        for shard in by_group[pipe_group(key)]:
            split, pipe_s, _ = t.choice(shard, vpp, rcn, m)
            if (key, split) not in seen:
                seen.add((key, split))
                keys.append(key)
                splits.append(split)
                pipe.append(time_int(pipe_s))
                act.append(t.act(tp, cp, bool(sp), rcn, mb, pp, vpp, m, split, ep, etp)[0])
