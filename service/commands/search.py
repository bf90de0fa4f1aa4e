"""`trainplan search`: ranked parallel layouts from the CP-SAT search."""
from __future__ import annotations

import argparse
from typing import Any

from service.cli import add_format, emit
from service.commands import load_capped_cluster
from service.commands.framework_args import (
    add_framework_flag, add_search_flags, search_flag_options, with_framework,
)
from service.commands.plan import add_price_arguments, training_from_args
from service.commands.profile_args import add_profile_flag, profile_for
from service.render_bands import interval
from service.render_md import layout_gpus, md_table
from service.render_text import CAPACITY_BASIS, GB_NOTE, MFU_HEAD, capacity_text, mfu_cells, yes_no
from solver.plan import LAYOUT_FIELDS
from solver.presets import load_model


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("search", help="ranked layouts (CP-SAT, exact for the cost model)")
    p.add_argument("--model", required=True,
                   help="model preset name, JSON path or inline JSON (native or HF config.json)")
    p.add_argument("--cluster", required=True, help="cluster preset name, JSON path or inline JSON object")
    p.add_argument("--training", required=True,
                   help="training preset name, JSON path or inline JSON object")
    p.add_argument("--top", type=int, default=10, help="distinct layouts to return (default 10)")
    p.add_argument("--time-limit", type=float, default=10.0, help="solver time limit, seconds")
    p.add_argument("--workers", type=int, default=2, help="CP-SAT workers (default 2)")
    p.add_argument("--seed", type=int, default=0, help="CP-SAT random seed")
    p.add_argument("--objective", choices=("step_time", "min_gpus", "min_gpus_deadline", "min_cost"),
                   default="step_time", help="what to minimize")
    p.add_argument("--deadline-s", type=float, default=None, help="run deadline for min_gpus_deadline")
    p.add_argument("--allow-fewer-gpus", action="store_true", help="layouts may leave GPUs idle")
    p.add_argument("--batch-tolerance", type=float, default=0.0,
                   help="allowed relative miss of the global batch (default 0: exact)")
    p.add_argument("--allow-tp-outside-node", action="store_true", help="TP may span nodes")
    p.add_argument("--gpus", type=int, default=None, help="use exactly this many GPUs (default: all)")
    p.add_argument("--split-stages", action=argparse.BooleanOptionalAction, default=False,
                   help="choose layers per pipeline stage (lighter first/last stages), reported "
                        "(default off: every stage is charged as the busiest rank)")
    p.add_argument("--moe-splits", action=argparse.BooleanOptionalAction, default=False,
                   help="MoE models: first/last pipeline splits where the layers do not divide over the "
                        "stages (Megatron-Core, torchtitan; default off here for latency, on in `plan`)")
    add_search_flags(p)
    add_framework_flag(p)
    add_price_arguments(p)
    add_profile_flag(p)
    add_format(p, "json")
    p.set_defaults(run=run)


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The SearchOptions fields given on the command line (validated by search_layouts)."""
    return {"top_k": args.top, "time_limit_s": args.time_limit, "workers": args.workers,
            "seed": args.seed, "objective": args.objective, "deadline_s": args.deadline_s,
            "allow_fewer_gpus": args.allow_fewer_gpus, "batch_tolerance": args.batch_tolerance,
            "allow_tp_outside_node": args.allow_tp_outside_node, "gpus": args.gpus,
            "split_stages": args.split_stages, "moe_splits": args.moe_splits, **search_flag_options(args)}


def run(args: argparse.Namespace) -> int:
    from solver.search import search_layouts

    model, cluster = load_model(args.model), load_capped_cluster(args.cluster)
    training = with_framework(training_from_args(args), args.framework)
    profile = profile_for(args, training.framework)
    result = search_layouts(model, cluster, training, options_from_args(args),
                            cost_options=None if profile is None else profile.options)
    result.step_band = None if profile is None else profile.step_band
    emit(result.as_dict(), args.format, lambda r: render_search(r, cluster.gpu.memory_bytes))
    return 0


COLUMNS = ("rank", *LAYOUT_FIELDS, "grad_accum", "framework")
# Column headers in words (a layout field not named here is printed with spaces for '_').
LABELS = {"tp": "TP", "pp": "PP", "dp": "DP", "cp": "CP", "vpp": "VPP", "ep": "EP", "etp": "expert TP",
          "sequence_parallel": "sequence parallel", "zero_stage": "ZeRO", "micro_batch": "micro-batch",
          "grad_accum": "accumulation"}


def column_label(name: str) -> str:
    return LABELS.get(name, name.replace("_", " "))


def layout_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The contract's layout fields, then any other LayoutSpec field some row sets away from its
    default (e.g. EP/ETP of a MoE layout), then accumulation and framework."""
    from solver.specs import LayoutSpec

    extra = [n for n, f in LayoutSpec.model_fields.items() if n not in LAYOUT_FIELDS
             and n not in ("rank_order", "pipeline_layers") and any(r.get(n, f.default) != f.default for r in rows)]
    return [*LAYOUT_FIELDS, *extra, "grad_accum", "framework"]


