"""`trainplan export`: each framework's artifact for a given or searched layout; a layout the
framework cannot run exits 2 naming the rule."""
from __future__ import annotations

import json

from service.cli import main
from tests.service.framework_options import megatron_violations, torchtitan_module_problems

SEED = ["--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b"]
PP2_VPP8 = json.dumps({"tp": 4, "pp": 2, "vpp": 8, "dp": 64, "zero_stage": 1, "sequence_parallel": True,
                       "recompute": "selective"})


def test_export_megatron_json(capsys):
    assert main(["export", *SEED, "--layout", PP2_VPP8, "--framework", "megatron-core"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["framework"] == "megatron-core" and out["layout_source"] == "given"
    assert megatron_violations(out["launch"]["args"]) == []
    assert "ranks" not in out["placement"]


def test_export_torchtitan_native_is_its_config_module(capsys):
    assert main(["export", *SEED, "--layout", PP2_VPP8, "--framework", "torchtitan", "--format", "native"]) == 0
    text = capsys.readouterr().out
    assert text.startswith('"""torchtitan configuration') and torchtitan_module_problems(text) == []


def test_export_refusal_exits_2_naming_the_rule(capsys):
    zero2_pp = json.dumps({"tp": 8, "pp": 2, "dp": 32, "zero_stage": 2})
    assert main(["export", *SEED, "--layout", zero2_pp, "--framework", "deepspeed"]) == 2
    err = capsys.readouterr().err
    assert "layout.zero_stage" in err and "engine.py" in err


def test_export_without_layout_takes_the_best_layout_the_framework_runs(capsys):
    assert main(["export", *SEED, "--framework", "megatron-core", "--format", "md"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# megatron-core export") and "pretrain_gpt.py" in text
