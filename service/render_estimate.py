"""Markdown for `trainplan estimate` (solver.layouts.estimate's JSON): one layout's prediction,
time and memory by component, the fit against the GPU's capacity, warnings.

Formatting only (GB = 1e9 bytes, GiB = 2^30 bytes).
"""
from __future__ import annotations

from typing import Any

from service.render_bands import band_note, interval
from service.render_md import md_table
from service.render_text import CAPACITY_BASIS, GB_NOTE, capacity_text, gb, layout_words, mfu_text, yes_no


def _violations(est: dict[str, Any]) -> list[str]:
    out = [f"**NOT RUNNABLE in {est['framework']}**: {v['reason']} ({v['rule']}; "
           f"{v['sources'][0]['repository']} {v['sources'][0]['path']} @ {v['sources'][0]['commit'][:10]})"
           for v in est.get("framework_violations", [])]
    return out + ([""] if out else [])


def _value(key: str, v: Any) -> str:
    """A field in human units, read off its name: _bytes in GB, _s in seconds, _gb_s in GB/s."""
    if isinstance(v, bool):
        return yes_no(v)
    if isinstance(v, dict):
        return ", ".join(f"{_name(k)} {_value(k, x)}" for k, x in v.items())
    if not isinstance(v, (int, float)):
        return str(v)
    if key.endswith("_bytes"):
        return gb(v, 3)
    unit = " GB/s" if key.endswith("_gb_s") else (" s" if key.endswith("_s") else "")
    text = f"{v:,.0f}" if float(v).is_integer() or abs(v) >= 1e4 else f"{v:.4g}"
    return text + unit


def _name(key: str) -> str:
    for suffix in ("_bytes", "_gb_s", "_s"):
        key = key.removesuffix(suffix)
    return key.replace("_", " ")


def _moe(est: dict[str, Any]) -> list[str]:
    """The MoE figures of the estimate (solver.cost.moe_summary), one bullet per field, generic
    over the fields it carries (units in the field names: _bytes, _s, _gb_s)."""
    moe = est.get("moe") or {}
    return (["Mixture of experts:", ""] + [f"- {_name(k)}: {_value(k, v)}" for k, v in moe.items()]
            + [""]) if moe else []


def _prediction(est: dict[str, Any]) -> list[str]:
    if "step_time_s" not in est:
        return []
    extra = "80% band " + interval(est, "mfu", ".1%")
    if est.get("mfu_fp8_peak") is not None:
        extra += f"; {est['mfu_fp8_peak']:.1%} of the dense FP8 peak"
    precision = est.get("compute_precision")
    out = ([f"Compute precision: {precision} ({est.get('mfu_convention', '')})", ""]
           if precision not in (None, "bf16") else [])
    out += [f"**{est['step_time_s']:.3f} s per step** ({interval(est, 'step_time_s', '.3f')} s), MFU "
           f"{mfu_text(est, extra=extra)}, HFU {est['hfu']:.1%}, "
           f"{est['tokens_per_s']:,.0f} tokens/s ({interval(est, 'tokens_per_s', ',.0f')}); "
           f"memory total {interval(est, 'memory_total_bytes', '.1f', 1e9)} GB", ""]
    note = band_note(est)
    out += [note, ""] if note else []
    rows = [[k.replace("_", " "), f"{v:.3f}"] for k, v in est["time_breakdown_s"].items()]
    return out + md_table(["time per step", "seconds"], rows) + [""]


def _fit(est: dict[str, Any]) -> str:
    margin = est.get("memory_margin") or {}
    usable = "" if "usable_bytes" not in margin else (
        f", usable {gb(margin['usable_bytes'])} after the {margin['margin_fraction_reserved']:.0%} margin")
    return (f"- capacity {capacity_text(est['memory_capacity_bytes'])}{usable}, left "
            f"{gb(est['memory_free_bytes'])}: **{'fits' if est['fits'] else 'does not fit'}** "
            f"({CAPACITY_BASIS})")


def render_estimate(est: dict[str, Any]) -> str:
    """One layout's accounting and predicted step time / memory as Markdown."""
    m, c = est["memory_per_gpu_bytes"], est["communication"]
    out = [f"# Estimate: {layout_words(est['layout'], framework=False)} ({est['gpus']} GPUs, "
           f"{est.get('framework', 'megatron-core')})", ""]
    out += [f"**Warning**: {w}" for w in est.get("warnings", [])] + ([""] if est.get("warnings") else [])
    out += _violations(est)
    if est.get("memory_recipe"):
        out += [f"Memory recipe: {est['memory_recipe']['mode']} "
                f"({est['memory_recipe']['bytes_per_param']:.2f} B/param of model state)", ""]
    out += _prediction(est) + _moe(est)
    out += [f"Memory in GB ({GB_NOTE}).", ""]
    out += md_table(["memory per GPU", "GB"], [[k.replace("_", " "), gb(v)] for k, v in m.items()])
    return "\n".join(out + [
        "", _fit(est),
        f"- DP gradient-sync lower bound: {c['dp_grad_sync_lower_bound_s']:.3f} s "
        f"({c['dp_ranks']} ranks at {c['dp_bandwidth_gb_s']:g} GB/s)",
        f"- batch: {est['batch']['tokens_per_step']:,} tokens per step, "
        f"{est['batch']['grad_accum']} accumulation steps"])
