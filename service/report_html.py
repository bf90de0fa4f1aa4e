"""A stored plan as one self-contained HTML page: tables plus inline SVG charts.

The page GET /v1/plans/{id}/report serves and `trainplan plan --format html` prints. Numbers
in human units (GB = 1e9 bytes with the capacity also in GiB, %, s, days, GPU-hours with
thousands separators), column headers in words, booleans as yes/no, MFU as % under both
attention-FLOP conventions. Charts: service.report_charts. No scripts, no external assets;
every value from the plan is escaped.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from typing import Any

from service.report_charts import memory_chart, memory_components, num, time_chart, time_components
from service.report_sections import failures_section, risk_section, stages_section, table
from service.render_text import (
    CAPACITY_BASIS, GB_NOTE, MFU_HEAD, capacity_text, gb, layout_words, mfu_cells, mfu_text, yes_no,
)

__all__ = ["layout_label", "memory_chart", "memory_components", "render_report", "time_chart",
           "time_components"]


def _dig(data: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def layout_label(layout: dict[str, Any]) -> str:
    """Every layout field labelled, e.g. 'TP 8 · PP 1 · DP 64 · ZeRO-1 · micro-batch 1 · recompute selective'."""
    return layout_words(layout)


def _n(fmt: str, unit: str = "") -> Callable[[Any], str]:
    """A formatter: the number in `fmt` then `unit`, or '—' when absent."""
    return lambda v: "—" if num(v) is None else f"{format(v, fmt)}{unit}"


def _band(plan: dict[str, Any], key: str, fmt: Callable[[Any], str]) -> str:
    low, high = _dig(plan, f"prediction.{key}_low"), _dig(plan, f"prediction.{key}_high")
    return "" if num(low) is None or num(high) is None else f" (80% band {fmt(low)} to {fmt(high)})"


def _seconds_days(s: Any) -> str:
    return "—" if num(s) is None else f"{s:,.0f} s ({s / 86_400:,.2f} days)"


def _summary_rows(plan: dict[str, Any]) -> list[list[str]]:
    """(quantity, value) rows of the estimates, each value with its unit."""
    conv = _dig(plan, "time.mfu_attention_convention") or "non-causal"
    pred = plan.get("prediction") or {}
    n = _dig(plan, "parameters.total")
    rows = [
        ["Parameters", _n(",.0f")(n) + ("" if num(n) is None else f" ({n / 1e9:,.2f} B)")],
        ["Model state (weights, gradients, optimizer)", gb(_dig(plan, "memory.model_state_bytes"))],
        ["Training FLOPs", _n(".3e", " FLOPs")(_dig(plan, "flops.total")) + f" ({conv} attention)"],
        ["Assumed MFU", _n(".0%")(_dig(plan, "time.assumed_mfu")) + f" ({conv} attention FLOPs)"],
        ["Wall time at the assumed MFU", _seconds_days(_dig(plan, "time.wall_s"))],
        ["GPU-hours at the assumed MFU", _n(",.0f")(_dig(plan, "time.gpu_hours"))],
        ["Tokens per step", _n(",.0f")(_dig(plan, "batch.tokens_per_step"))],
        ["Optimizer steps", _n(",.0f")(_dig(plan, "batch.steps"))],
        ["DP gradient-sync lower bound per step",
         _n(".2f", " s")(_dig(plan, "communication.dp_grad_sync_lower_bound_s"))],
    ]
    if pred:
        s, pct = _n(".2f", " s"), _n(".1%")
        rows += [["Predicted step time (best layout)", s(pred.get("step_time_s")) + _band(plan, "step_time_s", s)],
                 ["Predicted MFU", mfu_text(pred) + _band(plan, "mfu", pct)],
                 ["Predicted tokens per second", _n(",.0f")(pred.get("tokens_per_s"))
                  + _band(plan, "tokens_per_s", _n(",.0f"))],
                 ["Predicted wall time", _n(",.2f", " days")(pred.get("days")) + _band(plan, "days", _n(",.2f"))],
                 ["Predicted GPU-hours", _n(",.0f")(pred.get("gpu_hours")) + _band(plan, "gpu_hours", _n(",.0f"))]]
    return rows


LAYOUT_HEAD = ["rank", "GPUs", "layout", "step time (s)", "80% band (s)", "within band of best", *MFU_HEAD,
               "memory per GPU (GB)", "fits"]


def _layout_rows(layouts: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per plan layout: rank, the labelled layout, step time and its 80% band, within
    band of the best, MFU (both conventions), memory (GB), fits."""
    s = _n(".3f")
    return [[i, _n(",.0f")(entry.get("gpus")), layout_words(entry), s(entry.get("step_time_s")),
             f"{s(entry.get('step_time_s_low'))}-{s(entry.get('step_time_s_high'))}"
             if num(entry.get("step_time_s_low")) is not None else "—",
             yes_no(entry.get("within_band_of_best")), *mfu_cells(entry),
             _n(",.1f")(None if num(t := _dig(entry, "memory_per_gpu_bytes.total")) is None else t / 1e9),
             yes_no(entry.get("fits"))]
            for i, entry in enumerate(layouts, 1)]


