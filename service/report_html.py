"""A stored plan as one self-contained HTML page: tables plus inline SVG charts.

Charts: per-GPU memory of the top layouts stacked by component against the GPU capacity
line, and each layout's step-time breakdown. No scripts, no external assets. Every value
from the plan is escaped.
"""
from __future__ import annotations

import json
import math
from html import escape
from typing import Any

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
STATE_PARTS = ("weights", "gradients", "optimizer")


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _fmt(value: Any) -> str:
    v = _num(value)
    if v is None:
        return escape("—" if value is None else str(value))
    if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
        return f"{v:.3e}"
    return f"{v:,.4g}" if not float(v).is_integer() else f"{int(v):,}"


def _dig(data: dict, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def layout_label(layout: dict[str, Any]) -> str:
    """Short label, e.g. 'TP8 PP1 DP64 CP1 Z1 mb1 sel'."""
    rec = {"none": "no-rc", "selective": "sel", "full": "full"}.get(str(layout.get("recompute")), "")
    vpp = f" v{layout['vpp']}" if layout.get("vpp", 1) > 1 else ""
    return (f"TP{layout.get('tp')} PP{layout.get('pp')}{vpp} DP{layout.get('dp')} "
            f"CP{layout.get('cp')} Z{layout.get('zero_stage')} mb{layout.get('micro_batch')} {rec}"
            + (f" [{layout['framework']}]" if layout.get("framework") else ""))


def memory_components(memory: dict[str, Any]) -> dict[str, float]:
    """Stackable components: all but 'total', and 'model_state' when its parts are given."""
    skip = {"total"} | ({"model_state"} if any(p in memory for p in STATE_PARTS) else set())
    return {k: v for k, v in memory.items() if k not in skip and (_num(v) or 0) > 0}


def time_components(breakdown: dict[str, Any]) -> dict[str, float]:
    """Stackable step-time components (positive numbers, 'total' left out)."""
    return {k: v for k, v in breakdown.items() if k not in ("total", "step") and (_num(v) or 0) > 0}


def _nice_step(raw: float) -> float:
    """A 1-2-5 step at least `raw` (axis ticks)."""
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _label(rows: list[dict[str, Any]], i: int) -> str:
    return escape(str(rows[i].get("label") or f"#{i + 1}"))


def _colors(keys: list[str]) -> dict[str, str]:
    return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)}


