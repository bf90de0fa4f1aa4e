"""The report page parsed with html.parser: tables, SVG bars, the capacity line, escaping."""
from __future__ import annotations

from html.parser import HTMLParser

import pytest

from service.report_html import memory_components, render_report, time_components

SEED = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"}


class Page(HTMLParser):
    """Collects tables, and per SVG chart (by class) its bar rects and lines."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, dict[str, list[dict]]] = {}
        self.tables: list[str] = []
        self.scripts = 0
        self.texts: list[str] = []
        self._chart: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self._chart = a.get("class", "").split()[-1]
            self.charts[self._chart] = {"bars": [], "lines": []}
        elif tag == "rect" and self._chart and "bar" in a.get("class", "").split():
            self.charts[self._chart]["bars"].append(a)
        elif tag == "line" and self._chart:
            self.charts[self._chart]["lines"].append(a)
        elif tag == "table":
            self.tables.append(a.get("class", ""))
        elif tag == "script":
            self.scripts += 1

    def handle_data(self, data):
        if self._chart:
            self.texts.append(data.strip())

    def handle_endtag(self, tag):
        if tag == "svg":
            self._chart = None


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


ROWS = [  # two layouts, renderer input (numbers chosen for an exact check of bar geometry)
    {"layout": {"tp": 8, "pp": 1, "dp": 64, "cp": 1, "vpp": 1, "zero_stage": 1, "micro_batch": 1,
                "recompute": "selective"},
     "memory_per_gpu_bytes": {"weights": 20e9, "gradients": 20e9, "optimizer": 10e9,
                              "activations": 30e9, "model_state": 50e9, "total": 80e9},
     "time_breakdown_s": {"compute": 4.0, "tp_comm": 1.0, "dp_exposed": 0.5, "total": 5.5}},
    {"layout": {"tp": 4, "pp": 2, "dp": 64, "cp": 1, "vpp": 2, "zero_stage": 3, "micro_batch": 2,
                "recompute": "full"},
     "memory_per_gpu_bytes": {"weights": 1e9, "activations": 20e9, "total": 21e9},
     "time_breakdown_s": {"compute": 6.0, "bubble": 0.0}},
]


def test_memory_chart_bars_and_capacity_line():
    html = render_report({"layouts": []}, {"layouts": ROWS, "capacity_bytes": 80e9,
                                          "model": "m", "cluster": "c"}, "abc")
    page = parse(html)
    mem = page.charts["memory-chart"]
    # model_state is the sum of weights+gradients+optimizer, so it is not stacked again
    assert len(mem["bars"]) == 4 + 2
    assert sorted({b["data-component"] for b in mem["bars"]}) == \
        ["activations", "gradients", "optimizer", "weights"]
    capacity = [ln for ln in mem["lines"] if "capacity-line" in ln.get("class", "")]
    assert len(capacity) == 1 and float(capacity[0]["data-bytes"]) == 80e9
    # layout 1 totals exactly the capacity: its top bar edge sits on the capacity line
    top = min(float(b["y"]) for b in mem["bars"] if b["data-layout"] == "0")
    assert abs(top - float(capacity[0]["y1"])) < 0.2
    t = page.charts["time-chart"]
    assert len(t["bars"]) == 3 + 1  # zero-length 'bubble' and 'total' are not drawn
    assert page.scripts == 0


def test_component_filters():
    assert set(memory_components({"model_state": 5, "total": 9, "activations": 4})) == \
        {"model_state", "activations"}
    assert set(time_components({"a": 1, "total": 1, "b": -1, "c": None})) == {"a"}


def test_values_are_escaped():
    rows = [dict(ROWS[0], memory_per_gpu_bytes={"<b>x</b>": 1e9})]
    html = render_report({"layouts": [], "validation_stages": ["<script>alert(1)</script>"]},
                         {"layouts": rows, "capacity_bytes": 80e9, "model": "<script>m</script>",
                          "cluster": "c"}, "id")
    assert "<script>" not in html and parse(html).scripts == 0


def test_stored_plan_report_page(client):
    created = client.post("/v1/plans", json=SEED)
    assert created.status_code == 201, created.text
    plan = created.json()
    page = parse(client.get(plan["links"]["report"]).text)
    assert {"summary", "layouts"} <= set(page.tables)
    mem = page.charts["memory-chart"]
    # the top six layouts, then the seed ladder's choice (TP8 + ZeRO-1) for comparison
    shown = min(6, len(plan["layouts"])) + ("ladder_choice" in plan)
    assert {b["data-layout"] for b in mem["bars"]} == {str(i) for i in range(shown)}
    assert {b["data-layout"] for b in page.charts["time-chart"]["bars"]} == {str(i) for i in range(shown)}
    capacity = [ln for ln in mem["lines"] if "capacity-line" in ln.get("class", "")]
    assert float(capacity[0]["data-bytes"]) == 80e9  # seed GPU: 80 GB
    ranked = min(6, len(plan["layouts"]))
    for i in range(shown):  # every ranked layout fits: its stack stays under the line
        total = sum(float(b["data-bytes"]) for b in mem["bars"] if b["data-layout"] == str(i))
        if i < ranked:
            assert 0 < total <= 80e9
        else:  # the ladder's TP8 + ZeRO-1 is charted as predicted: 80.2 GB in Megatron-Core
            assert total == pytest.approx(plan["ladder_choice"]["memory_per_gpu_bytes"]["total"], rel=1e-6)
    assert "ladder-why" in page.tables and "ladder" in page.texts


class Grid(HTMLParser):
    """The cell texts of the 'scaling-grid' table: header, then one list per body row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in = self._cell = False

    def handle_starttag(self, tag, attrs):
        if tag == "table" and dict(attrs).get("class") == "scaling-grid":
            self._in = True
        elif self._in and tag == "tr":
            self.rows.append([])
        elif self._in and tag in ("td", "th"):
            self._cell = True
            self.rows[-1].append("")

    def handle_data(self, data):
        if self._cell:
            self.rows[-1][-1] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = False
        elif tag == "table":
            self._in = False


