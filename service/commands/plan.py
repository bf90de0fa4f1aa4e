"""`trainplan plan`: the whole plan (the seed's eight estimates, ladder, checks, stages)."""
from __future__ import annotations

import argparse

from service.cli import add_format, emit, print_warnings
from service.commands import load_capped_cluster
from service.commands.framework_args import add_framework_flag, with_framework
from service.commands.profile_args import add_profile_flag, cost_kwargs, profile_for
from service.render_md import render_plan
from service.routers.solving import launched_plan
from solver.errors import Problem, SpecError
from solver.layouts import default_plan_options
from solver.presets import load_model, load_training, preset_names


# The training recipe `plan` assumes when none is given (reference/seed-70b-plan.md).
DEFAULT_TRAINING = "seed-300b"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("plan", help="the whole plan for a model on a cluster")
    p.add_argument("--model", required=True,
                   help="model preset name, JSON path or inline JSON (native or HF config.json)")
    p.add_argument("--cluster", required=True, help="cluster preset name, JSON path or inline JSON object")
    p.add_argument("--training", help="training preset name, JSON path or inline JSON (tokens, seq_len, batch); "
                                      f"default: the seed recipe '{DEFAULT_TRAINING}', stated in the plan")
    add_framework_flag(p)
    add_price_arguments(p)
    add_profile_flag(p)
    add_moe_splits_flag(p)
    add_format(p, "md", ("md", "json", "html"))
    p.set_defaults(run=run)


def add_moe_splits_flag(p, default: bool | None = True, help_default: str = "default on") -> None:
    """--moe-splits / --no-moe-splits of `plan` (and of `export`, which ranks as the plan does)."""
    p.add_argument("--moe-splits", action=argparse.BooleanOptionalAction, default=default,
                   help="MoE models: search first/last pipeline splits where the layers do not divide over "
                        f"the stages (Megatron-Core, torchtitan; {help_default}; --no-moe-splits: even stages "
                        "only, faster)")


def plan_search_options(args: argparse.Namespace, cluster) -> dict | None:
    """The search options `trainplan plan` ranks its layouts with (None: the plan's defaults,
    solver.layouts.default_plan_options with MoE splits on, solver.search.api.plan_options);
    `trainplan export` without --layout ranks with the same, so it exports the plan's rank 1."""
    return None if args.moe_splits in (True, None) else default_plan_options(cluster, moe_splits=False)


def add_price_arguments(p) -> None:
    """--price-per-gpu-hour and --currency (replace the training's; echoed with every cost)."""
    p.add_argument("--price-per-gpu-hour", type=float, default=None,
                   help="price per GPU-hour (replaces training.price_per_gpu_hour); costs are "
                        "printed with failures priced in")
    p.add_argument("--currency", default=None,
                   help="ISO 4217 code of the price, e.g. USD, EUR (default: training.currency, USD)")


def training_from_args(args: argparse.Namespace, default: str | None = None):
    """The training spec of --training (or `default`) with --price-per-gpu-hour/--currency
    applied. Raises: SpecError."""
    from solver.presets import priced_training

    training = require_training(args.training or default)
    return priced_training(training, getattr(args, "price_per_gpu_hour", None),
                           getattr(args, "currency", None))


def require_training(arg: str | None):
    """The training spec, or a SpecError naming the presets when none was given."""
    if arg is None:
        reason = ("required: give --training (a preset name or JSON path); known presets: "
                  + ", ".join(preset_names("training")))
        raise SpecError(f"training: {reason}", [Problem("training", reason)])
    return load_training(arg)


def run(args: argparse.Namespace) -> int:
    model, cluster = load_model(args.model), load_capped_cluster(args.cluster)
    training = with_framework(training_from_args(args, DEFAULT_TRAINING), args.framework)
    plan = launched_plan(model, cluster, training, plan_search_options(args, cluster),
                         **cost_kwargs(profile_for(args, training.framework)))
    if args.training is None:
        t = plan["inputs"]["training"]
        plan["assumptions"].insert(0, f"training not given: the seed recipe '{DEFAULT_TRAINING}' "
                                      f"({t['tokens']:.3g} tokens, seq_len {t['seq_len']}, "
                                      f"{t['global_batch_tokens']:,} tokens per step) was assumed")
    print_warnings(plan)
    if args.format == "html":
        print(plan_html(plan, model, cluster))
    else:
        emit(plan, args.format, render_plan)
    return 0


def plan_html(plan: dict, model, cluster) -> str:
    """The HTML page GET /v1/plans/{id}/report serves, for a plan that is not stored."""
    from service.report_html import render_report
    from service.routers.errors import jsonable
    from service.routers.solving import report_data

    plan = jsonable(plan)
    return render_report(plan, jsonable(report_data(plan, model, cluster)), "not stored (trainplan plan)")
