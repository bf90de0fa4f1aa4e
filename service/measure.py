"""Microbenchmarks for `trainplan calibrate --measure`: GEMM, attention, HBM copy and collectives.

Backend: torch when importable (CUDA when available, else CPU), numpy otherwise (the optional
extra `trainplan[measure]` installs torch); the profile says which measured. Each kernel runs
`repeats` times after one warm-up and the median time counts. Fractions of peak are achieved /
the cluster spec's gpu.peak_tflops (dense BF16) and gpu.hbm_gb_s, clipped into the calibrate
bounds (solver.cost.calibrate.BOUNDS) and marked `clipped` when they fall outside (e.g. a CPU
measured against a GPU's peak). Collectives (all-reduce, all-gather) run only where
torch.distributed is initialized with more than one rank: a sweep of message sizes doubling up
to the largest, each size's busbw (nccl-tests' convention), and the plateau as
`trainplan cluster from-nccl-tests` takes it (median busbw of the sizes >= largest / 16). The
all-reduce plateau divided by the cluster spec's stated busbw of the tier the ranks span (one
host: intra_node; several: inter_node, per GPU = busbw / ranks per host, as from-nccl-tests)
gives that tier's network efficiency (CostOptions.intra_node_network_efficiency /
inter_node_network_efficiency); the other tier stays at the shipped 1.0.

Unit legend: `_s` seconds; `_flops` FLOPs; `_bytes` bytes; `_gb_s` 1e9 bytes/s.
"""
from __future__ import annotations

import importlib
import operator
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.spec import ClusterSpec


@dataclass(frozen=True)
class Backend:
    """The array library that measures: name, device, and how to make, multiply and sync."""

    name: str
    device: str
    lib: Any

    def randn(self, *shape: int) -> Any:
        if self.name == "numpy":
            return np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
        dtype = self.lib.bfloat16 if self.device == "cuda" else self.lib.float32
        return self.lib.randn(*shape, device=self.device, dtype=dtype)

    def sync(self) -> None:
        if self.name == "torch" and self.device == "cuda":
            self.lib.cuda.synchronize()