def _ladder_section(choice: dict[str, Any] | None) -> str:
    """The seed ladder's choice against the best layout: rank, slowdown and why."""
    if not choice or "layout" not in choice:
        return ""
    rank = (f"ranks {choice['rank_min']:,}-{choice['rank_max']:,} of {choice['fitting_layouts']:,} "
            "fitting layouts" if "rank_min" in choice else (choice.get("rank_note") or "does not fit"))
    slower = num(choice.get("slower_than_best"))
    head = (f"<p class=\"ladder-choice\">{escape(layout_label(choice['layout']))}: "
            f"{escape(_n('.2f', ' s')(choice.get('step_time_s')))} per step, MFU {escape(mfu_text(choice))}, "
            f"{escape(rank)}" + (f", {slower:+.1%} against the best" if slower is not None else "")
            + f"; {escape(gb(_dig(choice, 'memory_per_gpu_bytes.total')))} per GPU, "
            + ("fits" if choice.get("fits") else "does not fit") + ".</p>")
    why = [[str(w.get("component", "")).replace("_", " "), _n("+.2f")(w.get("seconds"))]
           for w in choice.get("why") or []]
    return ("<h2>The seed ladder's choice</h2>" + head
            + (table(["component", "seconds more than the best (s)"], why, "ladder-why") if why else ""))


def _usable(plan: dict[str, Any], report: dict[str, Any]) -> tuple[float | None, float | None]:
    """The usable per-GPU memory (capacity less the margin, bytes) and the margin fraction: the
    report's, else the best layout's predicted total plus its headroom."""
    best = (plan.get("layouts") or [{}])[0]
    usable = report.get("usable_bytes")
    if usable is None and num(best.get("memory_headroom_bytes")) is not None:
        usable = best["memory_headroom_bytes"] + best["memory_per_gpu_bytes"]["total"]
    cap = num(report.get("capacity_bytes"))
    return usable, (None if usable is None or not cap else 1 - usable / cap)


def _charts(plan: dict[str, Any], report: dict[str, Any]) -> str:
    rows = report.get("layouts") or []
    if not rows:
        return ""
    ranked = [r for r in rows if str(r.get("label", "#")).startswith("#")]  # not the ladder's
    cap = float(report.get("capacity_bytes") or 0)
    usable, margin = _usable(plan, report)
    keys = "".join(f"<li>{escape(str(r.get('label') or f'#{i + 1}'))}: {escape(layout_label(r['layout']))}</li>"
                   for i, r in enumerate(rows))
    return (f"<h2>Per-GPU memory, top {len(ranked)} layouts</h2>"
            f"<p class=\"units\">GB = 1e9 bytes; capacity {escape(capacity_text(cap))} per GPU.</p>"
            + memory_chart(rows, cap, usable, margin)
            + "<h2>Step-time breakdown</h2>" + time_chart(rows)
            + f"<ul class=\"chart-keys\">{keys}</ul>")


def _warnings(plan: dict[str, Any]) -> str:
    items = plan.get("warnings") or []
    lis = "".join(f"<li>{escape(str(w))}</li>" for w in items)
    return f"<div class=\"warnings\"><h2>Warnings</h2><ul>{lis}</ul></div>" if items else ""


STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
         "text-align:right;white-space:nowrap}th{background:#f3f3f3;text-align:center;white-space:normal}"
         "table.scaling-grid,table.layouts{display:block;overflow-x:auto;max-width:100%}"
         "pre{white-space:pre-wrap;font-size:12px}table.layouts td:nth-child(3){white-space:normal;min-width:18em}"
         "td:first-child,table.layouts td:nth-child(3),table.summary td{text-align:left}"
         ".chart{border:1px solid #eee;margin:1em 0;background:#fff}.units{color:#555;font-size:0.9em}"
         ".warnings{border-left:4px solid #b36b00;padding-left:1em;background:#fff8e6}")


def render_report(plan: dict[str, Any], report: dict[str, Any], plan_id: str) -> str:
    """The HTML page of one stored plan (its report data holds the chart inputs)."""
    title = f"trainplan: {report.get('model', 'model')} on {report.get('cluster', 'cluster')}"
    gpu_gb = num(_dig(plan, "inputs.cluster.gpu.memory_gb"))
    cap_bytes = num(report.get("capacity_bytes")) or (None if gpu_gb is None else gpu_gb * 1e9)
    units = f"Memory in GB ({GB_NOTE})" + ("" if cap_bytes is None else
                                           f"; GPU capacity {capacity_text(cap_bytes)}: {CAPACITY_BASIS}") + "."
    layouts = plan.get("layouts") or []
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{escape(title)}</h1><p class=\"plan-id\">plan {escape(plan_id)} · GPU "
            f"{escape(str(report.get('gpu', '')))}</p><p class=\"units\">{escape(units)}</p>"
            + _warnings(plan)
            + "<h2>Estimates</h2>" + table(["quantity", "value"], _summary_rows(plan), "summary")
            + ("<h2>Layouts, best first</h2>" + table(LAYOUT_HEAD, _layout_rows(layouts), "layouts")
               if layouts else "")
            + _charts(plan, report)
            + _ladder_section(plan.get("ladder_choice"))
            + stages_section(plan.get("validation_stages"))
            + risk_section(plan.get("run_risk"))
            + failures_section(plan.get("failure_checks"))
            + "<h2>Full plan JSON</h2><details><summary>show</summary><pre>"
            + escape(json.dumps(plan, indent=1)) + "</pre></details></body></html>")
