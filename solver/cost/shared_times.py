"""GPU times shared by the problems one process solves (a solve worker answers many).

compute.layer_times and compute.head_times_s read only the model, the sequence length, the
attention kernel, the GPU, the cost options and the FP8 work: not the cluster's size or
links, nor the batch. Another problem with those equal (a planner trying cluster sizes,
networks or batch sizes for one model and GPU) reuses them instead of computing them again
(about a fifth of the CPU of such a /v1/layouts request). The values are the functions' own
results: no prediction changes. A MoE model's block and dense-FFN times
(solver.cost.moe_comm.block_times, _dense_ffn: moe_layer.moe_block_times and dense_ffn_times,
whose arguments are those inputs and the load imbalance, which their keys carry) are shared
the same way.
"""
from __future__ import annotations

from typing import Any
from collections.abc import Callable

from solver.cost import compute as C


class SharedGpuTimes:
    """Values keyed by (the problem's inputs to the GPU-time functions, the call's own
    arguments). A problem's inputs are compared by value once per CostContext and stand for
    a small integer afterwards (never reused; kept on the context). At most `max_entries` values and MAX_INPUTS
    distinct inputs (each emptied when full); `cache_clear` (service.jobs.trim_caches calls
    it with the functools caches) empties both."""

    MAX_INPUTS = 1024

    def __init__(self, max_entries: int = 65536) -> None:
        self.max_entries = max_entries
        self._next = 0
        self._tokens: dict[tuple, int] = {}
        self._values: dict[tuple, Any] = {}
        self.hits = self.misses = 0

    def _token(self, ctx: Any) -> int:
        # kept on the context itself, as functools.cached_property keeps its value (a frozen
        # dataclass's __dict__); a token is never reused, so one kept past cache_clear still
        # stands for the same inputs
        token = vars(ctx).get("_gpu_times_token")
        if token is None:
            inputs = (ctx.model, ctx.seq_len, ctx.training.attention_kernel, ctx.cluster.gpu, ctx.options,
                      ctx.fp8_work)
            if inputs not in self._tokens:
                if len(self._tokens) >= self.MAX_INPUTS:
                    self._tokens.clear()
                self._tokens[inputs] = self._next
                self._next += 1
            token = vars(ctx)["_gpu_times_token"] = self._tokens[inputs]
        return token

    def get(self, ctx: Any, key: tuple, compute: Callable[[], Any]) -> Any:
        """compute() for `key` (the call's arguments beyond the CostContext `ctx`), once per
        distinct problem inputs."""
        full = (self._token(ctx), *key)
        if full in self._values:
            self.hits += 1
            return self._values[full]
        self.misses += 1
        if len(self._values) >= self.max_entries:
            self._values.clear()
        self._values[full] = value = compute()
        return value

    def cache_info(self) -> tuple[int, int, int, int]:
        """(hits, misses, max entries, entries)."""
        return (self.hits, self.misses, self.max_entries, len(self._values))

    def cache_clear(self) -> None:
        self._values.clear()
        self._tokens.clear()


GPU_TIMES = SharedGpuTimes()


def layer_times(ctx: Any, tp: int, cp: int, sp: bool, micro_batch: int) -> C.LayerTimes:
    """compute.layer_times of CostContext `ctx`'s problem (shared, see module docstring)."""
    return GPU_TIMES.get(ctx, ("layer", tp, cp, sp, micro_batch), lambda: C.layer_times(
        ctx.model, ctx.seq_len, ctx.training.attention_kernel, ctx.cluster.gpu, ctx.options, tp, cp, sp,
        micro_batch, ctx.fp8_work))


def head_times_s(ctx: Any, tp: int, cp: int, sp: bool, micro_batch: int) -> float:
    """compute.head_times_s of CostContext `ctx`'s problem (shared, see module docstring)."""
    return GPU_TIMES.get(ctx, ("head", tp, cp, sp, micro_batch), lambda: C.head_times_s(
        ctx.model, ctx.seq_len, ctx.cluster.gpu, ctx.options, tp, cp, sp, micro_batch))
