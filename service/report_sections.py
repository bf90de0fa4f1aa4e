"""Report-page sections built from the plan's text (service.report_html): validation stages,
run risk, failure checks. The sentences are the Markdown plan's (service.render_md), escaped;
numbers in human units (GB = 1e9 bytes, s, GPU-hours with thousands separators).
"""
from __future__ import annotations

import json
from html import escape
from typing import Any

from service.report_charts import num as _num


def table(headers: list[str], rows: list[list[Any]], cls: str) -> str:
    """An HTML table of already formatted cells (every header and cell escaped)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape('—' if c is None else str(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def failures_section(checks: Any) -> str:
    """The plan's failure checks, one sentence each (the lines of the Markdown plan)."""
    if not checks:
        return ""
    from service.render_md import failure_lines

    lis = "".join(f"<li>{escape(line)}</li>" for line in failure_lines(checks))
    return f"<h2>Failure checks</h2><ul class=\"failure-checks\">{lis}</ul>"


def risk_section(risk: Any) -> str:
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

    return table(GRID_HEAD, [grid_cells(g) for g in grid], "scaling-grid")


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
        facts.append(f"{stage['tokens']:,.0f} tokens")
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


def stages_section(stages: Any) -> str:
    """The staged first-experiments plan (solver.plan.validation_stages), all values escaped."""
    if not stages:
        return ""
    items = stages if isinstance(stages, list) else [stages]
    return ("<h2>Validation stages</h2><div class=\"validation-stages\">"
            + "".join(_stage(s, i) for i, s in enumerate(items, 1)) + "</div>")


