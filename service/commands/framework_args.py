"""Command-line flags shared by plan, search and estimate: --framework and the search
options that were HTTP-only (--zero-stages, --recompute, --max-vpp, --max-cp,
--max-micro-batch, --orders). Bad values exit 2 naming the flag (argparse)."""
from __future__ import annotations

import argparse
from typing import Any, get_args
from collections.abc import Callable

from solver.frameworks import FRAMEWORK_NAMES
from solver.search.options import SearchOptions
from solver.specs import RankOrder

RECOMPUTE_LEVELS = ("none", "selective", "full")


def add_framework_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--framework", choices=FRAMEWORK_NAMES, default=None,
                   help="training framework (overrides training.framework; default: the training "
                        "spec's, megatron-core when it names none)")


def with_framework(training, framework: str | None):
    """The training spec with --framework applied (unchanged when the flag is absent)."""
    return training if framework is None else training.model_copy(update={"framework": framework})


def _comma_list(parse: Callable[[str], Any], allowed: tuple, what: str) -> Callable[[str], tuple]:
    def convert(text: str) -> tuple:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}")
        out = []
        for item in items:
            try:
                value = parse(item)
            except ValueError:
                value = None
            if value not in allowed:
                raise argparse.ArgumentTypeError(
                    f"'{item}' is not one of {', '.join(map(str, allowed))}")
            out.append(value)
        return tuple(dict.fromkeys(out))
    return convert


def _bounded_int(name: str) -> Callable[[str], int]:
    field = SearchOptions.model_fields[name]
    lo = next(m.ge for m in field.metadata if hasattr(m, "ge"))
    hi = next(m.le for m in field.metadata if hasattr(m, "le"))

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is outside [{lo}, {hi}]")
        return value
    return convert


def add_search_flags(p: argparse.ArgumentParser) -> None:
    """The search-space flags (each maps to one SearchOptions field)."""
    p.add_argument("--zero-stages", type=_comma_list(int, (0, 1, 2, 3), "ZeRO stages 0-3"),
                   help="ZeRO stages the search may use, e.g. 0,1 (default: all the framework runs)")
    p.add_argument("--recompute", type=_comma_list(str, RECOMPUTE_LEVELS, "recompute levels"),
                   help="activation-recompute levels, e.g. none,selective (default: all)")
    p.add_argument("--max-vpp", type=_bounded_int("max_vpp"), help="largest virtual-stage count")
    p.add_argument("--max-cp", type=_bounded_int("max_cp"), help="largest context-parallel degree")
    p.add_argument("--max-micro-batch", type=_bounded_int("max_micro_batch"),
                   help="largest micro-batch, sequences")
    p.add_argument("--max-ep", type=_bounded_int("max_ep"),
                   help="largest expert-parallel degree (MoE models; default: every divisor of the experts)")
    p.add_argument("--orders", type=_comma_list(str, get_args(RankOrder), "rank orders"),
                   help="rank orders (placements) to search, e.g. tp-cp-dp-pp,tp-cp-pp-dp")


def search_flag_options(args: argparse.Namespace) -> dict[str, Any]:
    """The SearchOptions fields the search-space flags set (absent flags keep defaults)."""
    given = {"zero_stages": args.zero_stages, "recompute": args.recompute, "max_vpp": args.max_vpp,
             "max_cp": args.max_cp, "max_micro_batch": args.max_micro_batch, "max_ep": args.max_ep,
             "rank_orders": args.orders}
    return {k: v for k, v in given.items() if v is not None}
