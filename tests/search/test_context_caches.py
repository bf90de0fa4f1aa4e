"""The context-keyed cost caches are found and emptied once a search's tables are built
(solver.cost.context_caches, solver.search.terms.term_rows). That the tables still answer as
the cost model does after it: tests/search/test_terms.py (every check_pairs call)."""
from __future__ import annotations

from solver.cost import moe_comm, mtp, shared_times
from solver.cost import terms as T
from solver.cost.context_caches import context_caches
from solver.search.cpsat import LayoutModel
from solver.search.options import SearchOptions
from solver.search.terms import TABLE_MEMOS, _Terms, term_rows
from tests.search.test_experts import cluster, moe_model, training
from topology import groups


def test_context_caches_are_the_ctx_keyed_ones():
    found = context_caches()
    for cache in (moe_comm.block_calc, moe_comm.moe_layer_comm, moe_comm.expert_links, mtp.mtp_s, T._layer):
        assert cache in found
    # keyed on other things (kept across problems): the shared GPU times, the topology's links
    assert shared_times.GPU_TIMES not in found and groups.group_links not in found


def test_term_rows_empties_them_and_its_term_memos(monkeypatch):
    made: list[_Terms] = []
    init = _Terms.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(_Terms, "__init__", record)
    lm = LayoutModel(moe_model(), cluster(), training(), SearchOptions(max_micro_batch=2, max_cp=2))
    term_rows(lm, prune=True)
    assert [c.__wrapped__.__name__ for c in context_caches() if c.cache_info().currsize] == []
    (t,) = made
    left = {name for name, memo in vars(t).items() if callable(getattr(memo, "cache_clear", None))
            and memo.cache_info().currsize}
    assert left <= TABLE_MEMOS and "row" in left
