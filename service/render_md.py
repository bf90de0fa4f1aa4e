"""Markdown renderer for the plan JSON (shaped like reference/seed-70b-plan.md); the
estimate's is service.render_estimate.

They only format numbers already in the result; no arithmetic beyond unit conversion
(GB = 1e9 bytes, GiB = 2^30 bytes, hours = s / 3600, days = s / 86400). Sections are
written as '## Title' / '### Title' and numbered in order by number_sections, so the
numbering stays consistent when a section is added or left out.
"""
from __future__ import annotations

import re
from typing import Any

from service.render_bands import band_note, interval
from service.render_text import (
    CAPACITY_BASIS, GB_NOTE, MFU_HEAD, capacity_text, gb as _gb, layout_words, mfu_cells, mfu_text,
)


def _b(x: float) -> str:
    return f"{x / 1e9:,.2f}B"


def md_table(head: list[str], rows: list[list[Any]]) -> list[str]:
    """Lines of a Markdown table (cells printed with str())."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _parameters(p: dict[str, Any]) -> list[str]:
    c = p["by_component"]
    rows = [
        ["attention per layer (q, k, v, o)", f"{c['attention_per_layer']:,}"],
        ["feed-forward per layer", f"{c['ffn_per_layer']:,}"],
        ["norms per layer", f"{c['norms_per_layer']:,}"],
        [f"x {c['layers']} layers", f"{c['transformer_layers']:,}"],
        ["token embedding", f"{c['embedding']:,}"],
        ["learned positions", f"{c['position_embedding']:,}"],
        ["untied LM head", f"{c['lm_head']:,}"],
        ["final norm", f"{c['final_norm']:,}"],
        ["**total**", f"**{p['total']:,}** ({_b(p['total'])})"],
    ]
    return ["## Parameters", ""] + md_table(["component", "parameters"], rows)


def _memory(m: dict[str, Any]) -> list[str]:
    c, bpp = m["by_component"], m["bytes_per_parameter"]
    return ["", "## Model-state memory", "", f"Memory in GB ({GB_NOTE}).", "",
            f"- weights: {bpp['weights']} B/param -> {_gb(c['weights'])}",
            f"- gradients: {bpp['gradients']} B/param -> {_gb(c['gradients'])}",
            f"- optimizer: {bpp['optimizer']} B/param -> {_gb(c['optimizer'])}",
            f"- **total: {_gb(m['model_state_bytes'])}** ({bpp['total']} B/param); excludes {m['excludes']}."]
    + ([f"- Note: {m['per_layout_recipe']}."] if m.get("per_layout_recipe") else [])


def _compute(f: dict[str, Any], t: dict[str, Any]) -> list[str]:
    cost = "" if t["cost"] is None else f"; cost {t['cost']:,.0f} at {t['price_per_gpu_hour']:g}/GPU-hour"
    return ["", "## Training FLOPs", "",
            f"- parameter matmuls 6 N T: {f['parameter_matmul']:.3e}",
            f"- attention 12 S T (H dh) L ({f['attention_convention']}): {f['attention']:.3e}",
            f"- **total: {f['total']:.3e}** (non-causal {f['total_non_causal']:.3e}; "
            f"causal {f['total_causal']:.3e})",
            "", f"## Wall time at {t['assumed_mfu']:.0%} MFU "
            f"({t.get('mfu_attention_convention', f['attention_convention'])} attention FLOPs)", "",
            f"{f['total']:.3e} / ({t['gpus']} GPUs x {t['cluster_peak_flops'] / t['gpus']:.3e} FLOP/s "
            f"x {t['assumed_mfu']:g}) = **{t['wall_s']:,.0f} s = {t['days']:.2f} days**",
            "", "## GPU-hours", "",
            f"**{t['gpu_hours']:,.0f} GPU-hours**{cost}, before failed runs, evaluation, "
            "checkpoints and recovery."]


_lay = layout_words


def capacity_line(plan: dict[str, Any]) -> str:
    """'GPU memory 80 GB (74.5 GiB) per GPU; GB = 1e9 bytes ...; capacity basis'."""
    cap = plan["inputs"]["cluster"]["gpu"]["memory_gb"] * 1e9
    return f"GPU memory {capacity_text(cap)} per GPU ({GB_NOTE}); {CAPACITY_BASIS}."


def _ladder(plan: dict[str, Any]) -> list[str]:
    lad = plan["ladder"]
    out = ["", "## First parallel layout", "", capacity_line(plan), "",
           "### The seed's ladder (model state only)", ""]
    if "rungs" not in lad:
        return out + [f"No ladder rung fits: {lad.get('infeasible', '')}"]
    rows = [[f"TP {r['tp']} · PP {r['pp']} · DP {r['dp']}", f"ZeRO-{r['zero_stage']}",
             _gb(r["memory_per_gpu_bytes"]["weights"]), _gb(r["memory_per_gpu_bytes"]["gradients"]),
             _gb(r["memory_per_gpu_bytes"]["optimizer"]), _gb(r["memory_per_gpu_bytes"]["total"]),
             _gb(r["memory_free_bytes"]), "yes" if r["fits"] else "no"] for r in lad["rungs"]]
    out += [f"- TP = {lad['tp']}: {lad['tp_reason']}.",
            f"- DP = {lad['dp']}: {lad['dp_reason']}.",
            f"- Lightest ZeRO stage whose model state leaves >= {lad['min_free_fraction']:.0%} "
            "of memory for activations:", ""]
    out += md_table(["layout", "ZeRO", "weights/GPU", "grads/GPU", "optimizer/GPU",
                   "model state/GPU", "left", "fits"], rows)
    out += ["", f"Ladder choice: TP {lad['tp']} · PP {lad['pp']} · DP {lad['dp']} · "
            f"ZeRO-{lad['chosen_zero_stage']}, {_gb(lad['memory_left_bytes'])} left after model "
            "state. If activations do not fit: "
            + "; ".join(f"{i}. {s}" for i, s in enumerate(lad["if_activations_do_not_fit"], 1)) + "."]
    return out


def layout_gpus(d: dict[str, Any]) -> int:
    """GPUs a layout uses: its `gpus` field if present, else tp x pp x dp x cp."""
    return d["gpus"] if d.get("gpus") is not None else d["tp"] * d["pp"] * d["dp"] * d.get("cp", 1)


def _ranked(plan: dict[str, Any]) -> list[str]:
    s, lays = plan.get("search", {}), plan["layouts"]
    if "step_time_s" not in lays[0]:
        return []
    out = ["", "### Ranked layouts (cost model, CP-SAT search)", "",
           f"Status **{s.get('status', '?')}** in {s.get('seconds', 0):.2f} s; best first."]
    if s.get("tied_layouts", 0) > 1:
        out += ["", f"Ranks 1-{s['tied_layouts']} are tied (within {s['tie_resolution']:.0%} of the "
                    f"fastest step time, the cost model's resolution): simplest first."]
    if s.get("band_sentence"):
        out += ["", s["band_sentence"]]
    rows = [[i, layout_gpus(d), _lay(d), f"{d['step_time_s']:.3f}", interval(d, "step_time_s", ".3f"),
             *mfu_cells(d), _gb(d["memory_per_gpu_bytes"]["total"]), "tied" if d.get("tied_with_best") else "",
             "yes" if d.get("within_band_of_best") else ""]
            for i, d in enumerate(lays, 1)]
    out += [""] + md_table(["rank", "GPUs", "layout", "step time (s)", "step time, 80% band (s)", *MFU_HEAD,
                            "memory per GPU", "tied", "within band of best"], rows)
    p = plan["prediction"]
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.2f} s" for k, v in p["time_breakdown_s"].items() if v >= 0.005)
    mem = ", ".join(f"{k.replace('_', ' ')} {_gb(v)}" for k, v in p["memory_per_gpu_bytes"].items() if k != "total")
    out += ["", f"**Recommended: {_lay(lays[0])}**: {p['step_time_s']:.2f} s per step "
            f"({interval(p, 'step_time_s')} s), MFU {mfu_text(p, extra='80% band ' + interval(p, 'mfu', '.1%'))}, "
            f"HFU {p['hfu']:.1%}, {p['tokens_per_s']:,.0f} tokens/s ({interval(p, 'tokens_per_s', ',.0f')}).",
            f"- time per step: {parts}",
            f"- memory per GPU: {mem}; total {_gb(p['memory_per_gpu_bytes']['total'])}"
            + (f" ({lays[0]['framework']} recipe: {lays[0]['memory_recipe']})" if lays[0].get("memory_recipe") else "")]
    if "wall_s" in p:
        out.append(f"- run at the predicted step time: {p['steps']:,} steps x {p['step_time_s']:.2f} s "
                   f"= {p['days']:.2f} days ({interval(p, 'days')}), {p['gpu_hours']:,.0f} GPU-hours "
                   f"({interval(p, 'gpu_hours', ',.0f')})")
    note = band_note(p)
    return out + ([f"- {note}"] if note else []) + _versus(plan)


def _versus(plan: dict[str, Any]) -> list[str]:
    c = plan.get("ladder_choice")
    if not c:
        return []
    rank = (f"ranks {c['rank_min']:,}" + (f"-{c['rank_max']:,}" if c["rank_max"] != c["rank_min"] else "")
            + f" of {c['fitting_layouts']:,} fitting layouts") if "rank_min" in c else (
                c.get("rank_note") or "does not fit")
    why = ", ".join(f"{w['component'].replace('_', ' ')} {w['seconds']:+.2f} s" for w in c["why"])
    m = c["memory_per_gpu_bytes"]
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.2f} s" for k, v in c["time_breakdown_s"].items() if v >= 0.005)
    spare = (f"; {_gb(c['memory_headroom_bytes'])} to spare after reserving "
             f"{c['memory_margin_reserved_fraction']:.0%} of memory as margin") if "memory_headroom_bytes" in c else ""
    out = ["", f"**The ladder's choice ({_lay(c['layout'])})** {rank}: {c['step_time_s']:.2f} s per "
            f"step, MFU {mfu_text(c)}, {c['slower_than_best']:+.1%} against the best; "
            f"{_gb(m['total'])} per GPU ({_gb(m['activations'])} activations) — "
            f"{'fits' if c['fits'] else 'does not fit'}{spare}. Time per step: {parts}. "
            f"Where it loses or gains against the best: {why}."]
    cc = c.get("communication")
    if cc:
        out.append(f"Its DP gradient-sync ring lower bound: 2 ({cc['dp_ranks']}-1)/{cc['dp_ranks']} x "
                   f"{_gb(cc['gradient_bytes_per_rank'])} / {cc['dp_bandwidth_gb_s']:g} GB/s = "
                   f"**{cc['dp_grad_sync_lower_bound_s']:.2f} s**; its batch: {c['batch']['dp']} DP x "
                   f"{c['batch']['micro_batch']} x {c['batch']['grad_accum']} accumulation.")
    return out


def _reference(plan: dict[str, Any]) -> list[str]:
    """The published figure (training.reference) beside the plan's GPU-hour estimates."""
    r = plan.get("reference")
    if not r:
        return []
    rows = [[e["estimate"], _lay(e["layout"]) if "layout" in e else "", f"{e['gpus']:,}",
             f"{e['step_time_s']:.2f}" if "step_time_s" in e else "",
             f"{e['mfu']:.1%}" if "mfu" in e else "",
             ("yes" if e["fits"] else "no") if "fits" in e else "",
             f"{e['gpu_hours']:,.0f}", f"{e['ratio_to_published']:.2f}"] for e in r["estimates"]]
    return (["", "### Published reference", "",
             f"Published: **{r['published_gpu_hours']:,.0f} GPU-hours** ({r['scope']}; {r['source']}). "
             f"The plan's estimates for {r['steps']:,} steps, ratio = estimate / published:", ""]
            + md_table(["estimate", "layout", "GPUs", "step s", "MFU", "fits", "GPU-hours",
                        "ratio"], rows))


