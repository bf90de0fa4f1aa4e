"""`make lint` is part of CI: ruff and mypy, rules written down in pyproject.toml (issue 12)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINTED = ("topology", "solver", "service")


def test_ci_runs_lint_before_the_tests():
    lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()]
    assert "make lint" in lines and "make test" in lines
    assert lines.index("make lint") < lines.index("make test")


def test_lint_target_checks_the_three_packages_with_both_tools():
    make = (ROOT / "Makefile").read_text()
    assert "LINTED := " + " ".join(LINTED) in make
    assert "$(BIN)/ruff check $(LINTED)" in make and "$(BIN)/mypy $(LINTED)" in make


def test_rule_set_and_tools_are_pinned_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert {"E", "F", "B"} <= set(cfg["tool"]["ruff"]["lint"]["select"])
    lint = cfg["project"]["optional-dependencies"]["lint"]
    assert any(d.startswith("ruff==") for d in lint) and any(d.startswith("mypy==") for d in lint)


@pytest.mark.skipif(shutil.which("ruff", path=str(Path(sys.executable).parent)) is None,
                    reason="ruff not installed (make lint installs it)")
def test_ruff_reports_zero_findings():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    out = subprocess.run([ruff, "check", *LINTED], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:]