def cell(r: dict[str, Any], name: str) -> Any:
    """A layout field as a table cell: booleans yes/no, ZeRO stage as 'ZeRO-n'."""
    v = r.get(name)
    if isinstance(v, bool):
        return yes_no(v)
    return f"ZeRO-{v}" if name == "zero_stage" else ("-" if v is None else v)


def tie_sentence(search: dict[str, Any]) -> str | None:
    """Words for the tied layouts of a search summary (solver.search.ties), or None."""
    n = search.get("tied_layouts", 0)
    if n < 2:
        return None
    return (f"Ranks 1-{n} are tied: predicted within {search['tie_resolution']:.0%} of the fastest "
            f"layout's {'step time' if search['objective'] == 'step_time' else 'objective'} (the cost "
            f"model's resolution, about its median error on published runs), so they are ranked "
            f"simplest first: lower CP, ZeRO stage, virtual stages, micro-batch, fewer parallel "
            f"dimensions.")


def render_search(result: dict[str, Any], capacity_bytes: float | None = None) -> str:
    """Markdown: the search status line and one table row per layout."""
    s = result["search"]
    lines = [f"# Layout search ({s['objective']})", "",
             f"Status **{s['status']}** in {s['seconds']:.3f} s ({s['solves']} CP-SAT solves, "
             f"{s['evaluated']} layouts re-evaluated by the cost model; gap {s['gap']:.2%}).", ""]
    if s.get("fallback"):
        lines += [f"Note: {s['fallback']}.", ""]
    tie = tie_sentence(s)
    if tie:
        lines += [tie, ""]
    if s.get("band_sentence"):
        lines += [s["band_sentence"], ""]
    cols = layout_columns(result["layouts"])
    head = (["rank", "GPUs"] + [column_label(c) for c in cols]
            + ["step time (s)", "step time, 80% band (s)", *MFU_HEAD, "memory per GPU (GB)"]
            + RUN_HEAD + ["tied", "within band of best"])
    rows = [[r["rank"], layout_gpus(r)] + [cell(r, c) for c in cols]
            + [f"{r['step_time_s']:.3f}", interval(r, "step_time_s", ".3f"), *mfu_cells(r),
               f"{r['memory_per_gpu_bytes']['total'] / 1e9:.1f}"] + run_cells(r.get("run"))
            + ["tied" if r.get("tied_with_best") else "", "yes" if r.get("within_band_of_best") else ""]
            for r in result["layouts"]]
    note = ["", "Run days, GPU-hours and cost are at the predicted step time with failures priced "
                "in (checkpoint stalls, lost work, restarts: goodput; see `plan`'s Run risk). "
                f"Memory in GB ({GB_NOTE})"
                + ("" if capacity_bytes is None
                   else f"; GPU capacity {capacity_text(capacity_bytes)}: {CAPACITY_BASIS}")
                + "."]
    return "\n".join(lines + md_table(head, rows) + note)


RUN_HEAD = ["run days", "GPU-hours", "goodput", "cost"]


def run_cells(run: dict[str, Any] | None) -> list[str]:
    """A search row's run with failures (solver.search.objective.run_outcome) as text."""
    if run is None:
        return ["-"] * len(RUN_HEAD)
    cost = "-" if run["cost"] is None else f"{run['cost']:,.0f} {run['currency']}"
    return [f"{run['days']:,.2f}", f"{run['gpu_hours']:,.0f}", f"{run['goodput']:.1%}", cost]
