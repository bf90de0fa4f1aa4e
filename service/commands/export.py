"""`trainplan export`: one layout's launch configuration for one framework, checked against
that framework's rules (a layout it cannot run is refused naming the rule, exit 2).

Without --layout it exports the plan's rank 1: the layout `trainplan plan` ranks first for the
same model, cluster, training, --framework, --profile and --moe-splits (the plan's own search
options, service.commands.plan.plan_search_options, MoE first/last splits on by default), with
the plan's `launch` (service.launchers.plan_launch). `--from search` exports instead the best
layout of `trainplan search`'s default options that the framework runs, listing the
better-ranked layouts it refused with their rules.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from service.cli import emit
from service.commands import load_capped_cluster
from service.commands.framework_args import add_framework_flag, with_framework
from service.commands.plan import add_moe_splits_flag, plan_search_options, require_training
from service.commands.profile_args import add_profile_flag, cost_kwargs, profile_for
from solver.presets import load_layout, load_model

SEARCH_TOP = 10  # layouts tried, best first, under --from search
# What layout_source says in the Markdown output.
SOURCES = {"given": "given", "plan": "the plan's rank 1, as `trainplan plan` ranks it",
           "search": "the best layout of `trainplan search` the framework runs"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("export", help="launch configuration of one layout for Megatron-LM, "
                              "torchtitan or DeepSpeed, checked against the framework's rules; without "
                              "--layout, the plan's rank 1 (what `trainplan plan` recommends)")
    p.add_argument("--model", required=True, help="model preset name or JSON path (native or HF config.json)")
    p.add_argument("--cluster", required=True, help="cluster preset name or JSON path")
    p.add_argument("--training", required=True, help="training preset name or JSON path")
    p.add_argument("--layout", default=None, help="layout as a JSON path or an inline JSON object "
                   "(default: the plan's rank 1, see --from)")
    p.add_argument("--from", dest="source", choices=("plan", "search"), default=None,
                   help="without --layout: plan = the layout `trainplan plan` ranks first with the same "
                        "inputs and flags, its `launch` (default); search = the best layout of `trainplan "
                        "search`'s default options the framework runs; refused with --layout")
    add_moe_splits_flag(p, None, "default: on with --from plan, as in `plan`; off with --from search, as in "
                                 "`search`")
    add_profile_flag(p)
    add_framework_flag(p)
    p.add_argument("--format", choices=("json", "md", "native"), default="json",
                   help="json: the whole export; md: a summary; native: the framework's own "
                        "artifact (Megatron-LM command line, torchtitan config module, DeepSpeed JSON) "
                        "(default: json)")
    p.set_defaults(run=run)


def _plan_rank1(args, model, cluster, training) -> tuple[Any, list[int] | None, dict[str, Any]]:
    """The plan's rank 1 (solver.layouts.searched_layouts under the plan's options, as
    solver.plan.build_plan ranks) and its launch (plan_launch, the plan's `launch`).
    Raises: SpecError when the framework refuses it (the plan's launch then is a refusal)."""
    from service.launchers import plan_launch
    from solver.errors import Problem, SpecError
    from solver.layouts import searched_layouts
    from solver.plan import layout_fields
    from solver.specs import LayoutSpec

    cost = cost_kwargs(profile_for(args, training.framework))
    _summary, layouts = searched_layouts(model, cluster, training, plan_search_options(args, cluster), **cost)
    launch = plan_launch(model, cluster, training, layouts[0])
    if "refused" in launch:
        problems = [Problem(p["field"], p["reason"]) for p in launch["problems"]]
        raise SpecError(f"the plan's rank 1 does not run on {training.framework}: {launch['refused']}",
                        problems or [Problem("layout", launch["refused"])])
    layout = LayoutSpec.model_validate(layout_fields(layouts[0]), strict=False)
    return layout, layouts[0].get("pipeline_split"), launch


def _searched(args, model, cluster, training) -> tuple[Any, list[int] | None, list[dict]]:
    """The best-ranked layout of `trainplan search`'s defaults the framework accepts, and the
    refused ones before it."""
    from service.launchers import framework_rules
    from solver.errors import InfeasibleError
    from solver.search import search_layouts
    from solver.specs import LayoutSpec

    framework = training.framework
    profile = profile_for(args, framework)
    options = {"top_k": SEARCH_TOP, "moe_splits": bool(args.moe_splits)}
    result = search_layouts(model, cluster, training, options,
                            cost_options=None if profile is None else profile.options).as_dict()
    skipped: list[dict[str, Any]] = []
    for entry in result["layouts"]:
        layout = LayoutSpec.model_validate({k: entry[k] for k in LayoutSpec.model_fields if k in entry},
                                           strict=False)
        split = entry.get("pipeline_split")
        rules = framework_rules(framework, model, training, layout, split)
        if not rules:
            return layout, split, skipped
        skipped.append({"rank": entry["rank"], "problems": [f"{f}: {r}" for f, r in rules]})
    raise InfeasibleError(f"none of the search's {len(skipped)} best layouts runs on {framework}",
                          {"skipped": skipped})


def run(args: argparse.Namespace) -> int:
    from service.launchers import export_layout, rank_placement

    model, cluster = load_model(args.model), load_capped_cluster(args.cluster)
    training = with_framework(require_training(args.training), args.framework)
    framework = training.framework
    skipped: list[dict] = []
    source = layout_source(args)
    if source == "plan":
        layout, split, planned = _plan_rank1(args, model, cluster, training)
        placement = planned["placement"]
        launch = {k: v for k, v in planned.items() if k not in ("framework", "rank", "placement")}
    else:
        if source == "given":
            layout = load_layout(args.layout)
            split = list(layout.pipeline_layers) if layout.pipeline_layers else None
        else:  # the search applies the framework's rules (training.framework)
            layout, split, skipped = _searched(args, model, cluster, training)
        placement = rank_placement(cluster, layout)
        launch = export_layout(framework, model, training, layout, placement, split)
    result = {"framework": framework, "layout": layout.model_dump(mode="json"),
              "pipeline_split": split, "layout_source": source,
              "skipped": skipped, "launch": launch,
              "placement": {k: v for k, v in placement.items() if k != "ranks"}}
    if args.format == "native":
        print(native_text(framework, launch))
        return 0
    emit(result, args.format, render_export)
    return 0


def layout_source(args: argparse.Namespace) -> str:
    """given, plan or search. --from, --moe-splits and --profile only choose the layout, so
    with --layout they are refused (exit 2), not ignored. Raises: SpecError."""
    from solver.errors import Problem, SpecError

    if args.layout is None:
        return args.source or "plan"
    stray = [flag for flag, value in (("--from", args.source), ("--moe-splits/--no-moe-splits", args.moe_splits),
                                      ("--profile", args.profile)) if value is not None]
    if stray:
        reason = "chooses the layout when --layout is not given; the layout is given (--layout)"
        raise SpecError(f"{', '.join(stray)}: {reason}", [Problem(flag, reason) for flag in stray])
    return "given"


def native_text(framework: str, launch: dict[str, Any]) -> str:
    """The framework's own artifact: a command line, a config module, or a JSON config."""
    if framework == "megatron-core":
        return launch["command"]
    if framework == "torchtitan":
        return launch["module"]
    return json.dumps(launch["config"], indent=2)


def render_export(result: dict[str, Any]) -> str:
    """Markdown: the layout, the framework's artifact, and the notes."""
    lay = result["layout"]
    fence = {"megatron-core": "sh", "torchtitan": "python", "deepspeed": "json"}[result["framework"]]
    lines = [f"# {result['framework']} export", "",
             "Layout (" + SOURCES[result["layout_source"]] + "): " + ", ".join(f"{k} {v}" for k, v in lay.items()
                                                              if v is not None), ""]
    for s in result["skipped"]:
        lines.append(f"- search rank {s['rank']} refused: " + "; ".join(s["problems"]))
    lines += ["", f"```{fence}", native_text(result["framework"], result["launch"]), "```", ""]
    launcher = result["launch"].get("launcher")
    if launcher:
        lines += ["```sh", launcher, "```", ""]
    lines += [f"- {n}" for n in result["launch"].get("notes", [])]
    return "\n".join(lines)
