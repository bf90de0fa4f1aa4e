"""Shared fixtures: the seed problem's specs (reference/seed-70b-plan.md)."""
import os
from pathlib import Path

import pytest

from solver.presets import load_model, load_training
from solver.specs import LayoutSpec
from topology.catalog import load_cluster


@pytest.fixture(scope="session")
def seed_model():
    return load_model("seed-70b")


@pytest.fixture(scope="session")
def seed_cluster():
    return load_cluster("seed-512")


@pytest.fixture(scope="session")
def seed_training():
    return load_training("seed-300b")


@pytest.fixture(scope="session")
def seed_layout():
    """The seed's first layout: TP8 in-node, DP64, ZeRO-1, micro-batch 1, selective recompute, SP."""
    return LayoutSpec(tp=8, pp=1, dp=64, cp=1, vpp=1, sequence_parallel=True, zero_stage=1,
                      micro_batch=1, recompute="selective")


# shared/ sits beside the repository (in sessions and in CI alike): <repo>/../shared.
SHARED_DIR = Path(__file__).resolve().parents[1].parent / "shared"
CALIBRATION_RUNS = SHARED_DIR / "calibration" / "runs.jsonl"


@pytest.fixture(scope="session")
def calibration_runs_path():
    """Path of the published calibration runs (../shared/calibration/runs.jsonl)."""
    if not CALIBRATION_RUNS.is_file():
        if os.environ.get("CI"):  # CI lays shared/ beside the clone: a missing file is a failure
            pytest.fail(f"{CALIBRATION_RUNS} not present in CI")
        pytest.skip(f"{CALIBRATION_RUNS} not present")
    return CALIBRATION_RUNS
