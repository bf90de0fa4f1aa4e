"""`trainplan estimate`: one fixed layout: accounting plus the cost model's prediction."""
from __future__ import annotations

import argparse
import sys

from service.cli import add_format, emit, print_warnings
from service.commands import load_capped_cluster
from service.commands.framework_args import add_framework_flag, with_framework
from service.commands.plan import require_training
from service.commands.profile_args import add_profile_flag, cost_kwargs, profile_for
from service.render_estimate import render_estimate
from solver.layouts import estimate
from solver.presets import load_layout, load_model


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "estimate", help="step time, MFU, memory by component, fit and grad-sync bound of one layout")
    p.add_argument("--model", required=True,
                   help="model preset name, JSON path or inline JSON (native or HF config.json)")
    p.add_argument("--cluster", required=True, help="cluster preset name, JSON path or inline JSON object")
    p.add_argument("--training", required=True,
                   help="training preset name, JSON path or inline JSON object")
    p.add_argument("--layout", required=True, help="layout as a JSON path or an inline JSON object")
    add_framework_flag(p)
    add_profile_flag(p)
    add_format(p, "json")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    model, cluster = load_model(args.model), load_capped_cluster(args.cluster)
    training, layout = require_training(args.training), load_layout(args.layout)
    training = with_framework(training, args.framework)
    result = estimate(model, cluster, training, layout, **cost_kwargs(profile_for(args, training.framework)))
    for v in result["framework_violations"]:  # loud: the prediction is for a layout that cannot run
        src = v["sources"][0]
        print(f"warning: NOT RUNNABLE: {v['reason']} [{v['rule']}; {src['repository']} {src['path']} "
              f"@ {src['commit'][:10]}]", file=sys.stderr)
    print_warnings(result)
    emit(result, args.format, render_estimate)
    return 0