def _batch_comm(b: dict[str, Any], c: dict[str, Any]) -> list[str]:
    note = "" if b["tokens_per_step"] == b["target_tokens_per_step"] else (
        f" (target was {b['target_tokens_per_step']:,}: retune learning rate and warmup)")
    steps = "n/a" if b["steps"] is None else f"{b['steps']:,}"
    return ["", "## Global batch", "",
            f"{b['dp']} DP x {b['micro_batch']} x {b['grad_accum']} accumulation x {b['seq_len']:,} "
            f"= **{b['tokens_per_step']:,} tokens per step**{note}; **{steps} steps**. "
            "Tensor- and context-parallel ranks work on the same sequences.",
            "", "## Communication check", "",
            f"2 ({c['dp_ranks']}-1)/{c['dp_ranks']} x {_gb(c['gradient_bytes_per_rank'])} / "
            f"{c['dp_bandwidth_gb_s']:g} GB/s = **{c['dp_grad_sync_lower_bound_s']:.2f} s** "
            "DP gradient-sync ring lower bound per step. Trace the last gradient buckets: a "
            "reduction tail after backward is exposed communication."]


GRID_HEAD = ["GPUs", "TP", "PP", "VPP", "DP", "CP", "ZeRO", "micro-batch", "recompute", "accumulation",
             "tokens per step", "model state per GPU", "memory per GPU", "predicted step time",
             *MFU_HEAD, "EP (ETP)", "note"]


