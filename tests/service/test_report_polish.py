"""The report page a newcomer reads (issue 12): chart axes with ticks and units, the usable
memory limit beside the capacity, human units, worded column headers, yes/no, MFU as % under
both attention conventions, warnings, GB = 1e9 bytes with the capacity also in GiB."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from service.render_text import capacity_text, layout_words
from service.report_html import render_report


class Cells(HTMLParser):
    """Header and cell texts of one table (by class), chart texts (by svg class) and line attrs."""

    def __init__(self, table: str) -> None:
        super().__init__()
        self.table = table
        self.head: list[str] = []
        self.rows: list[list[str]] = []
        self.texts: dict[str, list[str]] = {}
        self.lines: dict[str, list[dict]] = {}
        self._in = self._cell = False
        self._svg: str | None = None
        self._tag = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self._tag = tag
        if tag == "table":
            self._in = a.get("class") == self.table
        elif tag == "svg":
            self._svg = a.get("class", "").split()[-1]
            self.texts[self._svg], self.lines[self._svg] = [], []
        elif tag == "line" and self._svg:
            self.lines[self._svg].append(a)
        elif self._in and tag == "tr":
            self.rows.append([])
        elif self._in and tag in ("td", "th"):
            self._cell = True
            (self.head if tag == "th" else self.rows[-1]).append("")

    def handle_data(self, data):
        if self._cell:
            target = self.rows[-1] if self.rows and self.rows[-1] is not None and self._tag == "td" else self.head
            target[-1] += data
        elif self._svg and data.strip():
            self.texts[self._svg].append(data.strip())

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = False
        elif tag == "table":
            self._in = False
        elif tag == "svg":
            self._svg = None


def parse(html: str, table: str) -> Cells:
    p = Cells(table)
    p.feed(html)
    p.rows = [r for r in p.rows if r]
    return p


@pytest.fixture(scope="module")
def page(seed_plan_page) -> str:
    return seed_plan_page[1]


def visible(html: str) -> str:
    """The page without the raw JSON kept in <details> at its end."""
    return html[:html.index("<details>")]


def test_memory_chart_axis_capacity_and_usable_limit(page):
    p = parse(page, "")
    texts, lines = p.texts["memory-chart"], p.lines["memory-chart"]
    assert "memory per GPU (GB = 1e9 bytes)" in texts
    ticks = [float(t) for t in texts if re.fullmatch(r"\d+(\.\d+)?", t)]
    assert ticks[:5] == [0, 20, 40, 60, 80]  # 1-2-5 steps to the 80 GB capacity
    by_class = {ln.get("class"): ln for ln in lines}
    cap, usable = by_class["capacity-line"], by_class["usable-line"]
    # seed GPU: memory_gb 80 -> 80e9 bytes; the 10% margin (CostOptions.memory_margin_fraction)
    # leaves 80e9 x 0.9 = 72e9 bytes usable, drawn below the capacity line (larger y)
    assert float(cap["data-bytes"]) == 80e9
    assert float(usable["data-bytes"]) == pytest.approx(72e9)
    assert float(usable["y1"]) > float(cap["y1"])
    assert "80 GB (74.5 GiB)" in texts and "usable 72.0 GB" in texts and "fit limit: less 10% margin" in texts


def test_time_chart_has_a_seconds_axis_with_ticks(page):
    p = parse(page, "")
    texts = p.texts["time-chart"]
    assert "step time (s)" in texts
    assert [t for t in texts if re.fullmatch(r"\d+", t)] == ["0", "2", "4", "6", "8"]  # seed: ~7.1 s steps
    assert len([ln for ln in p.lines["time-chart"] if ln.get("class") == "tick"]) == 5


def test_summary_in_human_units(seed_plan_page):
    plan, page = seed_plan_page
    rows = dict(parse(page, "summary").rows)
    assert rows["Model state (weights, gradients, optimizer)"] == "834.0 GB"
    assert rows["Wall time at the assumed MFU"] == "564,176 s (6.53 days)"  # seed: 564,176 s
    assert rows["GPU-hours at the assumed MFU"] == "80,238"
    assert rows["Assumed MFU"] == "50% (non-causal attention FLOPs)"
    p = plan["prediction"]
    assert rows["Predicted MFU"].startswith(f"{p['mfu']:.1%} (non-causal attention FLOPs; causal {p['mfu_causal']:.1%}")
    # no value in raw scientific notation except the FLOP count
    assert [k for k, v in rows.items() if re.search(r"\de[+-]\d", v)] == ["Training FLOPs"]


def test_layout_table_headers_in_words_yes_no_and_percent(seed_plan_page):
    plan, page = seed_plan_page
    t = parse(page, "layouts")
    assert all("_" not in h for h in t.head), t.head
    assert "MFU, non-causal attention FLOPs" in t.head and "MFU, causal attention FLOPs" in t.head
    col = {h: i for i, h in enumerate(t.head)}
    first = t.rows[0]
    assert first[col["layout"]] == layout_words(plan["layouts"][0])
    assert first[col["MFU, non-causal attention FLOPs"]] == f"{plan['layouts'][0]['mfu_noncausal']:.1%}"
    assert {r[col["fits"]] for r in t.rows} == {"yes"}
    assert "True" not in visible(page) and "False" not in visible(page)


def test_units_line_and_warnings_section():
    plan = {"layouts": [], "warnings": ["the global batch is one sequence (8,192 tokens at seq_len 8,192)"],
            "inputs": {"cluster": {"gpu": {"memory_gb": 141}}}}
    html = render_report(plan, {"capacity_bytes": 141e9}, "x")
    assert "GB = 1e9 bytes" in html and f"GPU capacity {capacity_text(141e9)}" in html
    assert capacity_text(141e9) == "141 GB (131.3 GiB)"  # 141e9 / 2^30 = 131.32
    assert '<div class="warnings"><h2>Warnings</h2><ul><li>the global batch is one sequence' in html


def test_layout_words_label_every_field_and_show_new_ones():
    words = layout_words({"tp": 2, "pp": 2, "vpp": 3, "dp": 8, "cp": 2, "ep": 4, "etp": 1, "zero_stage": 1,
                          "sequence_parallel": True, "micro_batch": 1, "recompute": "full",
                          "framework": "megatron-core"})
    assert words == ("TP 2 · PP 2 · VPP 3 · DP 8 · CP 2 · EP 4 · expert TP 1 · ZeRO-1 · sequence parallel · "
                     "micro-batch 1 · recompute full [megatron-core]")
    assert "EP" not in layout_words({"tp": 8, "pp": 1, "dp": 64, "ep": 1, "zero_stage": 2})


def test_moe_estimate_markdown_labels_ep_and_prints_the_moe_figures(capsys):
    """A MoE layout's EP shows in the labelled layout, and estimate.moe (solver.cost.moe_summary)
    prints field by field in human units (generic: a field added later prints too)."""
    import json

    from service.cli import main

    layout = json.dumps({"tp": 2, "dp": 256, "ep": 8, "zero_stage": 1})
    assert main(["estimate", "--model", "tests/fixtures/hf/mixtral-8x7b/config.json", "--cluster", "seed-512",
                 "--training", "seed-300b", "--layout", layout, "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# Estimate: TP 2 · PP 1 · DP 256 · EP 8 · ZeRO-1 · micro-batch 1 · recompute none")
    assert "Mixture of experts:" in md and "- expert dp: 32" in md  # 512 / (EP 8 x ETP 2)
