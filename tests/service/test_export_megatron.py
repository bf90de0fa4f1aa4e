"""Megatron-LM exports checked against Megatron-LM's own options and validation rules.

The option names, types, choices and defaults come from tests/fixtures/frameworks/megatron.json,
extracted from NVIDIA/Megatron-LM megatron/training/arguments.py (and the dataclasses its
ArgumentGroupFactory turns into options) at the commit recorded there, by
benchmarks/extract_framework_options.py. The validation rules are re-implemented in
tests/service/framework_options.py from the same files.
"""
from __future__ import annotations

import itertools

import pytest

from service.launchers import megatron_args, megatron_env, megatron_export
from service.launchers.megatron import megatron_rules, vocab_divisor
from solver.errors import SpecError
from solver.presets import load_model, load_training
from solver.specs import LayoutSpec, Recompute, ZeroStage
from tests.service.framework_options import (
    OptionError, fixture, megatron_defaults, megatron_violations, parse_megatron,
)


def test_fixture_is_megatrons_own_at_a_cited_commit():
    f = fixture("megatron")
    assert f["repository"] == "NVIDIA/Megatron-LM" and len(f["commit"]) == 40
    assert "megatron/training/arguments.py" in f["paths"] and f["allow_abbrev"] is False
    # spot checks against the source text (arguments.py / transformer_config.py at that commit)
    o = f["options"]
    assert o["--recompute-granularity"]["choices"] == ["full", "selective"]
    assert o["--no-overlap-p2p-communication"] == {**o["--no-overlap-p2p-communication"],
                                                  "action": "store_false", "dest": "overlap_p2p_comm"}
    assert o["--attention-dropout"]["default"] == 0.1 and o["--rotary-base"]["type"] == "int"


def _decode(args: list[str], model, training) -> dict:
    """The layout Megatron-LM would build from the arguments (namespace after defaults)."""
    a = {**megatron_defaults(), **parse_megatron(args)}
    zero = (0 if not a["use_distributed_optimizer"] else 1 if not a["use_megatron_fsdp"] else
            {"optim_grads": 2, "optim_grads_params": 3}[a["data_parallel_sharding_strategy"]])
    return {"tp": a["tensor_model_parallel_size"], "pp": a["pipeline_model_parallel_size"],
            "cp": a["context_parallel_size"], "zero_stage": zero, "micro_batch": a["micro_batch_size"],
            "sequence_parallel": a["sequence_parallel"],
            "recompute": a["recompute_granularity"] or "none",
            "global_batch": a["global_batch_size"], "vpp": a["num_virtual_stages_per_pipeline_rank"]
            or (a["num_layers"] // a["pipeline_model_parallel_size"] // a["num_layers_per_virtual_pipeline_stage"]
                if a["num_layers_per_virtual_pipeline_stage"] else 1),
            "model": (a["num_layers"], a["hidden_size"], a["ffn_hidden_size"], a["num_attention_heads"],
                      a["num_query_groups"] if a["group_query_attention"] else a["num_attention_heads"],
                      a["kv_channels"], a["swiglu"], not a["untie_embeddings_and_output_weights"])}


ZERO_STAGES: list[ZeroStage] = [0, 1, 2, 3]
RECOMPUTE: list[Recompute] = ["none", "selective", "full"]
LAYOUTS = [LayoutSpec(tp=tp, pp=pp, vpp=vpp, dp=dp, cp=cp, zero_stage=z, micro_batch=mb,
                      sequence_parallel=tp > 1, recompute=rc)
           for (tp, pp, vpp, dp, cp), z, mb, rc in itertools.product(
               [(8, 1, 1, 64, 1), (4, 2, 8, 64, 1), (4, 2, 2, 32, 2), (8, 4, 5, 16, 1), (2, 3, 1, 8, 1),
                (8, 8, 3, 8, 1), (1, 5, 1, 4, 4)],
               ZERO_STAGES, [1, 2], RECOMPUTE)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: f"tp{lay.tp}pp{lay.pp}v{lay.vpp}cp{lay.cp}"
                         f"z{lay.zero_stage}mb{lay.micro_batch}{lay.recompute[0]}")