def grid_cells(g: dict[str, Any]) -> list[Any]:
    """One row of stage 2's scaling grid as text (GB = 1e9 bytes; '-' or 'n/a' when not
    predicted), columns GRID_HEAD: GPUs, the searched layout (TP, PP, VPP, DP, CP, ZeRO,
    micro-batch, recompute), accumulation, tokens/step, model state/GPU, memory/GPU, step
    time, MFU, EP (ETP), note. The Markdown plan and the HTML report both print these cells."""
    def count(key: str) -> str:
        return "-" if g.get(key) is None else f"{g[key]:,}"

    return [count("gpus"), count("tp"), count("pp"), count("vpp"), count("dp"), count("cp"),
            "-" if g.get("zero_stage") is None else f"ZeRO-{g['zero_stage']}", count("micro_batch"),
            g.get("recompute") or "-", count("grad_accum"), count("tokens_per_step"),
            _gb(g.get("model_state_per_gpu_bytes")), _gb(g.get("memory_per_gpu_bytes")),
            "-" if g.get("step_time_s") is None else f"{g['step_time_s']:.2f} s",
            *mfu_cells(g), _ep_cell(g), g.get("note")]


def _ep_cell(g: dict[str, Any]) -> str:
    """A grid row's expert parallelism: 'EP (ETP)', the EP alone without an expert TP, '-' unsearched."""
    if g.get("ep") is None:
        return "-"
    return f"{g['ep']:,}" + ("" if g.get("etp") is None else f" ({g['etp']:,})")


