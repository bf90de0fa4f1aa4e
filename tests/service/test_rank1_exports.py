"""The bar: the layout trainplan ranks first runs, as exported, in the framework the user
names. For every MoE fixture x framework x two cluster sizes, the search's rank-1 layout
exports with no refusal and its exported flags pass the framework's own names and checks
(tests/service/framework_options.py over tests/fixtures/frameworks/*.json), or the search
refuses the model up front naming a field and the framework source; nothing is ranked and
then refused by the export."""
from __future__ import annotations

from pathlib import Path

import pytest

from service.launchers import export_layout, rank_placement
from solver.errors import InfeasibleError, SpecError
from solver.presets import load_model
from solver.search import search_layouts
from solver.specs import LayoutSpec, TrainingSpec
from tests.service.framework_options import (
    megatron_violations, parse_megatron, torchtitan_module_problems, torchtitan_violations,
)
from tests.service.deepspeed_options import deepspeed_config_problems, deepspeed_moe_problems
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
# (fixture, nodes of 8 H100) pairs: sizes where the model fits, small enough to search fast.
CASES = {"mixtral-8x7b": (4, 8), "mixtral-8x22b": (16, 32), "qwen3-30b-a3b": (2, 4), "deepseek-v3": (64, 128),
         "olmoe-1b-7b": (1, 2), "llama4-scout-text": (8, 16), "deepseek-v2-lite": (1, 2)}
FRAMEWORKS = ("megatron-core", "torchtitan", "deepspeed")
OPTIONS = {"top_k": 1, "time_limit_s": 5, "max_vpp": 2, "max_micro_batch": 2}
TRAIN = TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 512, tokens=1e11)


def _problems(framework: str, model, layout: LayoutSpec, out: dict) -> list[str]:
    """The framework's own parser and checks on what the export wrote."""
    if framework == "megatron-core":
        parse_megatron(out["args"])  # raises OptionError on an unknown flag or bad value
        return megatron_violations(out["args"])
    if framework == "torchtitan":
        return torchtitan_module_problems(out["module"]) + torchtitan_violations(out["settings"], model.layers,
                                                                                  layout.gpus, model.mtp_layers)
    return deepspeed_config_problems(out["config"]) + deepspeed_moe_problems(out["moe"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_rank1_layout_exports_or_the_search_refuses_up_front(name, framework):
    model = load_model(str(HF / name / "config.json"))
    training = TRAIN.model_copy(update={"framework": framework})
    exported = 0
    for nodes in CASES[name]:
        cluster = load_cluster("dgx-h100-superpod").model_copy(update={"nodes": nodes})
        try:
            best = search_layouts(model, cluster, training, OPTIONS, explain=False).as_dict()["layouts"][0]
        except SpecError as exc:  # refused up front: each problem names a field and a source file
            assert exc.problems and all(p.field.startswith(("model.", "training.")) and ".py" in p.reason
                                        for p in exc.problems), exc.message
            return
        except InfeasibleError:
            continue
        layout = LayoutSpec.model_validate({k: best[k] for k in LayoutSpec.model_fields if k in best}, strict=False)
        out = export_layout(framework, model, training, layout, rank_placement(cluster, layout),
                            best.get("pipeline_split"))  # raises SpecError if the export refuses rank 1
        assert _problems(framework, model, layout, out) == [], (nodes, layout)
        exported += 1
    assert exported, f"{name} on {framework}: no size fitted; the case tests nothing"
