"""The solve workers' cost-table cache: the search's tables (solver.search.terms.term_rows,
pruned to the request's top_k) of the last few problems a worker solved.

Building the tables is most of a warm /v1/layouts request (about 0.09 of 0.12 s for the
seed on the development machine); CP-SAT, the re-evaluation of the top layouts and the
exports run on every request. A scheduler asks about the same model and cluster again and
again, so a worker that has just answered a problem answers it again from its tables.

The key is every input the tables are built from: the model, cluster and training specs and
the search options as JSON, except the two options no table reads (time_limit_s bounds the
CP-SAT call, workers are CP-SAT's threads; solver.search.terms and solver.search.prune read
neither), and the cost options (a frozen dataclass, compared by its repr). Bounded by entry
count; `cache_clear` (called by service.jobs.trim_caches with every functools cache when a
worker grows) empties it.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, NamedTuple
from collections.abc import Callable

MAX_ENTRIES = 8  # problems kept per worker (the seed's pruned tables: a few MB)
UNREAD_OPTIONS = {"time_limit_s", "workers"}  # search options no table depends on


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    maxsize: int
    currsize: int


class TableCache:
    """Least-recently-used cost tables, at most `max_entries` problems."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._rows: OrderedDict[tuple, Any] = OrderedDict()
        self.hits = self.misses = 0

    @staticmethod
    def key(lm: Any, cost_options: Any) -> tuple:
        """What the tables of LayoutModel `lm` under `cost_options` are built from."""
        return (lm.spec.model_dump_json(), lm.cluster.model_dump_json(),
                lm.training.model_dump_json(),
                lm.options.model_dump_json(exclude=UNREAD_OPTIONS), lm.explain,
                repr(cost_options))

    def builder(self, cost_options: Any = None) -> Callable[[Any], Any]:
        """A rows builder for solver.search.search_layouts (its default tables, pruned to
        top_k), answering from this cache when the problem was built before."""
        from solver.search.api import default_rows

        build = default_rows(cost_options, prune=True)

        def rows(lm: Any) -> Any:
            key = self.key(lm, cost_options)
            if key in self._rows:
                self.hits += 1
                self._rows.move_to_end(key)
                return self._rows[key]
            self.misses += 1
            self._rows[key] = out = build(lm)
            while len(self._rows) > self.max_entries:
                self._rows.popitem(last=False)
            return out

        return rows

    def cache_info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, self.max_entries, len(self._rows))

    def cache_clear(self) -> None:
        self._rows.clear()


TABLES = TableCache()
