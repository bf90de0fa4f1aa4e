"""`trainplan export`: one layout's launch configuration for one framework, checked against
that framework's rules (a layout it cannot run is refused naming the rule, exit 2).

Without --layout the search runs and the best-ranked layout the framework runs is exported;
the better-ranked layouts it refused are listed with their rules.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from service.cli import emit
from service.commands import load_capped_cluster
from service.commands.framework_args import add_framework_flag, with_framework
from service.commands.plan import require_training
from solver.presets import load_layout, load_model

SEARCH_TOP = 10  # layouts tried, best first, when no layout is given


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("export", help="launch configuration of one layout for Megatron-LM, "
                              "torchtitan or DeepSpeed, checked against the framework's rules")
    p.add_argument("--model", required=True, help="model preset name or JSON path (native or HF config.json)")
    p.add_argument("--cluster", required=True, help="cluster preset name or JSON path")
    p.add_argument("--training", required=True, help="training preset name or JSON path")
    p.add_argument("--layout", default=None, help="layout as a JSON path or an inline JSON object "
                   "(default: the search's best layout the framework runs)")
    add_framework_flag(p)
    p.add_argument("--format", choices=("json", "md", "native"), default="json",
                   help="json: the whole export; md: a summary; native: the framework's own "
                        "artifact (Megatron-LM command line, torchtitan config module, DeepSpeed JSON) "
                        "(default: json)")
    p.set_defaults(run=run)


def _searched(model, cluster, training, framework: str) -> tuple[Any, list[int] | None, list[dict]]:
    """The best-ranked searched layout the framework accepts, and the refused ones before it."""
    from service.launchers import framework_rules
    from solver.errors import InfeasibleError
    from solver.search import search_layouts
    from solver.specs import LayoutSpec

    result = search_layouts(model, cluster, training, {"top_k": SEARCH_TOP}).as_dict()
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
    if args.layout is not None:
        layout = load_layout(args.layout)
        split = list(layout.pipeline_layers) if layout.pipeline_layers else None
    else:  # the search applies the framework's rules (training.framework)
        layout, split, skipped = _searched(model, cluster, training, framework)
    placement = rank_placement(cluster, layout)
    launch = export_layout(framework, model, training, layout, placement, split)
    result = {"framework": framework, "layout": layout.model_dump(mode="json"),
              "pipeline_split": split, "layout_source": "given" if args.layout else "search",
              "skipped": skipped, "launch": launch,
              "placement": {k: v for k, v in placement.items() if k != "ranks"}}
    if args.format == "native":
        print(native_text(framework, launch))
        return 0
    emit(result, args.format, render_export)
    return 0


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
             "Layout (" + result["layout_source"] + "): " + ", ".join(f"{k} {v}" for k, v in lay.items()
                                                              if v is not None), ""]
    for s in result["skipped"]:
        lines.append(f"- search rank {s['rank']} refused: " + "; ".join(s["problems"]))
    lines += ["", f"```{fence}", native_text(result["framework"], result["launch"]), "```", ""]
    launcher = result["launch"].get("launcher")
    if launcher:
        lines += ["```sh", launcher, "```", ""]
    lines += [f"- {n}" for n in result["launch"].get("notes", [])]
    return "\n".join(lines)
