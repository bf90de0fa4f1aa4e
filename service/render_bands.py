"""Error bands in words and table cells (solver.cost.bands): shared by the Markdown and HTML
renderers. An interval prints as `low-high` in the unit of its value; absent bands print '-'."""
from __future__ import annotations

from typing import Any


def interval(d: dict[str, Any], key: str, fmt: str = ".2f", scale: float = 1.0) -> str:
    """`low-high` of d[key + '_low'] and d[key + '_high'] (each divided by `scale`), or '-'."""
    low, high = d.get(f"{key}_low"), d.get(f"{key}_high")
    if low is None or high is None:
        return "-"
    return f"{format(low / scale, fmt)}-{format(high / scale, fmt)}"


def band_note(d: dict[str, Any]) -> str | None:
    """One sentence on where a prediction's bands come from, or None without bands."""
    band = d.get("band")
    if not band:
        return None
    st, mem = band["step_time"], band["memory"]

    def src(b: dict[str, Any]) -> str:
        who = "all frameworks pooled (too few runs of this one)" if b["group"] == "all" else b["group"]
        return f"{b['rows']} runs, {who}, {b['source']}"

    return (f"{band['level']:.0%} error bands: measured step time was {st['low_ratio']:.2f}-"
            f"{st['high_ratio']:.2f}x the prediction ({src(st)}); measured peak memory "
            f"{mem['low_ratio']:.2f}-{mem['high_ratio']:.2f}x ({src(mem)}). Method: {band['method']}.")