def _stages(plan: dict[str, Any]) -> list[str]:
    s1, s2, s3, s4 = plan["validation_stages"]
    e = s1["expect"]
    out = ["", "## Validation stages", "",
           f"**Stage 1, {s1['name']}** ({s1['gpus']} GPUs): expect {e['parameters']:,} parameters, "
           f"{e['flops_per_step']:.3e} FLOPs per step"
           + ("" if s1["full_model_fits_one_node"] else " (the full model does not fit one node: "
              "use a reduced-depth proxy)") + "; " + "; ".join(s1["checks"]) + ".",
           "", f"**Stage 2, {s2['name']}**: keep the {s2['keep']}.", ""]
    out += md_table(GRID_HEAD, [grid_cells(g) for g in s2["grid"]])
    out += ["", "Record: " + ", ".join(s2["record"]) + ".",
            "", f"**Stage 3, {s3['name']}**: checkpoint {_gb(s3['checkpoint_bytes'])} (weights + "
            f"optimizer state), predicted write {s3['checkpoint_write_s']:.1f} s, every "
            f"{s3['checkpoint_interval_s']:,.0f} s (see Run risk); " + "; ".join(s3["checks"]) + ".",
            "", f"**Stage 4, {s4['name']}**: {s4['tokens']:,.0f} tokens ({s4['steps']:,} steps, "
            f"{s4['gpu_hours']:,.0f} GPU-hours); " + "; ".join(s4["checks"]) + "."]
    return out


def _days(s: float) -> str:
    return "never" if s == float("inf") else f"{s / 86_400:,.2f} days"


def money(amount: float | None, currency: str | None) -> str:
    """'1,234 USD', or '' when not priced."""
    return "" if amount is None else f"{amount:,.0f} {currency or ''}".rstrip()


