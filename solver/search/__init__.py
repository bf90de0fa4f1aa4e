"""CP-SAT layout search: the only package that imports ortools.

Public API (imported lazily so that `import solver.search.options` stays light):
    search_layouts(model, cluster, training, options=None) -> SearchResult
    exhaustive_search(model, cluster, training, options=None) -> list[Evaluated] (the oracle)
    SearchOptions, SearchResult
"""
from __future__ import annotations

from typing import Any

__all__ = ["SearchOptions", "SearchResult", "exhaustive_search", "search_layouts"]
_WHERE = {"search_layouts": "api", "exhaustive_search": "exhaustive", "SearchOptions": "options",
          "SearchResult": "result"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"solver.search.{_WHERE[name]}"), name)
    raise AttributeError(name)
