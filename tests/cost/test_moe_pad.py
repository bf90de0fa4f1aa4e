"""training.moe_pad_to_capacity (Megatron --moe-pad-expert-input-to-capacity): the spec's
rule, the framework rule and the one cost it removes, the token counts' all-gather."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from benchmarks.moe_accuracy import MOE_CASES
from solver.cost.estimate import make_context
from solver.cost.moe_comm import moe_layer_comm
from solver.frameworks.models import training_rules
from solver.presets import load_layout, load_model, load_training
from solver.specs import TrainingSpec
from topology.catalog import load_cluster


def test_padding_needs_a_capacity_factor():
    with pytest.raises(ValidationError, match=r"moe_pad_to_capacity: .*needs moe_capacity_factor"):
        TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 8, tokens=1e9, moe_pad_to_capacity=True)


def test_only_megatron_has_the_padding_option():
    row = next(json.loads(line) for line in MOE_CASES.open() if '"dgxc_grok1_bf16_32"' in line)
    model, training = load_model(row["model"]), load_training(row["training"])
    assert training.moe_pad_to_capacity
    fields = {f: [rule[0] for rule in training_rules(f, model, training)] for f in ("megatron-core", "torchtitan",
                                                                                   "deepspeed")}
    assert "training.moe_pad_to_capacity" not in fields["megatron-core"]
    assert "training.moe_pad_to_capacity" in fields["torchtitan"] and "training.moe_pad_to_capacity" in fields[
        "deepspeed"]

def test_padded_dispatch_gathers_no_token_counts():
    # DGXC Grok-1 on 32 H100 (4 nodes of 8): TP4 SP, EP8, experts split by TP (etp 4), capacity
    # 1.0 padded. Unpadded, Megatron all-gathers E x 8 = 64 bytes of counts per rank over the
    # expert TP x EP group (32 ranks, 4 nodes) before each forward dispatch: a ring of 31 steps
    # at the cross-node latency (10 us in the row's cluster; 2 KB is nothing at 45 GB/s), about
    # 0.31 ms. Padded, preprocess returns before that gather (token_dispatcher.py d98e8a64
    # L517-540; core_v0.9.0 L398-410): only the probabilities' two all-to-alls remain.
    row = next(json.loads(line) for line in MOE_CASES.open() if '"dgxc_grok1_bf16_32"' in line)
    model, cluster, layout = load_model(row["model"]), load_cluster(row["cluster"]), load_layout(row["layout"])
    padded = load_training(row["training"])
    args = {"tp": 4, "cp": 1, "sp": True, "recompute": "none", "micro_batch": 1, "ep": 8, "etp": 4, "dp": 8,
            "pp": 1}
    assert (layout.tp, layout.ep, layout.dp, layout.etp) == (4, 8, 8, None)
    on = moe_layer_comm(make_context(model, cluster, padded), **args)
    off = moe_layer_comm(make_context(model, cluster, padded.model_copy(update={"moe_pad_to_capacity": False})),
                         **args)
    assert on.a2a_one_s == off.a2a_one_s and on.etp_s == off.etp_s
    assert off.routing_s - on.routing_s == pytest.approx(31 * 10e-6, rel=0.05)
