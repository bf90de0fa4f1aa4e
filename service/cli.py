"""trainplan: plan a large-model training run on a GPU cluster.

From a model (preset, JSON, or a Hugging Face config.json), a cluster and a training recipe
it computes parameters, memory, FLOPs, time and cost exactly, ranks parallel layouts
(TP/PP/DP/CP, ZeRO, recompute) with a cost model and a CP-SAT search, and writes the plan.
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from importlib.metadata import PackageNotFoundError, version

from topology.errors import InfeasibleError, PlannerError, SolverTimeoutError
from topology.progress import LOGGER as PROGRESS

# Each name is a module service.commands.<name> with add_parser(subparsers) and run(args).
COMMANDS = ("plan", "estimate", "search", "export", "validate", "calibrate", "topology", "cluster", "serve", "db")

EXIT_OK, EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_TIMEOUT = 0, 2, 3, 4
EPILOG = f"""\
exit codes:
  {EXIT_OK}  success
  {EXIT_BAD_INPUT}  bad input: one 'error: field: reason' line per problem on stderr, no traceback
  {EXIT_INFEASIBLE}  infeasible: no layout fits; the smallest fixes follow on stderr as JSON
  {EXIT_TIMEOUT}  no layout found within the solver's time limit (try a larger --time-limit)

Output goes to stdout (--format: 'plan' prints a report, md by default; the other commands
print data, json by default). Progress lines go to stderr on a terminal; --quiet silences
them. Memory is in GB = 1e9 bytes. 'trainplan COMMAND --help' describes each command."""


def package_version() -> str:
    """The installed trainplan version (pyproject's)."""
    try:
        return version("trainplan")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    lines = (__doc__ or "").strip().splitlines()
    parser = argparse.ArgumentParser(prog="trainplan", description="\n".join(lines), epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"trainplan {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"service.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"service.commands.{name}":
                raise
            continue
        module.add_parser(sub)
        sub.choices[name].add_argument(
            "--quiet", "-q", action="store_true",
            help="no progress lines on stderr (they appear only on a terminal anyway)")
    return parser


def add_format(p: argparse.ArgumentParser, default: str, choices: tuple[str, ...] = ("json", "md")) -> None:
    """The --format option of a command, its default stated in its help."""
    p.add_argument("--format", choices=choices, default=default,
                   help=f"output format: {', '.join(choices)} (default: {default})")


def print_warnings(result: dict) -> None:
    """Sanity warnings (solver.sanity) on stderr, one 'warning:' line each; the result keeps them too."""
    for w in result.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)


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
    if isinstance(exc, InfeasibleError):
        return EXIT_INFEASIBLE
    return EXIT_TIMEOUT if isinstance(exc, SolverTimeoutError) else EXIT_BAD_INPUT


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def _progress_handler(quiet: bool) -> logging.Handler | None:
    """A stderr handler for topology.progress notes: on a terminal, without --quiet."""
    if quiet or not stderr_is_terminal():
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("trainplan: %(message)s ..."))
    PROGRESS.addHandler(handler)
    PROGRESS.setLevel(logging.INFO)
    return handler


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = _progress_handler(getattr(args, "quiet", False))
    try:
        return args.run(args) or EXIT_OK
    except PlannerError as exc:
        return report_error(exc)
    except BrokenPipeError:
        return EXIT_OK
    finally:
        if handler is not None:
            PROGRESS.removeHandler(handler)


if __name__ == "__main__":
    sys.exit(main())