def run_risk_lines(r: dict[str, Any]) -> list[str]:
    """The run-risk section (solver.plan_risk.run_risk_section) as Markdown bullets."""
    c, f, e = r["checkpoint"], r["failures"], r["expected"]
    every = "" if r.get("interval_steps") is None else f" = every {r['interval_steps']:,} steps"
    mode = (f"asynchronous ({c['async_flag']}): blocks {c['blocking_s']:.1f} s of a {c['write_s']:.1f} s write"
            if c["asynchronous"] else f"synchronous; asynchronous would be {c['async_flag']}")
    cost = money(r.get("cost"), r.get("currency"))
    return [
        f"For the recommended layout ({r['gpus']:,} GPUs, {c['framework']}), at the {r['work_basis']}:",
        f"- checkpoint: **{_gb(c['bytes'])}** ({_gb(c['weights_bytes'])} weights + "
        f"{_gb(c['optimizer_bytes'])} optimizer state; {c['format']}); written by {c['writer_nodes']:,} "
        f"nodes at {c['write_gb_s']:,.1f} GB/s: **{c['write_s']:.1f} s** ({mode}); a restart reads "
        f"{_gb(c['load_bytes'])} in {c['load_s']:.0f} s",
        f"- interruptions: {f['interruptions_per_gpu_hour']:.3g} per GPU-hour ({f['source']}): one every "
        f"{f['mtbi_s'] / 3600:,.1f} h on {r['gpus']:,} GPUs; restart {f['restart_s']:,.0f} s "
        f"(detect {f['detect_s']:.0f} + relaunch {f['relaunch_s']:.0f} + load {f['load_s']:.0f})",
        f"- checkpoint interval (Young/Daly): **{r['interval_s']:,.0f} s{every}**; {r['interval_formula']}",
        f"- expected over the run: **{e['interruptions']:.1f} interruptions**, {e['lost_work_s'] / 3600:,.1f} h "
        f"of lost work, {e['restart_total_s'] / 3600:,.1f} h restarting, {e['checkpoints']:,.0f} checkpoints "
        f"blocking {e['checkpoint_overhead_s'] / 3600:,.1f} h",
        f"- goodput (effective training time): **{r['goodput']:.1%}**",
        f"- with failures: **{_days(r['wall_s'])}, {r['gpu_hours']:,.0f} GPU-hours**"
        + (f", **{cost}** at {r['price_per_gpu_hour']:g} {r['currency']}/GPU-hour" if cost else "")
        + f" (failure-free {_days(r['work_s'])}); {r['wall_formula']}",
    ]


def _risk(plan: dict[str, Any]) -> list[str]:
    r = plan.get("run_risk")
    return [] if not r else ["", "## Run risk", ""] + run_risk_lines(r)


def _check_line(c: dict[str, Any]) -> str:
    """One failure check as a sentence (see failure_lines)."""
    who = f"[{c['layout']}] " if c.get("layout") else ""
    if "steps" in c:
        return (f"{who}{c['check']}: step time above {c['threshold_s']:.2f} s for {c['steps']:,} steps "
                f"means {c['signal']}.")
    if "predicted_s" in c:
        return (f"{who}{c['check']}: above {c['threshold_s']:.2f} s per step (predicted "
                f"{c['predicted_s']:.2f} s; unoverlapped ring bound {c['unoverlapped_s']:.2f} s) means "
                f"{c['signal']}.")
    if "threshold_s" in c:
        return f"{who}{c['check']}: above {c['threshold_s']:,.1f} s means {c['signal']}."
    if "threshold_bytes" in c:
        return (f"{who}{c['check']}: above {_gb(c['threshold_bytes'])} (predicted total; capacity "
                f"{_gb(c['capacity_bytes'])}, headroom {_gb(c['headroom_bytes'])}) means {c['signal']}.")
    if "expected" in c:
        return (f"{who}{c['check']}: more than {c['threshold']} in a day (planned {c['expected']:.2f}) "
                f"means {c['signal']}.")
    if "threshold" in c:
        return f"{who}{c['check']}: below {c['threshold']:.1%} means {c['signal']}."
    if "if_lower" in c:
        return _mfu_check(c)
    if "tokens_per_step" in c:
        return (f"{who}{c['check']}: {c['tokens_per_step']:,} vs target "
                f"{c['target_tokens_per_step']:,} tokens; {c['signal']}.")
    return f"{who}{c['check']}: {c['signal']}."