def test_every_export_parses_passes_megatrons_rules_and_round_trips(layout, seed_model, seed_training):
    """Either Megatron-LM takes the export and builds exactly this layout, or the export is
    refused naming the rule and Megatron-LM's own check rejects the layout too."""
    rules = megatron_rules(seed_model, seed_training, layout, None)
    if rules:
        with pytest.raises(SpecError) as err:
            megatron_args(seed_model, seed_training, layout)
        assert "cannot run" in err.value.message and err.value.problems
        # what the export would have had to write: the plain per-stage form
        forced = ["--num-layers", "80", "--num-attention-heads", "64", "--seq-length", "8192",
                  "--pipeline-model-parallel-size", str(layout.pp), "--context-parallel-size", str(layout.cp)]
        if layout.vpp > 1:
            forced += ["--num-virtual-stages-per-pipeline-rank", str(layout.vpp)]
        assert megatron_violations(forced), rules
        return
    args = megatron_args(seed_model, seed_training, layout)
    assert megatron_violations(args) == []
    got = _decode(args, seed_model, seed_training)
    for key in ("tp", "pp", "cp", "vpp", "zero_stage", "micro_batch", "sequence_parallel", "recompute"):
        assert got[key] == getattr(layout, key), key
    assert got["global_batch"] * seed_training.seq_len == pytest.approx(seed_training.global_batch_tokens, rel=0.5)
    m = seed_model
    assert got["model"] == (m.layers, m.hidden, m.ffn_hidden, m.heads, m.kv_heads, m.head_dim, True, True)


def test_seed_layout_model_defining_flags(seed_model, seed_training, seed_layout):
    a = parse_megatron(megatron_args(seed_model, seed_training, seed_layout))
    assert a["tensor_model_parallel_size"] == 8 and a["global_batch_size"] == 512  # 64 x 1 x 8
    assert a["overlap_grad_reduce"] and a["overlap_param_gather"]  # as dp_exposed_s assumes
    assert a["position_embedding_type"] == "rope" and a["rotary_base"] == 10000  # stated default
    assert a["normalization"] == "RMSNorm" and a["layernorm_epsilon"] == 1e-5
    assert a["attention_dropout"] == a["hidden_dropout"] == 0.0  # Megatron's default is 0.1
    assert a["add_bias_linear"] is False and a["bf16"] and a["attention_backend"] == "flash"
    # vocabulary kept unpadded: 128000 is a multiple of 16 x TP 8 = 128 (vocab_utils.py)
    assert a["vocab_size"] == 128000 and 128000 % (a["make_vocab_size_divisible_by"] * 8) == 0
    assert megatron_env(seed_layout) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    notes = " ".join(megatron_export(seed_model, seed_training, seed_layout, [])["notes"])
    assert "rope_base is not stated" in notes and "10000" in notes


def test_stated_rope_base_eps_and_dropout_reach_the_flags(seed_model, seed_training, seed_layout):
    m = seed_model.model_copy(update={"rope_base": 500000.0, "norm_eps": 1e-6, "dropout": 0.1})
    a = parse_megatron(megatron_args(m, seed_training, seed_layout))
    assert a["rotary_base"] == 500000 and a["layernorm_epsilon"] == 1e-6
    assert a["attention_dropout"] == a["hidden_dropout"] == 0.1
    assert "rope_base" not in " ".join(megatron_export(m, seed_training, seed_layout, [])["notes"])


def test_vocab_divisor_keeps_llama3_vocabulary_unpadded():
    """Llama 3's 128256 = 2^8 x 501: at TP 8 the largest divisor <= 128 with d x 8 | 128256 is 32."""
    assert vocab_divisor(128256, 8) == 32 and 128256 % (32 * 8) == 0
    assert vocab_divisor(50257, 2) == 128  # odd vocabulary: padded, noted


def test_interleaving_at_pp2_keeps_p2p_overlap(seed_model, seed_training):
    """arguments.py: interleaving with p2p overlap disabled needs pp > 2; overlap is on unless
    --no-overlap-p2p-communication is given, so the PP=2 export must never give it."""
    lay = LayoutSpec(tp=4, pp=2, vpp=8, dp=64, zero_stage=1, sequence_parallel=True)
    args = megatron_args(seed_model, seed_training, lay)
    assert megatron_violations(args) == [] and "--no-overlap-p2p-communication" not in args
    assert megatron_violations(args + ["--no-overlap-p2p-communication"]) == [
        "interleaving without p2p overlap needs pp > 2"]


def test_a_wrong_flag_fails_the_fixture_check(seed_model, seed_training, seed_layout):
    """Negative tests: names or values Megatron-LM's parser would reject."""
    args = megatron_args(seed_model, seed_training, seed_layout)
    with pytest.raises(OptionError, match="unknown"):
        parse_megatron(args + ["--overlap-p2p-comm"])  # the name: not an option here
    with pytest.raises(OptionError, match="unknown"):
        parse_megatron(["--tensor-parallel-size", "8"])
    with pytest.raises(OptionError, match="not in"):
        parse_megatron(["--recompute-granularity", "partial"])
    with pytest.raises(OptionError, match="not int"):
        parse_megatron(["--rotary-base", "5e5"])


