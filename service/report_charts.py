"""Inline SVG charts of the report page (service.report_html): per-GPU memory of the top
layouts stacked by component, against the GPU's capacity and the usable limit after the
margin; each layout's step time stacked by component. Both have an axis with ticks and
units. No scripts, no external assets; every value from the plan is escaped.

Units: memory in GB = 1e9 bytes (the capacity also in GiB = 2^30 bytes), time in seconds.
"""
from __future__ import annotations

import math
from html import escape
from typing import Any

from service.render_text import GB_BYTES, capacity_text

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
STATE_PARTS = ("weights", "gradients", "optimizer")
WIDTH = 760
LABELS_W = 190  # the memory chart's right margin: where the limit lines are labelled
FONT = 'font-family="system-ui,sans-serif"'


def num(value: Any) -> float | None:
    """A JSON number as float; None for anything else (booleans included)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def memory_components(memory: dict[str, Any]) -> dict[str, float]:
    """Stackable components: all but 'total', and 'model_state' when its parts are given."""
    skip = {"total"} | ({"model_state"} if any(p in memory for p in STATE_PARTS) else set())
    return {k: v for k, v in memory.items() if k not in skip and (num(v) or 0) > 0}


def time_components(breakdown: dict[str, Any]) -> dict[str, float]:
    """Stackable step-time components (positive numbers, 'total' left out)."""
    return {k: v for k, v in breakdown.items() if k not in ("total", "step") and (num(v) or 0) > 0}


def nice_step(raw: float) -> float:
    """A 1-2-5 step at least `raw` (axis ticks)."""
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def ticks(top: float, count: int = 5) -> list[float]:
    """0 and 1-2-5 multiples up to `top` (in the axis's unit)."""
    step = nice_step(top / count) if top > 0 else 1.0
    return [i * step for i in range(int(top / step + 1e-9) + 1)]


def _label(rows: list[dict[str, Any]], i: int) -> str:
    return escape(str(rows[i].get("label") or f"#{i + 1}"))


def _colors(keys: list[str]) -> dict[str, str]:
    return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)}