def pick_backend() -> Backend:
    """torch when importable (CUDA if available), else numpy."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return Backend("numpy", "cpu", np)
    return Backend("torch", "cuda" if torch.cuda.is_available() else "cpu", torch)


def timed(backend: Backend, fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds of fn over `repeats` runs after one warm-up."""
    fn()
    backend.sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        backend.sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gemm_shapes(model: ModelSpec, training: TrainingSpec, layout: LayoutSpec,
                max_dim: int | None) -> list[tuple[int, int, int]]:
    """(m, k, n) of the layer's four GEMMs on one TP rank (QKV, projection, FC1, FC2; Megatron's
    column/row split), m = tokens of one micro-batch; each dimension capped at max_dim."""
    t = training.seq_len * layout.micro_batch // layout.cp
    h, tp = model.hidden, layout.tp
    qkv = (model.heads + 2 * model.kv_heads) * model.head_dim // tp
    ffn = model.ffn_hidden * (2 if model.ffn_gated else 1) // tp
    shapes = [(t, h, qkv), (t, model.heads * model.head_dim // tp, h), (t, h, ffn), (t, model.ffn_hidden // tp, h)]
    cap = max_dim or max(max(s) for s in shapes)
    return [(min(m, cap), min(k, cap), min(n, cap)) for m, k, n in shapes]


def measure_gemm(backend: Backend, shapes: list[tuple[int, int, int]], repeats: int) -> dict[str, Any]:
    """Achieved FLOP/s over the shapes (2 m k n FLOPs each)."""
    flops = seconds = 0.0
    rows = []
    for m, k, n in shapes:
        a, b = backend.randn(m, k), backend.randn(k, n)
        s = timed(backend, partial(operator.matmul, a, b), repeats)
        flops += 2.0 * m * k * n
        seconds += s
        rows.append({"m": m, "k": k, "n": n, "seconds": s})
    return {"shapes": rows, "flops": flops, "seconds": seconds, "achieved_flops_per_s": flops / seconds}


def measure_attention(backend: Backend, seq: int, head_dim: int, heads: int, repeats: int) -> dict[str, Any]:
    """Forward attention softmax(Q K^T / sqrt d) V of `heads` heads: 4 s^2 d FLOPs per head
    (the two matmuls; Dao 2023 counts the same)."""
    q, k, v = (backend.randn(heads, seq, head_dim) for _ in range(3))
    if backend.name == "torch":
        f = backend.lib.nn.functional.scaled_dot_product_attention

        def run() -> Any:
            return f(q, k, v)
    else:
        def run() -> Any:
            scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(head_dim)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            return (scores / scores.sum(axis=-1, keepdims=True)) @ v
    s = timed(backend, run, repeats)
    flops = 4.0 * heads * seq * seq * head_dim
    return {"seq": seq, "head_dim": head_dim, "heads": heads, "seconds": s, "achieved_flops_per_s": flops / s}


def measure_copy(backend: Backend, elements: int, repeats: int) -> dict[str, Any]:
    """Device copy of `elements` 4-byte values: reads and writes them (2 x bytes moved)."""
    src = backend.randn(elements)
    if backend.name == "torch":
        dst = backend.lib.empty_like(src)

        def run() -> Any:
            return dst.copy_(src)
    else:
        dst = np.empty_like(src)

        def run() -> Any:
            return np.copyto(dst, src)
    s = timed(backend, run, repeats)
    moved = 2.0 * elements * src.element_size() if backend.name == "torch" else 2.0 * src.nbytes
    return {"bytes_moved": moved, "seconds": s, "achieved_gb_s": moved / s / 1e9}


def collective_sweep(backend: Backend, dist: Any, elements: int, repeats: int) -> list[dict[str, float]]:
    """All-reduce and all-gather busbw at message sizes doubling from elements / 64 to `elements`
    (bytes per rank; busbw = 2 (n-1)/n x bytes / t and (n-1)/n x n bytes / t, nccl-tests)."""
    n = dist.get_world_size()
    rows = []
    for count in sorted({max(1, elements >> k) for k in range(7)}):
        x = backend.randn(count)
        size = x.nbytes  # torch.Tensor and numpy arrays both
        out = [backend.lib.empty_like(x) for _ in range(n)]
        ar = timed(backend, partial(dist.all_reduce, x), repeats)
        ag = timed(backend, partial(dist.all_gather, out, x), repeats)
        rows.append({"bytes": size, "all_reduce_s": ar, "all_gather_s": ag,
                     "all_reduce_bus_gb_s": 2 * (n - 1) / n * size / ar / 1e9,
                     "all_gather_bus_gb_s": (n - 1) / n * size * n / ag / 1e9})
    return rows


def plateau_gb_s(rows: list[dict[str, float]], key: str) -> float:
    """Median busbw of the sizes >= the largest / PLATEAU_FRACTION (topology.nccl_tests)."""
    from topology.nccl_tests import PLATEAU_FRACTION

    largest = max(r["bytes"] for r in rows)
    return statistics.median(r[key] for r in rows if r["bytes"] * PLATEAU_FRACTION >= largest)


def network_efficiency(all_reduce_bus_gb_s: float, ranks: int, ranks_per_host: int,
                       cluster: ClusterSpec) -> tuple[str, float, float]:
    """(constant name, per-GPU achieved GB/s, achieved / stated) for the tier the ranks span."""
    if ranks <= ranks_per_host:
        return "intra_node_network_efficiency", all_reduce_bus_gb_s, \
            all_reduce_bus_gb_s / cluster.intra_node.bandwidth_gb_s
    per_gpu = all_reduce_bus_gb_s / ranks_per_host
    return "inter_node_network_efficiency", per_gpu, per_gpu / cluster.inter_node.bandwidth_gb_s


def measure_collectives(backend: Backend, elements: int, repeats: int, cluster: ClusterSpec,
                        dist: Any = None, ranks_per_host: int | None = None) -> dict[str, Any]:
    """The collective sweep and the network efficiency it gives, where torch.distributed is
    initialized with > 1 rank (ranks per host from torchrun's LOCAL_WORLD_SIZE); else why not."""
    if dist is None:
        if backend.name != "torch":
            return {"skipped": "torch is not installed (pip install trainplan[measure])"}
        dist = backend.lib.distributed
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return {"skipped": "torch.distributed is not initialized with more than one rank (run under torchrun)"}
    n = dist.get_world_size()
    local = ranks_per_host or int(os.environ.get("LOCAL_WORLD_SIZE", n))
    rows = collective_sweep(backend, dist, elements, repeats)
    ar, ag = plateau_gb_s(rows, "all_reduce_bus_gb_s"), plateau_gb_s(rows, "all_gather_bus_gb_s")
    name, per_gpu, ratio = network_efficiency(ar, n, local, cluster)
    return {"ranks": n, "ranks_per_host": local, "sweep": rows, "all_reduce_bus_gb_s": ar,
            "all_gather_bus_gb_s": ag, "tier": name, "per_gpu_gb_s": per_gpu, "efficiency": ratio}


def _clip(name: str, raw: float) -> dict[str, Any]:
    from solver.cost.calibrate import BOUNDS

    lo, hi = BOUNDS[name]
    return {"raw_fraction": raw, "value": min(hi, max(lo, raw)), "clipped": not lo <= raw <= hi}


def measure_profile(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, layout: LayoutSpec,
                    max_dim: int | None = None, repeats: int = 5, backend: Backend | None = None,
                    dist: Any = None) -> dict[str, Any]:
    """Measurements and the constants they give ({name: {raw_fraction, value, clipped}});
    backend / dist replace the detected ones (tests)."""
    backend = backend or pick_backend()
    gpu = cluster.gpu
    gemm = measure_gemm(backend, gemm_shapes(model, training, layout, max_dim), repeats)
    seq = min(training.seq_len, max_dim or training.seq_len)
    heads = max(1, model.heads // layout.tp)
    attn = measure_attention(backend, seq, model.head_dim, min(heads, max_dim or heads), repeats)
    copy = measure_copy(backend, min(1 << 26, (max_dim or 4096) ** 2), repeats)
    constants = {
        "gemm_peak_fraction": _clip("gemm_peak_fraction", gemm["achieved_flops_per_s"] / gpu.peak_flops),
        "attention_peak_fraction": _clip("attention_peak_fraction", attn["achieved_flops_per_s"] / gpu.peak_flops),
        "hbm_fraction": _clip("hbm_fraction", copy["achieved_gb_s"] / gpu.hbm_gb_s),
    }
    coll = measure_collectives(backend, min(1 << 24, (max_dim or 4096) ** 2), repeats, cluster, dist)
    if "efficiency" in coll:
        constants[coll["tier"]] = _clip(coll["tier"], coll["efficiency"])
    return {"backend": backend.name, "device": backend.device, "repeats": repeats, "max_dim": max_dim,
            "gemm": gemm, "attention": attn, "hbm_copy": copy, "collectives": coll, "constants": constants}
