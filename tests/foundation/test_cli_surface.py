"""The command-line surface a newcomer meets (issue 12): --version, a top-level help that
says what the tool does and its exit codes, one stated --format default per command,
`plan --format html`, `topology --order`, progress on stderr only on a terminal."""
import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import service.cli as cli
from service.cli import build_parser, main, report_error
from solver.errors import InfeasibleError, SolverTimeoutError, SpecError

ROOT = Path(__file__).resolve().parents[2]
SEED_LAYOUT = '{"tp": 8, "dp": 64, "zero_stage": 1, "sequence_parallel": true}'


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_version_prints_the_package_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"trainplan {version('trainplan')}"


def test_top_level_help_says_what_the_tool_does_and_the_exit_codes():
    text = build_parser().format_help()
    assert "plan a large-model training run" in text
    for code, meaning in ((0, "success"), (2, "bad input"), (3, "infeasible"), (4, "no layout found within")):
        assert re.search(rf"^\s+{code}\s+{meaning}", text, re.M), (code, meaning)
    assert "GB = 1e9 bytes" in text


def test_exit_codes_match_the_help():
    assert report_error(SpecError("x")) == 2
    assert report_error(InfeasibleError("x", {})) == 3
    assert report_error(SolverTimeoutError("x")) == 4


def test_every_format_option_states_its_default_and_the_defaults_follow_the_readme_rule():
    """plan and calibrate print reports (md); every other command prints data (json); README says why."""
    seen = {}
    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            if "--format" in action.option_strings:
                assert f"(default: {action.default})" in action.help, name
                seen[name] = action.default
    assert seen.pop("plan") == "md"
    assert seen.pop("calibrate", "md") == "md"  # a report too
    assert set(seen) >= {"estimate", "search", "topology", "validate"}
    assert set(seen.values()) == {"json"}
    readme = (ROOT / "README.md").read_text()
    assert "`plan` prints a report" in readme and "every other command prints data" in readme


def test_every_command_takes_quiet():
    for name, sub in _subparsers(build_parser()).items():
        assert any("--quiet" in a.option_strings for a in sub._actions), name


def test_plan_html_is_the_service_report_page(capsys):
    from service.report_html import render_report

    assert main(["plan", "--model", "seed-70b", "--cluster", "seed-512", "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<h1>trainplan: seed-70b on seed-512</h1>" in page
    assert 'class="chart memory-chart"' in page and "not stored (trainplan plan)" in page
    assert render_report.__module__ == "service.report_html"  # the page GET /v1/plans/{id}/report serves


def test_topology_order_lists_and_accepts_exactly_the_layout_orders(capsys):
    from typing import get_args

    from solver.specs import RankOrder

    orders = get_args(RankOrder)
    sub = _subparsers(build_parser())["topology"]
    order_help = next(a.help for a in sub._actions if "--order" in a.option_strings)
    assert " or ".join(orders) in order_help
    base = ["topology", "--cluster", "seed-512", "--layout", SEED_LAYOUT, "--format", "json"]
    for order in orders:
        assert main([*base, "--order", order]) == 0
        assert json.loads(capsys.readouterr().out)["order"] == order
    # a permutation the placement code could build, but that no layout can ask for
    assert main([*base, "--order", "dp-tp-cp-pp"]) == 2
    assert "accepted: " + ", ".join(orders) in capsys.readouterr().err


def test_topology_order_defaults_to_the_layouts_rank_order(capsys):
    layout = json.dumps({**json.loads(SEED_LAYOUT), "rank_order": "tp-cp-pp-dp"})
    assert main(["topology", "--cluster", "seed-512", "--layout", layout, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["order"] == "tp-cp-pp-dp"


def test_progress_goes_to_stderr_on_a_terminal_only_and_not_with_quiet(capsys, monkeypatch):
    argv = ["topology", "--cluster", "seed-512", "--layout", SEED_LAYOUT, "--format", "json"]
    assert main(argv) == 0  # capsys's stderr is not a terminal
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(cli, "stderr_is_terminal", lambda: True)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "trainplan: building the 512-GPU graph of seed-512" in err
    assert "trainplan: placing TP8 CP1 DP64 PP1" in err
    assert main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_progress_handler_is_removed_after_each_command(monkeypatch):
    from topology.progress import LOGGER

    monkeypatch.setattr(cli, "stderr_is_terminal", lambda: True)
    before = list(LOGGER.handlers)
    main(["topology", "--cluster", "seed-512", "--format", "json"])
    assert LOGGER.handlers == before


def test_help_runs_as_a_program():
    out = subprocess.run([sys.executable, "-m", "service.cli", "--help"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0 and "exit codes:" in out.stdout
