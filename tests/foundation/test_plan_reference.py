"""training.reference: a published GPU-hour figure printed beside the plan's own estimates."""
import re

import pytest

from service.render_md import render_plan
from solver.cost.estimate import estimate_layout
from solver.errors import SpecError
from solver.plan import build_plan
from solver.plan_reference import reference_section
from solver.presets import load_training
from solver.specs import LayoutSpec

PUBLISHED = 300_000.0
LAYOUT = {"tp": 8, "pp": 4, "dp": 16, "zero_stage": 1, "sequence_parallel": True}


def _training(seed_training, **reference):
    ref = {"gpu_hours": PUBLISHED, "scope": "pre-training", "source": "a test", **reference}
    return load_training({**seed_training.model_dump(mode="json"), "reference": ref})


@pytest.fixture(scope="module")
def referenced(seed_model, seed_cluster, seed_training):
    training = _training(seed_training, layout=LAYOUT)
    return build_plan(seed_model, seed_cluster, training), training


def test_reference_sits_beside_each_estimate_with_its_ratio(referenced, seed_model, seed_cluster):
    plan, training = referenced
    ref = plan["reference"]
    assert ref["published_gpu_hours"] == PUBLISHED and ref["scope"] == "pre-training"
    capacity, best, published = ref["estimates"]
    assert capacity["gpu_hours"] == plan["time"]["gpu_hours"]
    assert best["gpu_hours"] == plan["prediction"]["gpu_hours"]
    # The published layout, predicted independently: steps x step time x GPUs / 3600 s.
    est = estimate_layout(seed_model, seed_cluster, training, LayoutSpec(**LAYOUT))
    steps = plan["batch"]["steps"]
    assert published["gpu_hours"] == pytest.approx(steps * est.step_time_s * 512 / 3600)
    assert published["step_time_s"] == pytest.approx(est.step_time_s)
    for row in (capacity, best, published):
        assert row["ratio_to_published"] == pytest.approx(row["gpu_hours"] / PUBLISHED)


def test_markdown_prints_the_published_figure_and_ratios(referenced):
    plan, _ = referenced
    text = render_plan(plan)
    assert re.search(r"### [0-9.]+ ?Published reference", text) and "**300,000 GPU-hours** (pre-training; a test)" in text
    ratio = plan["reference"]["estimates"][2]["ratio_to_published"]
    assert f"| {ratio:.2f} |" in text and "TP 8 · PP 4 · DP 16" in text


def test_no_reference_no_section(seed_training):
    assert reference_section(None, None, seed_training, {}) is None  # type: ignore[arg-type]


def test_bad_reference_names_the_field(seed_model, seed_cluster, seed_training):
    with pytest.raises(SpecError, match="reference.gpu_hours"):
        _training(seed_training, gpu_hours=0)
    # 64 DP replicas of TP8 x PP4 need 2048 GPUs: the cluster has 512.
    training = _training(seed_training, layout={**LAYOUT, "dp": 64})
    stub = {"batch": {"steps": 10}, "time": {"assumed_mfu": 0.5, "gpus": 512, "gpu_hours": 1.0},
            "layouts": []}
    with pytest.raises(SpecError, match="training.reference"):
        reference_section(seed_model, seed_cluster, training, stub)