def _legend(colors: dict[str, str], x: float, y: float) -> list[str]:
    out = []
    for i, (name, color) in enumerate(colors.items()):
        xi = x + (i % 4) * 150
        yi = y + (i // 4) * 16
        out.append(f'<rect class="legend" x="{xi}" y="{yi}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{xi + 14}" y="{yi + 9}" font-size="11">{escape(name)}</text>')
    return out


def memory_chart(rows: list[dict[str, Any]], capacity_bytes: float) -> str:
    """Stacked bars (GB per GPU by component) per layout, with a dashed capacity line."""
    parts = [memory_components(r.get("memory_per_gpu_bytes") or {}) for r in rows]
    keys = list(dict.fromkeys(k for p in parts for k in p))
    colors = _colors(keys)
    top = max([capacity_bytes] + [sum(p.values()) for p in parts]) * 1.1
    w, h, left, plot_h, base = 640, 340 + 16 * (len(keys) // 4), 60, 220, 250
    bar_w = min(60, 480 / max(1, len(rows)) * 0.6)
    svg = [f'<svg class="chart memory-chart" xmlns="http://www.w3.org/2000/svg" width="{w}" '
           f'height="{h}" role="img" aria-label="per-GPU memory by component">',
           f'<line class="axis" x1="{left}" y1="{base}" x2="{w - 10}" y2="{base}" stroke="#333"/>']
    step_gb = _nice_step(top / 1e9 / 5)
    tick = step_gb
    while tick * 1e9 < top:
        ty = base - tick * 1e9 / top * plot_h
        svg.append(f'<line class="grid" x1="{left}" y1="{ty:.1f}" x2="{w - 10}" y2="{ty:.1f}" '
                   f'stroke="#eee"/><text x="{left - 4}" y="{ty + 4:.1f}" font-size="10" '
                   f'text-anchor="end">{tick:g}</text>')
        tick += step_gb
    for i, p in enumerate(parts):
        x = left + 20 + i * (480 / max(1, len(rows)))
        y: float = base
        for key, value in p.items():
            bh = value / top * plot_h
            y -= bh
            svg.append(f'<rect class="bar" data-layout="{i}" data-component="{escape(key)}" '
                       f'data-bytes="{value:.0f}" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" '
                       f'height="{bh:.1f}" fill="{colors[key]}"><title>{escape(key)}: '
                       f'{value / 1e9:.2f} GB</title></rect>')
        svg.append(f'<text x="{x:.1f}" y="{base + 14}" font-size="10">{_label(rows, i)}</text>'
                   f'<text x="{x:.1f}" y="{y - 3:.1f}" font-size="10">{sum(p.values()) / 1e9:.1f}</text>')
    cap_y = base - capacity_bytes / top * plot_h
    svg.append(f'<line class="capacity-line" data-bytes="{capacity_bytes:.0f}" x1="{left}" '
               f'y1="{cap_y:.1f}" x2="{w - 10}" y2="{cap_y:.1f}" stroke="#c00" stroke-dasharray="6 4"/>')
    svg.append(f'<text x="{left + 4}" y="{cap_y - 4:.1f}" font-size="11" fill="#c00">GPU memory '
               f'{capacity_bytes / 1e9:g} GB</text>')
    svg.append(f'<text x="4" y="20" font-size="11">GB per GPU (max {top / 1e9:.0f})</text>')
    svg += _legend(colors, left, base + 30)
    svg.append("</svg>")
    return "".join(svg)


def time_chart(rows: list[dict[str, Any]]) -> str:
    """Horizontal stacked bars: each layout's step time by component (seconds)."""
    parts = [time_components(r.get("time_breakdown_s") or {}) for r in rows]
    keys = list(dict.fromkeys(k for p in parts for k in p))
    colors = _colors(keys)
    top = max([sum(p.values()) for p in parts] + [_num(r.get("step_time_s")) or 0 for r in rows]
              + [1e-9]) * 1.1
    left, plot_w, row_h = 60, 540, 26
    h = 40 + row_h * len(rows) + 40 + 16 * (len(keys) // 4)
    svg = [f'<svg class="chart time-chart" xmlns="http://www.w3.org/2000/svg" width="640" '
           f'height="{h}" role="img" aria-label="step time by component">',
           f'<text x="4" y="16" font-size="11">seconds per step (axis to {top:.3g} s)</text>']
    for i, p in enumerate(parts):
        y, x = 30 + i * row_h, float(left)
        svg.append(f'<text x="4" y="{y + 14}" font-size="10">{_label(rows, i)}</text>')
        for key, value in p.items():
            bw = value / top * plot_w
            svg.append(f'<rect class="bar" data-layout="{i}" data-component="{escape(key)}" '
                       f'data-seconds="{value:.6g}" x="{x:.1f}" y="{y}" width="{bw:.1f}" '
                       f'height="{row_h - 6}" fill="{colors[key]}"><title>{escape(key)}: '
                       f'{value:.4g} s</title></rect>')
            x += bw
        svg.append(f'<text x="{x + 4:.1f}" y="{y + 14}" font-size="10">{sum(p.values()):.3g} s</text>')
    svg += _legend(colors, left, 40 + row_h * len(rows))
    svg.append("</svg>")
    return "".join(svg)


def _table(headers: list[str], rows: list[list[Any]], cls: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


SUMMARY = (("Parameters", "parameters.total"), ("Model state, bytes", "memory.model_state_bytes"),
           ("Training FLOPs", "flops.total"), ("Assumed MFU", "time.assumed_mfu"),
           ("Wall time, s", "time.wall_s"), ("GPU-hours", "time.gpu_hours"),
           ("Tokens per step", "batch.tokens_per_step"), ("Optimizer steps", "batch.steps"),
           ("DP grad-sync lower bound, s", "communication.dp_grad_sync_lower_bound_s"),
           ("Predicted step time, s (best layout)", "prediction.step_time_s"),
           ("  80% band, low", "prediction.step_time_s_low"), ("  80% band, high", "prediction.step_time_s_high"),
           ("Predicted MFU", "prediction.mfu"), ("  80% band, low", "prediction.mfu_low"),
           ("  80% band, high", "prediction.mfu_high"),
           ("Predicted tokens/s", "prediction.tokens_per_s"), ("  80% band, low", "prediction.tokens_per_s_low"),
           ("  80% band, high", "prediction.tokens_per_s_high"),
           ("Predicted wall time, days", "prediction.days"), ("  80% band, low", "prediction.days_low"),
           ("  80% band, high", "prediction.days_high"),
           ("Predicted GPU-hours", "prediction.gpu_hours"), ("  80% band, low", "prediction.gpu_hours_low"),
           ("  80% band, high", "prediction.gpu_hours_high"))


def _layout_rows(layouts: list[dict[str, Any]], columns: tuple[str, ...]) -> list[list[Any]]:
    """One row per plan layout: rank, layout fields, step time and its 80% band, within band of
    the best, MFU, memory (GB), fits."""
    return [[i] + [entry.get(c) for c in columns]
            + [entry.get("step_time_s"), entry.get("step_time_s_low"), entry.get("step_time_s_high"),
               "yes" if entry.get("within_band_of_best") else "", entry.get("mfu"),
               None if _num(total := _dig(entry, "memory_per_gpu_bytes.total")) is None
               else total / 1e9, entry.get("fits")]
            for i, entry in enumerate(layouts, 1)]


def _ladder_section(choice: dict[str, Any] | None) -> str:
    """The seed ladder's choice against the best layout: rank, slowdown and why."""
    if not choice or "layout" not in choice:
        return ""
    rank = (f"ranks {choice['rank_min']}-{choice['rank_max']} of {choice['fitting_layouts']} "
            "fitting layouts" if "rank_min" in choice else (choice.get("rank_note") or "does not fit"))
    slower = _num(choice.get("slower_than_best"))
    head = (f"<p class=\"ladder-choice\">{escape(layout_label(choice['layout']))}: "
            f"{_fmt(choice.get('step_time_s'))} s per step, MFU {_fmt(choice.get('mfu'))}, {rank}"
            + (f", {slower:.1%} slower than the best" if slower is not None else "") + ".</p>")
    why = [[w.get("component"), w.get("seconds")] for w in choice.get("why") or []]
    return ("<h2>The seed ladder's choice</h2>" + head
            + (_table(["component", "seconds more than the best"], why, "ladder-why") if why else ""))


def _failures_section(checks: Any) -> str:
    """The plan's failure checks, one sentence each (the lines of the Markdown plan)."""
    if not checks:
        return ""
    from service.render_md import failure_lines

    lis = "".join(f"<li>{escape(line)}</li>" for line in failure_lines(checks))
    return f"<h2>Failure checks</h2><ul class=\"failure-checks\">{lis}</ul>"


def _risk_section(risk: Any) -> str:
    """The plan's run-risk section (the Markdown plan's bullets, escaped)."""
    if not isinstance(risk, dict) or "checkpoint" not in risk:
        return ""
    from service.render_md import run_risk_lines

    lines = run_risk_lines(risk)
    lis = "".join(f"<li>{escape(line.lstrip('- ').replace('**', ''))}</li>" for line in lines[1:])
    return (f"<h2>Run risk</h2><p>{escape(lines[0])}</p><ul class=\"run-risk\">{lis}</ul>")


def _gpus_of(stage: dict[str, Any]) -> str:
    """A stage's GPU count, or the range its scaling grid spans ('' when neither is given)."""
    if _num(stage.get("gpus")) is not None:
        return f"{int(stage['gpus']):,} GPUs"
    counts = [int(g["gpus"]) for g in stage.get("grid") or [] if _num(g.get("gpus")) is not None]
    if not counts:
        return ""
    lo, hi = min(counts), max(counts)
    return f"{lo:,} GPUs" if lo == hi else f"{lo:,}-{hi:,} GPUs"


def _gb_text(value: Any) -> str:
    return "—" if _num(value) is None else f"{value / 1e9:,.1f}"


def _grid_table(grid: list[dict[str, Any]]) -> str:
    """Stage 2's scaling grid: one row per GPU count, the cells of the Markdown plan."""
    from service.render_md import GRID_HEAD, grid_cells

    return _table(GRID_HEAD, [grid_cells(g) for g in grid], "scaling-grid")


def _stage_facts(stage: dict[str, Any]) -> list[str]:
    """Escaped one-line facts of a stage, the same ones render_md._stages prints."""
    facts, e = [], stage.get("expect") or {}
    if _num(e.get("parameters")) is not None:
        facts.append(f"expect {e['parameters']:,} parameters")
    if _num(e.get("flops_per_step")) is not None:
        facts.append(f"expect {e['flops_per_step']:.3e} FLOPs per step")
    if _num(e.get("model_state_per_gpu_bytes_full_scale")) is not None:
        facts.append("per-GPU model state of the best layout at full scale "
                     f"{_gb_text(e['model_state_per_gpu_bytes_full_scale'])} GB")
    if stage.get("full_model_fits_one_node") is False:
        facts.append("the full model does not fit one node: use a reduced-depth proxy")
    if stage.get("keep"):
        facts.append(f"keep the {stage['keep']}")
    if _num(stage.get("checkpoint_bytes")) is not None:
        facts.append(f"checkpoint {_gb_text(stage['checkpoint_bytes'])} GB (weights + optimizer state)"
                     + (f", predicted write {stage['checkpoint_write_s']:.1f} s"
                        if _num(stage.get("checkpoint_write_s")) is not None else ""))
    if _num(stage.get("tokens")) is not None:
        facts.append(f"{stage['tokens']:.3g} tokens")
    if _num(stage.get("steps")) is not None:
        facts.append(f"{stage['steps']:,} steps")
    if _num(stage.get("gpu_hours")) is not None:
        facts.append(f"{stage['gpu_hours']:,.0f} GPU-hours")
    return [escape(f) for f in facts]


def _lis(items: Any) -> str:
    return "".join(f"<li>{escape(str(x))}</li>" for x in (items if isinstance(items, list) else [items]))


def _stage(stage: Any, i: int) -> str:
    """One validation stage: heading (number, name, GPUs), facts, checks, grid, what to record."""
    if not isinstance(stage, dict):
        return f"<p class=\"stage\">{escape(stage if isinstance(stage, str) else json.dumps(stage))}</p>"
    gpus = _gpus_of(stage)
    head = (f"Stage {stage.get('stage', i)}: {stage.get('name', '')}" + (f" ({gpus})" if gpus else ""))
    out = f"<h3 class=\"stage\">{escape(head)}</h3>"
    facts = _stage_facts(stage)
    if facts:
        out += "<ul class=\"stage-facts\">" + "".join(f"<li>{f}</li>" for f in facts) + "</ul>"
    if stage.get("checks"):
        out += f"<p>Checks:</p><ul class=\"stage-checks\">{_lis(stage['checks'])}</ul>"
    if stage.get("grid"):
        out += _grid_table(stage["grid"])
    if stage.get("record"):
        out += f"<p>Record:</p><ul class=\"stage-record\">{_lis(stage['record'])}</ul>"
    return out


def _stages_section(stages: Any) -> str:
    """The staged first-experiments plan (solver.plan.validation_stages), all values escaped."""
    if not stages:
        return ""
    items = stages if isinstance(stages, list) else [stages]
    return ("<h2>Validation stages</h2><div class=\"validation-stages\">"
            + "".join(_stage(s, i) for i, s in enumerate(items, 1)) + "</div>")


STYLE = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
         "text-align:right}th{background:#f3f3f3}pre{white-space:pre-wrap;font-size:12px}"
         ".chart{border:1px solid #eee;margin:1em 0;background:#fff}")


def render_report(plan: dict[str, Any], report: dict[str, Any], plan_id: str) -> str:
    """The HTML page of one stored plan (its report data holds the chart inputs)."""
    rows = report.get("layouts") or []
    ranked = [r for r in rows if str(r.get("label", "#")).startswith("#")]  # not the ladder's
    title = f"trainplan: {report.get('model', 'model')} on {report.get('cluster', 'cluster')}"
    summary = _table(["quantity", "value"], [[name, _dig(plan, path)] for name, path in SUMMARY],
                     "summary")
    from solver.plan import LAYOUT_FIELDS  # the plan's layout fields, in contract order

    columns = (*LAYOUT_FIELDS, "framework")
    layouts = _table(["#"] + list(columns) + ["step_time_s", "80% band low", "80% band high",
                                              "within band of best", "mfu", "memory GB/GPU", "fits"],
                     _layout_rows(plan.get("layouts") or [], columns), "layouts")
    charts = ""
    if rows:
        charts = (f"<h2>Per-GPU memory, top {len(ranked)} layouts</h2>"
                  + memory_chart(rows, float(report.get("capacity_bytes") or 0))
                  + "<h2>Step-time breakdown</h2>" + time_chart(rows)
                  + "<ul class=\"chart-keys\">"
                  + "".join(f"<li>{_label(rows, i)}: {escape(layout_label(r['layout']))}</li>"
                            for i, r in enumerate(rows)) + "</ul>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{escape(title)}</h1><p class=\"plan-id\">plan {escape(plan_id)} · GPU "
            f"{escape(str(report.get('gpu', '')))}</p><h2>Estimates</h2>{summary}"
            f"<h2>Layouts, best first</h2>{layouts}{charts}"
            + _ladder_section(plan.get("ladder_choice"))
            + _stages_section(plan.get("validation_stages"))
            + _risk_section(plan.get("run_risk"))
            + _failures_section(plan.get("failure_checks"))
            + "<h2>Full plan JSON</h2><details><summary>show</summary><pre>"
            + escape(json.dumps(plan, indent=1)) + "</pre></details></body></html>")
