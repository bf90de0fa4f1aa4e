"""FP8 compute recipes in the launcher exports: Megatron-LM's --fp8-format / --fp8-recipe
checked against its own option fixture (tests/fixtures/frameworks/megatron.json, extracted at
the cited commit); frameworks without the recipe refuse naming training.compute_precision."""
from __future__ import annotations

import json

import pytest

from service.launchers import framework_rules, megatron_args
from solver.presets import load_model, load_training
from solver.specs import LayoutSpec
from tests.service.conftest import problems
from tests.service.framework_options import fixture, parse_megatron

LAYOUT = LayoutSpec(tp=8, pp=1, dp=64, sequence_parallel=True, zero_stage=1, recompute="selective")


def _training(precision: str, framework: str = "megatron-core"):
    return load_training("seed-300b").model_copy(update={"compute_precision": precision, "framework": framework})


@pytest.mark.parametrize(("precision", "fmt", "recipe"), [
    ("fp8-delayed", "hybrid", "delayed"), ("fp8-current", "hybrid", "tensorwise"),
    ("fp8-blockwise", "e4m3", "blockwise"), ("mxfp8", "e4m3", "mxfp8")])
def test_megatron_fp8_flags_parse_against_its_options(precision, fmt, recipe):
    options = fixture("megatron")["options"]
    assert recipe in options["--fp8-recipe"]["choices"] and fmt in options["--fp8-format"]["choices"]
    parsed = parse_megatron(megatron_args(load_model("seed-70b"), _training(precision), LAYOUT))
    assert parsed["fp8"] == fmt and parsed["fp8_recipe"] == recipe and parsed["bf16"] is True


def test_bf16_writes_no_fp8_flag():
    args = megatron_args(load_model("seed-70b"), _training("bf16"), LAYOUT)
    assert not any(a.startswith("--fp8") for a in args)


@pytest.mark.parametrize(("framework", "precision"), [
    ("deepspeed", "fp8-delayed"), ("torchtitan", "fp8-current"), ("torchtitan", "fp8-delayed"),
    ("megatron-core", "fp8-rowwise")])
def test_recipes_a_framework_cannot_export_are_refused(framework, precision):
    layout = LAYOUT if framework != "deepspeed" else LAYOUT.model_copy(update={"tp": 1, "dp": 512,
                                                                           "sequence_parallel": False})
    rules = framework_rules(framework, load_model("seed-70b"), _training(precision, framework), layout, None)
    assert "training.compute_precision" in [field for field, _ in rules]


@pytest.mark.parametrize(("precision", "converter"), [
    ("fp8-rowwise", 'Float8LinearConverter.Config(recipe_name="rowwise", filter_fqns=["lm_head"])'),
    ("mxfp8", 'MXFP8LinearConverter.Config(fqns=["layers"])')])
def test_torchtitan_writes_its_fp8_converter(precision, converter):
    """torchtitan b5bcd76c components/quantization/float8.py and mx.py: the converter is applied
    to the model config as model_registry applies converters; the LM head stays BF16."""
    from service.launchers.torchtitan import torchtitan_module
    from tests.service.framework_options import torchtitan_module_problems

    module = torchtitan_module(load_model("seed-70b"), _training(precision, "torchtitan"),
                               LAYOUT.model_copy(update={"sequence_parallel": False}))
    assert torchtitan_module_problems(module) == []
    assert converter in module and "model=_converted(_model())" in module
    bf16 = torchtitan_module(load_model("seed-70b"), _training("bf16", "torchtitan"), LAYOUT)
    assert "_converted" not in bf16 and "quantization" not in bf16


def test_cli_refuses_mxfp8_on_hopper_with_exit_2(capsys):
    from service.cli import main

    training = json.dumps({"seq_len": 8192, "global_batch_tokens": 4194304, "compute_precision": "mxfp8"})
    assert main(["estimate", "--model", "seed-70b", "--cluster", "dgx-h100-superpod", "--training", training,
                 "--layout", LAYOUT.model_dump_json()]) == 2
    err = capsys.readouterr().err
    assert "training.compute_precision" in err and "Blackwell" in err


def test_http_estimate_fp8_and_refusal(client):
    """/v1/estimate: an FP8 plan answers with its MFU convention; an FP8 recipe the GPU cannot
    run is a 4xx naming training.compute_precision."""
    training = {"seq_len": 8192, "global_batch_tokens": 4194304, "compute_precision": "fp8-delayed"}
    body = {"model": "seed-70b", "cluster": "dgx-h100-superpod", "training": training,
            "layout": LAYOUT.model_dump()}
    ok = client.post("/v1/estimate", json=body)
    assert ok.status_code == 200, ok.text
    assert "mfu_fp8_peak" in ok.text and "compute_precision" in ok.text
    bad = client.post("/v1/estimate", json={**body, "training": {**training, "compute_precision": "mxfp8"}})
    assert 400 <= bad.status_code < 500
    assert "training.compute_precision" in problems(bad)