def _mfu_check(c: dict[str, Any]) -> str:
    """'MFU below assumption (assumed 50% on all GPUs, predicted 55.6%; non-causal attention
    FLOPs, causal: predicted 51.9%): at 40%: ...'."""
    alts = "; ".join(f"at {x['mfu']:.0%}: {x['days']:.1f} days, {x['gpu_hours']:,.0f} GPU-hours"
                     for x in c["if_lower"])
    conv = c.get("mfu_attention_convention", "non-causal")
    pred = "" if c.get("predicted_mfu") is None else f", predicted {c['predicted_mfu']:.1%}"
    other = "causal" if conv == "non-causal" else "non-causal"
    value = c.get(f"predicted_mfu_{other.replace('-', '')}")
    alt = "" if value is None else f", {other}: predicted {value:.1%}"
    return (f"{c['check']} (assumed {c['assumed_mfu']:.0%} on all GPUs{pred}; {conv} attention "
            f"FLOPs{alt}): {alts}.")


def failure_lines(checks: list[dict[str, Any]]) -> list[str]:
    """One sentence per failure check (solver.plan_risk.failure_checks): the layout it refers
    to, what to watch, the threshold and what crossing it means. The Markdown plan and the
    HTML report print these."""
    return [_check_line(c) for c in checks]


def _failures(checks: list[dict[str, Any]]) -> list[str]:
    return ["", "## Failure checks", ""] + [f"- {line}" for line in failure_lines(checks)]


def _assumptions(items: list[str]) -> list[str]:
    return ["", "## Assumptions", ""] + [f"- {a}" for a in items]


def number_sections(lines: list[str]) -> list[str]:
    """'## Title' -> '## 1. Title', '### Title' -> '### 1.1 Title', in order of appearance."""
    out, major, minor = [], 0, 0
    for line in lines:
        m = re.match(r"(#{2,3}) (.*)", line)
        if m and m.group(1) == "##":
            major, minor = major + 1, 0
            line = f"## {major}. {m.group(2)}"
        elif m:
            minor += 1
            line = f"### {major}.{minor} {m.group(2)}"
        out.append(line)
    return out


def _warnings(items: list[str]) -> list[str]:
    """Sanity warnings (solver.sanity) first, where they are seen: they are not a section."""
    return [f"**Warning**: {w}." if not w.endswith(".") else f"**Warning**: {w}" for w in items] + (
        [""] if items else [])


def _launch(plan: dict[str, Any]) -> list[str]:
    """Rank 1's launch line in the plan's framework (Megatron-LM and torchtitan: the torchrun line;
    DeepSpeed: the `deepspeed` line), or the framework's refusal; the whole artifact is `launch` in
    `--format json` (service.launchers.plan_launch)."""
    launch = plan.get("launch")
    if not launch:
        return []
    out = ["", f"## Launch of the recommended layout ({launch['framework']})", ""]
    if "refused" in launch:
        return out + [f"{launch['framework']} refuses it: {launch['refused']}"]
    line = launch.get("command") or launch.get("launcher", "")
    return out + ["```sh", line, "```", "", "The framework's own configuration (config module, DeepSpeed JSON) "
                  "and the rank placement: `launch` in `--format json`."]


def render_plan(plan: dict[str, Any]) -> str:
    """The whole plan as Markdown, in the seed's order, sections numbered."""
    i = plan["inputs"]
    head = [f"# Training plan: {i['model']['name']} on {i['cluster']['name']} "
            f"({plan['time']['gpus']} x {i['cluster']['gpu']['name']})", ""] + _warnings(plan.get("warnings", []))
    lines = (_parameters(plan["parameters"]) + _memory(plan["memory"])
             + _compute(plan["flops"], plan["time"]) + _ladder(plan) + _ranked(plan) + _launch(plan)
             + _reference(plan)
             + _batch_comm(plan["batch"], plan["communication"]) + _stages(plan)
             + _risk(plan) + _failures(plan["failure_checks"]) + _assumptions(plan["assumptions"]))
    return "\n".join(head + number_sections(lines))