def _legend(colors: dict[str, str], x: float, y: float) -> list[str]:
    out = []
    for i, (name, color) in enumerate(colors.items()):
        xi, yi = x + (i % 4) * 170, y + (i // 4) * 16
        out.append(f'<rect class="legend" x="{xi}" y="{yi}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{xi + 14}" y="{yi + 9}" font-size="11">{escape(name.replace("_", " "))}</text>')
    return out


def _hline(cls: str, value: float, y: float, left: float, lines: list[str], color: str, dash: str,
           dy: float = 0.0) -> str:
    """A horizontal limit line across the plot (data-bytes = its value), labelled in the right
    margin (`dy` moves the label off a neighbouring one)."""
    right = WIDTH - LABELS_W
    text = "".join(f'<tspan x="{right + 6}" dy="{0 if i == 0 else 13}">{escape(t)}</tspan>'
                   for i, t in enumerate(lines))
    return (f'<line class="{cls}" data-bytes="{value:.0f}" x1="{left}" y1="{y:.1f}" x2="{right}" '
            f'y2="{y:.1f}" stroke="{color}" stroke-dasharray="{dash}"/>'
            f'<text x="{right + 6}" y="{y + 4 + dy:.1f}" font-size="11" fill="{color}">{text}</text>')


def _y_axis(top_gb: float, base: float, plot_h: float, left: float, right: float) -> list[str]:
    """The memory axis: a line, ticks with GB labels, grid lines to `right`, the unit."""
    out = [f'<line class="axis y-axis" x1="{left}" y1="{base - plot_h}" x2="{left}" y2="{base}" stroke="#333"/>']
    for t in ticks(top_gb):
        y = base - t / top_gb * plot_h
        out.append(f'<line class="tick" x1="{left - 5}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="#333"/>'
                   f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text class="tick-label" x="{left - 8}" y="{y + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{t:g}</text>')
    out.append(f'<text class="axis-title" x="14" y="{base - plot_h / 2:.0f}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 14 {base - plot_h / 2:.0f})">memory per GPU (GB = 1e9 bytes)</text>')
    return out


def memory_chart(rows: list[dict[str, Any]], capacity_bytes: float, usable_bytes: float | None = None,
                 margin_fraction: float | None = None) -> str:
    """Stacked bars (GB per GPU by component) per layout, with the capacity line and, when
    given, the usable limit (capacity less the margin) the fit verdict uses."""
    parts = [memory_components(r.get("memory_per_gpu_bytes") or {}) for r in rows]
    keys = list(dict.fromkeys(k for p in parts for k in p))
    colors = _colors(keys)
    top = max([capacity_bytes] + [sum(p.values()) for p in parts]) * 1.12
    left, plot_h, base, right = 70, 240, 270, WIDTH - LABELS_W
    h = base + 50 + 16 * ((len(keys) + 3) // 4)
    slot = (right - left - 10) / max(1, len(rows))
    bar_w = min(60, slot * 0.6)
    svg = [f'<svg class="chart memory-chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{h}" '
           f'{FONT} role="img" aria-label="per-GPU memory by component, GB">',
           *_y_axis(top / GB_BYTES, base, plot_h, left, right),
           f'<line class="axis x-axis" x1="{left}" y1="{base}" x2="{right}" y2="{base}" stroke="#333"/>']
    for i, p in enumerate(parts):
        x = left + 10 + i * slot + (slot - bar_w) / 2
        y: float = base
        for key, value in p.items():
            bh = value / top * plot_h
            y -= bh
            svg.append(f'<rect class="bar" data-layout="{i}" data-component="{escape(key)}" '
                       f'data-bytes="{value:.0f}" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" '
                       f'height="{bh:.1f}" fill="{colors[key]}"><title>{escape(key.replace("_", " "))}: '
                       f'{value / GB_BYTES:,.1f} GB</title></rect>')
        cx = x + bar_w / 2
        svg.append(f'<text x="{cx:.1f}" y="{base + 16}" font-size="11" text-anchor="middle">{_label(rows, i)}</text>'
                   f'<text class="bar-total" x="{cx:.1f}" y="{y - 4:.1f}" font-size="11" text-anchor="middle">'
                   f'{sum(p.values()) / GB_BYTES:,.1f} GB</text>')
    cap_y = base - capacity_bytes / top * plot_h
    svg.append(_hline("capacity-line", capacity_bytes, cap_y, left,
                      ["capacity", capacity_text(capacity_bytes)], "#c00", "6 4", dy=-14))
    if usable_bytes:
        margin = "fit limit" if margin_fraction is None else f"fit limit: less {margin_fraction:.0%} margin"
        use_y = base - usable_bytes / top * plot_h
        svg.append(_hline("usable-line", usable_bytes, use_y, left,
                          [f"usable {usable_bytes / GB_BYTES:,.1f} GB", margin], "#b36b00", "2 3",
                          dy=max(0.0, cap_y + 14 - use_y)))
    svg += _legend(colors, left, base + 32)
    svg.append("</svg>")
    return "".join(svg)


def _x_axis(top_s: float, y: float, left: float, plot_w: float) -> list[str]:
    """The time axis: a line, ticks with second labels, grid lines up to the first bar, the unit."""
    out = [f'<line class="axis x-axis" x1="{left}" y1="{y}" x2="{left + plot_w}" y2="{y}" stroke="#333"/>']
    for t in ticks(top_s):
        x = left + t / top_s * plot_w
        out.append(f'<line class="tick" x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 5}" stroke="#333"/>'
                   f'<line class="grid" x1="{x:.1f}" y1="28" x2="{x:.1f}" y2="{y}" stroke="#eee"/>'
                   f'<text class="tick-label" x="{x:.1f}" y="{y + 18}" font-size="11" '
                   f'text-anchor="middle">{t:g}</text>')
    out.append(f'<text class="axis-title" x="{left + plot_w / 2:.0f}" y="{y + 36}" font-size="12" '
               'text-anchor="middle">step time (s)</text>')
    return out


def time_chart(rows: list[dict[str, Any]]) -> str:
    """Horizontal stacked bars: each layout's step time by component (seconds), on a time axis."""
    parts = [time_components(r.get("time_breakdown_s") or {}) for r in rows]
    keys = list(dict.fromkeys(k for p in parts for k in p))
    colors = _colors(keys)
    top = max([sum(p.values()) for p in parts] + [num(r.get("step_time_s")) or 0 for r in rows]
              + [1e-9]) * 1.12
    left, plot_w, row_h = 70, WIDTH - 70 - 30, 26
    axis_y = 30 + row_h * len(rows) + 4
    h = axis_y + 50 + 16 * ((len(keys) + 3) // 4)
    svg = [f'<svg class="chart time-chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{h}" '
           f'{FONT} role="img" aria-label="step time by component, seconds">',
           *_x_axis(top, axis_y, left, plot_w)]
    for i, p in enumerate(parts):
        y, x = 30 + i * row_h, float(left)
        svg.append(f'<text x="{left - 8}" y="{y + 14}" font-size="11" text-anchor="end">{_label(rows, i)}</text>')
        for key, value in p.items():
            bw = value / top * plot_w
            svg.append(f'<rect class="bar" data-layout="{i}" data-component="{escape(key)}" '
                       f'data-seconds="{value:.6g}" x="{x:.1f}" y="{y}" width="{bw:.1f}" '
                       f'height="{row_h - 6}" fill="{colors[key]}"><title>{escape(key.replace("_", " "))}: '
                       f'{value:.3g} s</title></rect>')
            x += bw
        svg.append(f'<text x="{x + 4:.1f}" y="{y + 14}" font-size="11">{sum(p.values()):.2f} s</text>')
    svg += _legend(colors, left, axis_y + 44)
    svg.append("</svg>")
    return "".join(svg)
