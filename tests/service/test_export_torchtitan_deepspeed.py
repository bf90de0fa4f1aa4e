"""torchtitan and DeepSpeed exports checked against each framework's own option fixture
(tests/fixtures/frameworks/{torchtitan,deepspeed}.json: extracted from pytorch/torchtitan and
deepspeedai/DeepSpeed at the commits recorded there by benchmarks/extract_framework_options.py)
and against the frameworks' own validation rules (re-implemented in framework_options.py)."""
from __future__ import annotations

import itertools

import pytest

from service.launchers import export_layout, framework_rules, rank_placement
from service.launchers.torchtitan import torchtitan_settings
from solver.errors import SpecError
from solver.hf_config import model_from_hf_config
from solver.presets import load_model
from solver.specs import LayoutSpec, Recompute, ZeroStage
from tests.service.framework_options import OptionError, fixture, torchtitan_module_problems, torchtitan_violations
from tests.service.deepspeed_options import deepspeed_config_problems, parse_deepspeed_launcher

ZERO_STAGES: list[ZeroStage] = [0, 1, 2, 3]
RECOMPUTE: list[Recompute] = ["none", "full"]
LAYOUTS = [LayoutSpec(tp=tp, pp=pp, vpp=vpp, dp=dp, cp=cp, zero_stage=z, micro_batch=mb,
                      sequence_parallel=sp and tp > 1, recompute=rc)
           for (tp, pp, vpp, dp, cp), z, mb, rc, sp in itertools.product(
               [(8, 1, 1, 64, 1), (4, 2, 8, 64, 1), (4, 2, 2, 32, 2), (8, 4, 5, 16, 1), (8, 2, 1, 32, 1),
                (1, 1, 1, 512, 1), (8, 1, 1, 32, 2)],
               ZERO_STAGES, [1, 2], RECOMPUTE, [True, False])]


def _id(lay: LayoutSpec) -> str:
    return (f"tp{lay.tp}pp{lay.pp}v{lay.vpp}cp{lay.cp}z{lay.zero_stage}mb{lay.micro_batch}"
            f"{lay.recompute[0]}{'s' if lay.sequence_parallel else ''}")


@pytest.fixture(scope="module")
def placements(seed_cluster):
    return {_id(lay): rank_placement(seed_cluster, lay) for lay in LAYOUTS}


def test_torchtitan_fixture_is_its_current_config_system():
    f = fixture("torchtitan")
    assert f["repository"] == "pytorch/torchtitan" and len(f["commit"]) == 40
    par = f["classes"]["ParallelismConfig"]["fields"]
    # the TOML-era split points are gone; explicit per-stage module lists replace them
    assert "pipeline_parallel_split_points" not in par and "module_fqns_per_model_part" in par
    assert par["fsdp_reshard_after_forward"]["choices"] == ["default", "always", "never"]
    assert "local_batch_size" not in f["classes"]["TrainingConfig"]["fields"]


@pytest.mark.parametrize("layout", LAYOUTS, ids=_id)
def test_torchtitan_exports_use_only_its_names_and_pass_its_checks(layout, seed_model, seed_training, placements):
    rules = framework_rules("torchtitan", seed_model, seed_training, layout, None)
    if rules:
        with pytest.raises(SpecError):
            export_layout("torchtitan", seed_model, seed_training, layout, placements[_id(layout)])
        return
    out = export_layout("torchtitan", seed_model, seed_training, layout, placements[_id(layout)])
    assert torchtitan_module_problems(out["module"]) == []
    assert torchtitan_violations(out["settings"], seed_model.layers, layout.gpus) == []
    par, t = out["settings"]["parallelism"], out["settings"]["training"]
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == layout.dp
    # torchtitan's accumulation = step tokens / (microbatch tokens x pp micro-batches x DP)
    accum = t["num_tokens_per_train_step"] // (t["num_tokens_per_microbatch_per_dp_rank"] * layout.dp
                                                * par.get("num_pp_microbatches", 1))
    per_step = accum * par.get("num_pp_microbatches", 1) * layout.dp * layout.micro_batch
    assert per_step * seed_training.seq_len == t["num_tokens_per_train_step"]


def test_torchtitan_refuses_what_its_llama3_model_cannot_express(seed_model, seed_training, seed_cluster):
    lay = LayoutSpec(tp=8, dp=64, zero_stage=3, sequence_parallel=True)
    place = rank_placement(seed_cluster, lay)
    with pytest.raises(SpecError, match="no biases"):
        export_layout("torchtitan", seed_model.model_copy(update={"bias": True}), seed_training, lay, place)
    with pytest.raises(SpecError, match="no dropout"):
        export_layout("torchtitan", seed_model.model_copy(update={"dropout": 0.1}), seed_training, lay, place)
    with pytest.raises(SpecError, match="head_dim"):
        export_layout("torchtitan", seed_model.model_copy(update={"head_dim": 256}), seed_training, lay, place)
    with pytest.raises(SpecError, match="ZeRO stages"):  # the torchtitan profile: no ZeRO-1 without PP
        export_layout("torchtitan", seed_model, seed_training, lay.model_copy(update={"zero_stage": 1}), place)


