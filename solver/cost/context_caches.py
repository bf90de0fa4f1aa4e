"""The cost terms' memo caches keyed on a CostContext, emptied once their context is done.

Cost functions memoized with functools.lru_cache on (ctx, layout scalars) keep their entries
until evicted (up to each cache's maxsize), and with them the context and every result object.
The search builds its tables on a context of its own (solver.search.terms.term_rows makes one
per call; the re-ranking evaluator makes another), which nothing asks about once the tables are
built: tens of thousands of entries per MoE search (DeepSeek-V3 on 2,048 H800: about 60,000
objects) that stayed alive across searches and that CPython's cyclic collector rescanned at
every collection of their generation (benchmarks/search.py, 3 Mixtral then 4 DeepSeek-V3
searches in one process: 0.06-1.1 s of collector time per search before, 0.001-0.25 s after).

clear_context_caches empties every such cache. A cleared cache only computes its values again
when asked (the values are the functions' own results: no prediction changes); caches keyed on
other things (the GPU times shared by value, solver.cost.shared_times; the topology's) are kept.
"""
from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

PACKAGE = "solver.cost"
_found: dict[tuple[str, ...], list[Any]] = {}  # loaded solver.cost modules -> their context caches


def context_caches() -> list[Any]:
    """The functools caches of the loaded solver.cost modules whose first parameter is the
    CostContext `ctx` (found by inspection, so a cache added later is found too)."""
    names = tuple(sorted(n for n, m in list(sys.modules.items())
                         if m is not None and (n == PACKAGE or n.startswith(PACKAGE + "."))))
    if names not in _found:
        caches: dict[int, Any] = {}
        for name in names:
            for value in list(vars(sys.modules[name]).values()):
                if _keyed_on_context(value):
                    caches[id(value)] = value
        _found.clear()
        _found[names] = list(caches.values())
    return _found[names]


def _keyed_on_context(value: Any) -> bool:
    wrapped: Callable | None = getattr(value, "__wrapped__", None)
    if wrapped is None or not callable(getattr(value, "cache_clear", None)) or not inspect.isfunction(wrapped):
        return False
    params = list(inspect.signature(wrapped).parameters)
    return bool(params) and params[0] == "ctx"


def clear_context_caches() -> int:
    """Empty every context-keyed cost cache (module docstring); returns how many."""
    caches = context_caches()
    for cache in caches:
        cache.cache_clear()
    return len(caches)