def test_uneven_split_and_refusals(seed_model, seed_training):
    uneven = LayoutSpec(tp=8, pp=4, dp=16)
    a = parse_megatron(megatron_args(seed_model, seed_training, uneven, split=[19, 21, 21, 19]))
    assert (a["decoder_first_pipeline_num_layers"], a["decoder_last_pipeline_num_layers"]) == (19, 19)
    # unequal middle stages: the layout string lists every stage
    args = megatron_args(seed_model, seed_training, uneven, split=[19, 20, 22, 19])
    assert parse_megatron(args)["pipeline_model_parallel_layout"] == "Et*19|t*20|t*22|t*19L"
    assert megatron_violations(args) == []
    inter = LayoutSpec(tp=8, pp=4, vpp=2, dp=16)
    args = megatron_args(seed_model, seed_training, inter, split=[9, 11, 11, 9, 10, 10, 11, 9])
    assert megatron_violations(args) == [] and "--num-virtual-stages-per-pipeline-rank" not in args
    with pytest.raises(SpecError, match="all pp x vpp"):  # per-rank counts cannot place chunks
        megatron_args(seed_model, seed_training, inter, split=[19, 21, 21, 19])
    cp_unfused = seed_training.model_copy(update={"attention_kernel": "unfused"})
    with pytest.raises(SpecError, match="Transformer Engine"):
        megatron_args(seed_model, cp_unfused, LayoutSpec(tp=8, cp=2, dp=32))


def test_layout_string_checks_catch_wrong_layouts():
    """pipeline_parallel_layer_layout.py: stage count divisible by pp, E first, L last, every
    decoder layer once; and no other virtual-pipeline option beside it (arguments.py)."""
    base = ["--num-layers", "8", "--num-attention-heads", "8", "--seq-length", "128",
            "--pipeline-model-parallel-size", "2"]
    assert megatron_violations(base + ["--pipeline-model-parallel-layout", "Et*3|t*5L"]) == []
    assert megatron_violations(base + ["--pipeline-model-parallel-layout", "Et*3|t*4L"])  # 7 layers
    assert megatron_violations(base + ["--pipeline-model-parallel-layout", "Et*3|t*2|t*3L"])  # 3 stages
    assert megatron_violations(base + ["--pipeline-model-parallel-layout", "t*3|t*5L"])  # no E
    assert megatron_violations(base + ["--pipeline-model-parallel-layout", "Et*2|t*2|t*2|t*2L",
                                       "--num-virtual-stages-per-pipeline-rank", "2"])


def test_rank_order_reaches_megatron():
    lay = LayoutSpec(tp=1, pp=2, dp=2, rank_order="tp-cp-pp-dp")
    m, t = load_model("llama3-8b"), load_training("seed-300b")
    assert parse_megatron(megatron_args(m, t, lay))["use_tp_pp_dp_mapping"] is True
    assert "--use-tp-pp-dp-mapping" not in megatron_args(m, t, lay.model_copy(update={"rank_order": "tp-cp-dp-pp"}))


def test_hf_config_fills_rope_base_and_norm_eps():
    """Meta-Llama-3-8B config.json: rope_theta 500000.0, rms_norm_eps 1e-05."""
    import json
    from pathlib import Path

    from solver.hf_config import model_from_hf_config

    path = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "llama3-8b" / "config.json"
    m = model_from_hf_config(json.loads(path.read_text()))
    assert (m.rope_base, m.norm_eps) == (500000.0, 1e-5)
    assert load_model("llama3-70b").rope_base == 500000.0


def test_interleaving_needs_whole_microbatch_groups(seed_model, seed_training, seed_cluster):
    """Megatron's interleaved schedule (schedules.py, default microbatch group = pp) needs the
    micro-batches per step to be a multiple of pp: DP 48 gives round(4194304 / (48 x 8192)) =
    11 micro-batches, not a multiple of pp 4; torch's Interleaved1F1B needs a multiple of its
    max(1, 11 // 4) = 2 rounds, which 11 is not either. DP 32 gives 16: both accept."""
    from service.launchers import framework_rules

    odd = LayoutSpec(tp=2, pp=4, vpp=2, dp=48, zero_stage=1)
    for fw in ("megatron-core", "torchtitan"):
        rules = framework_rules(fw, seed_model, seed_training, odd, None)
        assert any(f == "layout.micro_batch" and "11 micro-batches" in r for f, r in rules), fw
        assert not any(f == "layout.micro_batch" for f, _ in framework_rules(
            fw, seed_model, seed_training, odd.model_copy(update={"dp": 32}), None)), fw