def test_torchtitan_wrong_names_fail_the_check(seed_model, seed_training, seed_cluster):
    lay = LayoutSpec(tp=4, pp=2, vpp=8, dp=64, zero_stage=1, sequence_parallel=True)
    untied = seed_model.model_copy(update={"tied_embeddings": False})  # torchtitan: no tying under PP
    out = export_layout("torchtitan", untied, seed_training, lay, rank_placement(seed_cluster, lay))
    module = out["module"]
    assert torchtitan_module_problems(module.replace("num_pp_microbatches", "pipeline_parallel_microbatches"))
    assert torchtitan_module_problems(module.replace(
        "module_fqns_per_model_part", "pipeline_parallel_split_points"))  # removed from torchtitan
    assert torchtitan_module_problems(module.replace("scaling=\"none\"", "scaling=\"linear\""))
    assert torchtitan_module_problems(module.replace("from torchtitan.trainer import Trainer",
                                                     "from torchtitan.config import JobConfig"))
    bad = {**out["settings"], "parallelism": {**out["settings"]["parallelism"],
                                              "pipeline_parallel_schedule": "1F1B"}}
    assert "single-stage schedule needs exactly one stage per rank" in torchtitan_violations(bad, 80, 512)


def test_torchtitan_stage_split_follows_the_plan(seed_model, seed_training):
    """An uneven per-chunk split (pp x vpp values) becomes the stages' module lists."""
    lay = LayoutSpec(tp=8, pp=4, vpp=2, dp=16, zero_stage=1)
    split = [9, 11, 11, 9, 9, 11, 11, 9]
    par = torchtitan_settings(seed_model, seed_training, lay, split)["parallelism"]
    assert [sum(n.startswith("layers.") for n in p) for p in par["module_fqns_per_model_part"]] == split
    assert torchtitan_violations({"parallelism": par, "training": torchtitan_settings(
        seed_model, seed_training, lay, split)["training"]}, 80, 512) == []


@pytest.mark.parametrize("layout", LAYOUTS, ids=_id)
def test_deepspeed_exports_use_only_its_keys_and_pass_its_checks(layout, seed_model, seed_training, placements):
    rules = framework_rules("deepspeed", seed_model, seed_training, layout, None)
    engine_rule = layout.pp > 1 and layout.zero_stage >= 2  # runtime/pipe/engine.py assert
    if engine_rule:
        assert any("ZeRO-2 and ZeRO-3 are incompatible" in r for _, r in rules)
    if rules:
        with pytest.raises(SpecError):
            export_layout("deepspeed", seed_model, seed_training, layout, placements[_id(layout)])
        return
    out = export_layout("deepspeed", seed_model, seed_training, layout, placements[_id(layout)])
    cfg = out["config"]
    assert deepspeed_config_problems(cfg) == []
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * \
        cfg["gradient_accumulation_steps"] * layout.dp  # DeepSpeed's batch identity
    launch = parse_deepspeed_launcher(out["launcher_args"])
    assert launch["num_nodes"] * launch["num_gpus"] == layout.gpus and launch["deepspeed"]
    assert model_from_hf_config(out["model_config"]).model_dump(exclude={"name", "max_positions"}) == \
        seed_model.model_copy(update={"rope_base": 10000.0, "norm_eps": 1e-5}).model_dump(
            exclude={"name", "max_positions"})


def test_deepspeed_wrong_keys_fail_the_check():
    assert deepspeed_config_problems({"train_batch_size": 8, "zero_optimization": {"stage": 2}}) == []
    assert deepspeed_config_problems({"zero_optimisation": {"stage": 2}})
    assert deepspeed_config_problems({"zero_optimization": {"stage": 4}})
    assert deepspeed_config_problems({"zero_optimization": {"overlap_comms": True}})
    assert deepspeed_config_problems({"bf16": {"enabled": "yes"}})
    with pytest.raises(OptionError):
        parse_deepspeed_launcher(["deepspeed", "--num-gpus", "8", "train.py"])
    with pytest.raises(OptionError):
        parse_deepspeed_launcher(["deepspeed", "--num_gpus", "8", "train.py", "--ds_config", "x.json"])


def test_llama3_preset_exports_state_its_rope_base(seed_training, seed_cluster):
    m = load_model("llama3-70b")
    lay = LayoutSpec(tp=8, pp=4, dp=16, zero_stage=1, sequence_parallel=True)
    out = export_layout("torchtitan", m, seed_training, lay, rank_placement(seed_cluster, lay))
    assert "theta=500000.0" in out["module"] and not any("rope_base" in n for n in out["notes"])


def test_torchtitan_zero3_keeps_the_lm_head_unit_it_is_charged_for(seed_model, seed_training):
    # The ZeRO-3 recipe charges the [norm, lm_head] unit gathered from its forward to its
    # backward (head_unit_unsharded, solver/data/frameworks/torchtitan.json), which torchtitan
    # does under fsdp_reshard_after_forward 'default' without PP: blocks reshard
    # (get_fsdp_reshard_after_forward_policy -> not pp_enabled), the head unit does not
    # (apply_fsdp_to_decoder: reshard_after_forward=policy == "always"; pytorch/torchtitan
    # b5bcd76c distributed/fsdp.py L112-137, L258-265). 'always' would reshard it and gather
    # it again in backward, another run than the one charged.
    from solver.frameworks import load_framework
    assert load_framework("torchtitan").recipe(3, 1).head_unit_unsharded
    par = torchtitan_settings(seed_model, seed_training, LayoutSpec(tp=8, dp=64, zero_stage=3,
                                                                    sequence_parallel=True))["parallelism"]
    assert par["fsdp_reshard_after_forward"] == "default"
    for zero, pp, want in ((2, 1, "never"), (1, 2, "default"), (3, 2, "always")):
        lay = LayoutSpec(tp=8, pp=pp, dp=32, zero_stage=zero, sequence_parallel=True)
        assert torchtitan_settings(seed_model, seed_training, lay)["parallelism"]["fsdp_reshard_after_forward"] == want
