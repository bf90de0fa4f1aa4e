"""Term memos shared by the searches of one problem under another rank order or GPU count.

A plan searches one (model, cluster, training, cost options) problem several times: once per
rank order (solver.search.api._search_orders, each order exactly on its own), once per
scaling-grid size (solver.plan_stages), and the seed ladder's ranking builds two more tables
(solver.search.api.layout_rank). Each table build memoizes its terms on its own
solver.search.terms._Terms and empties them when done, so every build used to evaluate again
the terms the one before had just evaluated.

Inside `shared_terms()` the builds of one problem share the memos whose values no rank order,
GPU count or search option changes (ORDER_FREE_MEMOS, ORDER_FREE_SPLIT_MEMOS): a memo's value
is a function of the CostContext and its own arguments only, and these memos read no part of
the context that differs between the builds:

* no rank order: the rank order enters the cost model only through the links of a group
  (solver.cost.terms.link, solver.cost.moe_comm.expert_links and _routing_once's token-count
  gather, all topology.groups.group_links(tp, cp, dp, pp, order)), and the two Megatron orders
  'tp-cp-dp-pp' / 'tp-cp-pp-dp' differ only in whether DP or PP ranks are the faster: the
  groups of the two fastest positions (TP, CP) are the same blocks of consecutive ranks under
  both. The shared memos read only such groups: TP and CP (layer_tp_comm_s, layer_cp_comm_s,
  head_extra_s's and mtp's TP collectives, asked with dp = pp = 1), and the expert groups'
  'etp' and 'ep' links and the gather over etp x ep (expert_links(etp, ep, edp, pp) places etp
  and ep in the TP and CP positions; moe_layer_comm, moe_a2a_exposure, moe_a2a_unpaired_s and
  mtp_s read no 'edp' link); or no link (compute, and memory: solver.cost.memory, step_memory,
  moe_memory, moe_stages and state read none). Per build stay the memos with a PP or DP link
  (p2p; dp_opt, whose expert gradient sync reads 'edp') and those that read a pipeline split
  chosen by step time (row, choice, pair_memory, variant_memory; moe_split's _split_pipe).
  tests/search/test_term_share.py compares a second order's tables built on the shared memos
  with the same tables built alone (sharing 'p2p' by mistake fails it).
* no GPU count or search option: the memos take the layout scalars as arguments and read
  the model, cluster, training and cost options only (never options.gpus, top_k, ...).

The share is keyed by the identity of the problem's specs and cost options (a search handed
other objects builds its own memos). Leaving the outermost `shared_terms()` empties every
shared memo (as _Terms.release_terms empties a build's own).
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

# _Terms memos (attributes) shared between the builds of one problem (module docstring).
ORDER_FREE_MEMOS = frozenset({
    "emb", "layer", "head", "per_layer_act", "dense_act", "buffers", "state", "stage_state", "rest",
    "layer_act", "uniform_profile", "moe_compute", "mtp_act", "moe", "moe_unpaired", "head_mtp"})
# solver.search.moe_split's memory memos (dicts kept on _Terms by name, moe_split._memo).
ORDER_FREE_SPLIT_MEMOS = frozenset({
    "_split_state", "_split_whole", "_split_layer", "_split_flight", "_split_buffers", "_split_copies",
    "_split_counts", "_split_floor_state", "_split_floor_act", "_split_floor_rest", "_split_lines"})

_ACTIVE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("trainplan_term_share", default=None)


@contextlib.contextmanager
def shared_terms() -> Iterator[None]:
    """Within the block, table builds of the same problem share their order-free memos (module
    docstring); a nested block joins the outer one. The memos are emptied on leaving."""
    if _ACTIVE.get() is not None:
        yield
        return
    shares: dict = {}
    token = _ACTIVE.set(shares)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        for _problem, memos in shares.values():
            for memo in memos.values():  # an lru_cache, or a moe_split memo dict
                memo.cache_clear() if hasattr(memo, "cache_clear") else memo.clear()
        shares.clear()


def share_for(lm: Any, cost_options: Any) -> dict[str, Any] | None:
    """The memos shared by the builds of LayoutModel lm's problem under `cost_options` in the
    active block (a dict the first build fills, name -> memo), or None outside shared_terms()."""
    shares = _ACTIVE.get()
    if shares is None:
        return None
    problem = (lm.spec, lm.cluster, lm.training, cost_options)
    key = tuple(id(x) for x in problem)
    if key not in shares:  # the entry holds the objects, so their ids are not reused meanwhile
        shares[key] = (problem, {})
    return shares[key][1]


def share_terms(t: Any, lm: Any, cost_options: Any) -> Any:
    """The terms `t` (solver.search.terms._Terms) of a build of LayoutModel lm's problem, given
    the problem's shared memos in the active block (share_for; `t`'s own become the shared ones
    where it is the first build) and their names as t.shared_names (which _Terms.release_terms
    leaves to the block). `t` unchanged outside shared_terms()."""
    shared = share_for(lm, cost_options)
    if shared is None:
        return t
    for name in ORDER_FREE_MEMOS:
        setattr(t, name, shared.setdefault(name, getattr(t, name)))
    for name in ORDER_FREE_SPLIT_MEMOS:  # moe_split._memo's dicts, by name
        t.__dict__[name] = shared.setdefault(name, {})
    t.shared_names = ORDER_FREE_MEMOS | ORDER_FREE_SPLIT_MEMOS
    return t
