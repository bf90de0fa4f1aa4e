"""Framework profiles: every file loads strictly, every fact is cited, names are closed."""
from __future__ import annotations

import json

import pytest

from solver.errors import SpecError, UnknownPresetError
from solver.frameworks import FRAMEWORK_NAMES, load_framework
from solver.frameworks.loader import DATA
from solver.frameworks.profile import FrameworkProfile
from solver.presets import load_training
from topology.spec import parse_spec


@pytest.mark.parametrize("name", FRAMEWORK_NAMES)
def test_every_profile_loads_and_cites_every_fact(name):
    profile = load_framework(name)
    assert profile.name == name
    caps = profile.capabilities
    facts = [(f, getattr(caps, f)) for f in type(caps).model_fields if f != "experts"]
    facts += [(f"experts.{f}", getattr(caps.experts, f)) for f in type(caps.experts).model_fields]
    for field, fact in facts:
        sources = fact.sources
        assert sources and all(len(s.commit) == 40 for s in sources), field
    assert all(r.sources for r in profile.memory.recipes)


def test_data_files_are_exactly_the_literal_names():
    assert sorted(p.stem for p in DATA.glob("*.json")) == sorted(FRAMEWORK_NAMES)


def test_unknown_framework_is_refused_with_the_known_list():
    with pytest.raises(UnknownPresetError) as err:
        load_framework("jax")
    assert "megatron-core" in str(err.value) and "torchtitan" in str(err.value)


def test_training_framework_defaults_to_megatron_core_and_is_closed():
    t = load_training({"seq_len": 2048, "global_batch_tokens": 2048 * 4})
    assert t.framework == "megatron-core"
    assert load_training({"seq_len": 2048, "global_batch_tokens": 2048, "framework": "deepspeed"}).framework \
        == "deepspeed"
    with pytest.raises(SpecError, match=r"training\.framework"):
        load_training({"seq_len": 2048, "global_batch_tokens": 2048, "framework": "jax"})


def test_profile_refuses_a_stage_without_a_memory_recipe():
    raw = json.loads((DATA / "megatron-core.json").read_text())
    raw["memory"]["recipes"] = [r for r in raw["memory"]["recipes"] if r["zero_stage"] != 1]
    with pytest.raises(SpecError, match="no recipe for ZeRO-1"):
        parse_spec(FrameworkProfile, raw, "framework")


def test_unknown_key_in_a_profile_is_refused():
    raw = json.loads((DATA / "deepspeed.json").read_text())
    raw["capabilities"]["pipeline_magic"] = {"value": True, "sources": []}
    with pytest.raises(SpecError, match="pipeline_magic"):
        parse_spec(FrameworkProfile, raw, "framework")


def test_megatron_distributed_optimizer_is_6_plus_12_over_d():
    # Megatron-LM docs/user-guide/features/dist_optimizer.md (commit d98e8a6): bf16 params,
    # fp32 grads: 18 bytes/param without, 6 + 12/d with the distributed optimizer.
    mc = load_framework("megatron-core")
    assert mc.recipe(0, 1).bytes_per_param(8) == 18
    assert mc.recipe(1, 4).bytes_per_param(8) == 6 + 12 / 8
    assert mc.recipe(2, 4) is None and mc.recipe(3, 2) is None  # Megatron-FSDP: no PP
