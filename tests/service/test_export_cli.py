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
    # Llama 3 70B: the seed model's shape with an LM head of its own (torchtitan refuses tied
    # embeddings under pipeline parallelism, next test)
    untied = ["--model", "llama3-70b", *SEED[2:]]
    assert main(["export", *untied, "--layout", PP2_VPP8, "--framework", "torchtitan", "--format", "native"]) == 0
    text = capsys.readouterr().out
    assert text.startswith('"""torchtitan configuration') and torchtitan_module_problems(text) == []


def test_export_torchtitan_refuses_tied_embeddings_under_pipeline_parallelism(capsys):
    # seed-70b ties its vocabulary; torchtitan b5bcd76c decoder.py L168-171 raises NotImplementedError
    assert main(["export", *SEED, "--layout", PP2_VPP8, "--framework", "torchtitan"]) == 2
    err = capsys.readouterr().err
    assert "layout.pp" in err and "decoder.py" in err and "enable_weight_tying" in err


def test_export_refusal_exits_2_naming_the_rule(capsys):
    zero2_pp = json.dumps({"tp": 8, "pp": 2, "dp": 32, "zero_stage": 2})
    assert main(["export", *SEED, "--layout", zero2_pp, "--framework", "deepspeed"]) == 2
    err = capsys.readouterr().err
    assert "layout.zero_stage" in err and "engine.py" in err


def test_export_without_layout_takes_the_plans_rank1(capsys):
    assert main(["export", *SEED, "--framework", "megatron-core", "--format", "md"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# megatron-core export") and "pretrain_gpt.py" in text


def test_searched_layouts_export_for_their_framework():
    """The search's rules (framework profiles) and the exporters' rules agree: every layout
    `search --framework F` returns exports for F, and Megatron-LM takes the arguments. GPT-3
    175B on 140 DGX A100 nodes gives PP 35 with an uneven split (2s and 3s), written as
    --pipeline-model-parallel-layout."""
    from service.launchers import export_layout, rank_placement
    from solver.presets import load_model, load_training
    from solver.search import search_layouts
    from solver.specs import LayoutSpec
    from topology.catalog import load_cluster

    cases = [("seed-70b", "seed-300b", "seed-512", fw) for fw in ("megatron-core", "torchtitan", "deepspeed")]
    cases.append(("gpt3-175b", "gpt3-300b", "dgx-a100-superpod", "megatron-core"))
    for model, training, cluster, fw in cases:
        m, c = load_model(model), load_cluster(cluster)
        t = load_training(training).model_copy(update={"framework": fw})
        for e in search_layouts(m, c, t, {"top_k": 3}).as_dict()["layouts"]:
            lay = LayoutSpec.model_validate({k: e[k] for k in LayoutSpec.model_fields if k in e}, strict=False)
            out = export_layout(fw, m, t, lay, rank_placement(c, lay), e.get("pipeline_split"))
            if fw == "megatron-core":
                assert megatron_violations(out["args"]) == [], (model, e["rank"])


def test_moe_models_are_refused_not_exported_as_dense(capsys):
    """A mixture-of-experts model (Mixtral 8x7B, HF fixture) gets no dense export (exit 2): the
    Megatron-LM export writes its experts (tests/service/test_export_moe.py) and so refuses a
    layout it cannot run, here TP without sequence parallelism, naming the field."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
    mixtral = next((p for p in path.glob("*mixtral*/config.json")), None)
    assert mixtral is not None
    code = main(["export", "--model", str(mixtral), "--cluster", "seed-512", "--training", "seed-300b",
                 "--layout", '{"tp": 8, "dp": 64}', "--framework", "megatron-core"])
    assert code == 2 and "layout.sequence_parallel" in capsys.readouterr().err
