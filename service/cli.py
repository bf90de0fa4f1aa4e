"""`trainplan` command line. Subcommands live in service/commands/<name>.py.

Exit codes: 0 success, 2 bad input (one line per problem, no traceback), 3 infeasible.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

from topology.errors import InfeasibleError, PlannerError

# Each name is a module service.commands.<name> with add_parser(subparsers) and run(args).
COMMANDS = ("plan", "estimate", "search", "export", "validate", "calibrate", "topology", "cluster", "serve", "db")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainplan", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"service.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"service.commands.{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


def emit(result: dict, fmt: str, render_md) -> None:
    """Print a result as JSON or Markdown."""
    if fmt == "json":
        print(json.dumps(result, indent=2, default=float))
    else:
        print(render_md(result))


def report_error(exc: PlannerError) -> int:
    lines = [str(p) for p in exc.problems] or [exc.message]
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    if isinstance(exc, InfeasibleError) and exc.explanation:
        print(json.dumps(exc.explanation, indent=2, default=float), file=sys.stderr)
    return 3 if isinstance(exc, InfeasibleError) else 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args) or 0
    except PlannerError as exc:
        return report_error(exc)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
