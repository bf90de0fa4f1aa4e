"""CPython's cyclic garbage collector paused while the cost tables are built.

Building the tables allocates millions of small objects that form no reference cycles
(tuples, floats, memo entries); reference counting frees them. Each allocation burst still
triggers the cyclic collector, whose older-generation passes rescan every long-lived object
of the process, the cost and topology memo caches included: measured at about a quarter of
the MoE searches' CPU time (benchmarks/search.py, Mixtral 8x22B and DeepSeek-V3, CPU seconds
with and without the collector). Pausing it only defers cycle collection to the end of the
build; nothing is freed later than that.

The pause is process-wide (gc.disable): a build re-enables the collector only if it found it
enabled, so concurrent builds in threads can end their pauses in any order and the collector
is never left off by this module (at worst a build runs part of its time with it on).
"""
from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def without_cyclic_gc(fn: Callable[P, R]) -> Callable[P, R]:
    """Run `fn` with the cyclic collector paused (module docstring)."""
    @functools.wraps(fn)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()
    return paused