@pytest.fixture(scope="module")
def seed_plan():
    from solver.plan import build_plan
    from solver.presets import load_model, load_training
    from topology.catalog import load_cluster

    return build_plan(load_model("seed-70b"), load_cluster("seed-512"), load_training("seed-300b"))


def test_validation_stages_rendered_not_dumped(seed_plan):
    """Each stage gets a heading, its checks a list, stage 2's grid a table; no JSON dump."""
    html = render_report(seed_plan, {}, "seed")
    stages = seed_plan["validation_stages"]
    section = html[html.index("<h2>Validation stages</h2>"):html.index("<h2>Failure checks</h2>")]
    assert "<pre>" not in section and "&quot;" not in section and '"grid"' not in section
    grid = Grid()
    grid.feed(section)
    head, *rows = grid.rows
    assert head[:7] == ["GPUs", "TP", "PP", "VPP", "DP", "CP", "ZeRO"]  # the whole searched layout
    assert [r[0] for r in rows] == [f"{g['gpus']:,}" for g in stages[1]["grid"]]
    assert rows[-1][0] == "512" and rows[-1][10] == "4,194,304"  # seed: 512 GPUs, 4,194,304 tok/step
    for s in stages:
        assert f"Stage {s['stage']}: {s['name']}" in section
        for check in s.get("checks", []):
            assert f"<li>{check}</li>" in section
    assert "Stage 1: one-node correctness (8 GPUs)" in section  # seed: 8 GPUs per node
    # the raw JSON stays available, only inside the <details> at the end
    assert html.index("<details>") > html.index("<h2>Failure checks</h2>")
    assert "&quot;validation_stages&quot;" in html[html.index("<details>"):]


def test_validation_stage_values_are_escaped():
    stages = [{"stage": 1, "name": "<b>n</b>", "gpus": 8, "checks": ["<i>c</i>"]},
              {"stage": 2, "name": "s", "grid": [{"gpus": 8, "dp": 1, "note": "<script>x</script>"}]}]
    html = render_report({"layouts": [], "validation_stages": stages}, {}, "id")
    assert "<b>n</b>" not in html and "<i>c</i>" not in html and "<script>" not in html
    assert "&lt;b&gt;n&lt;/b&gt;" in html and "Stage 2: s (8 GPUs)" in html


def test_failure_checks_are_sentences_not_json(seed_plan):
    """The report lists each failure check as the Markdown plan's sentence, not a JSON dump."""
    from html import escape

    from service.render_md import failure_lines, render_plan

    html = render_report(seed_plan, {}, "seed")
    section = html[html.index("<h2>Failure checks</h2>"):html.index("<details>")]
    assert "<pre>" not in section and "&quot;" not in section
    lines = failure_lines(seed_plan["failure_checks"])
    assert len(lines) == len(seed_plan["failure_checks"]) > 0
    assert section.count("<li>") == len(lines)
    md = render_plan(seed_plan)
    for line in lines:
        assert f"<li>{escape(line)}</li>" in section and f"- {line}" in md
