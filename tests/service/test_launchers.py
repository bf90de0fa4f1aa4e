"""Launcher exports checked against each framework's documented option names.

The frameworks (Megatron-LM, torchtitan, DeepSpeed) need torch and GPUs and cannot be
installed here, so their parsers are represented by the option names they declare:
- Megatron-LM: tests/service/test_export_megatron.py checks its exports against the extracted
  option fixture tests/fixtures/frameworks/megatron.json.
- torchtitan and DeepSpeed: tests/service/test_export_torchtitan_deepspeed.py checks them
  against tests/fixtures/frameworks/{torchtitan,deepspeed}.json.
"""
from __future__ import annotations

import pytest

from service.launchers import (
    deepspeed_config, launchers, rank_placement, torchrun_args, torchtitan_settings,
)
from solver.specs import LayoutSpec
from topology.catalog import load_cluster

@pytest.fixture(scope="module")
def seed_specs(seed_model, seed_cluster, seed_training):
    return seed_model, seed_cluster, seed_training


def test_torchtitan_pipeline_stages_from_the_split(seed_specs):
    """torchtitan's current config takes each stage's modules (module_fqns_per_model_part);
    the TOML-era pipeline_parallel_split_points is gone (torchtitan b5bcd76c configs.py)."""
    m, _, t = seed_specs
    s = torchtitan_settings(m, t, LayoutSpec(tp=8, pp=4, dp=16, zero_stage=0), split=[19, 21, 21, 19])
    par = s["parallelism"]
    assert [p[0] for p in par["module_fqns_per_model_part"]] == ["tok_embeddings", "layers.19", "layers.40",
                                                                  "layers.61"]
    assert par["data_parallel_replicate_degree"] == 16 and par["data_parallel_shard_degree"] == 1
    # every micro-batch of a step in one pipeline round: 512 sequences / 16 replicas / 1 per micro-batch
    assert par["num_pp_microbatches"] == 32 and par["pipeline_parallel_schedule"] == "1F1B"
    assert s["training"]["num_tokens_per_train_step"] == 512 * 8192


def test_deepspeed_batch_identity(seed_specs, seed_layout):
    """DeepSpeed requires train_batch_size = micro x accumulation x DP world size."""
    _, _, t = seed_specs
    cfg = deepspeed_config(t, seed_layout)
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * \
        cfg["gradient_accumulation_steps"] * seed_layout.dp == 512
    assert cfg["zero_optimization"]["stage"] == 1 and cfg["bf16"]["enabled"] is True
    assert cfg["tensor_parallel"] == {"autotp_size": 8}


def test_placement_seed_megatron_order(seed_cluster, seed_layout):
    p = rank_placement(seed_cluster, seed_layout)
    assert p["order"] == "tp-cp-dp-pp" and p["world_size"] == 512 and p["ranks_per_node"] == 8
    assert p["ranks"][:9] == [[0, g] for g in range(8)] + [[1, 0]]
    assert p["groups_of_rank0"]["tp"] == list(range(8))
    assert p["groups_of_rank0"]["dp"] == list(range(0, 512, 8))
    assert torchrun_args(p) == ["--nnodes", "64", "--nproc-per-node", "8"]


def test_placement_skips_unavailable_nodes():
    cluster = load_cluster({**_seed_cluster_dict(), "unavailable_nodes": [0, 1, 2]})
    p = rank_placement(cluster, LayoutSpec(tp=8, dp=61, sequence_parallel=True))
    assert p["nodes"] == list(range(3, 64))
    assert {node for node, _ in p["ranks"]}.isdisjoint({0, 1, 2})


def test_launchers_bundle(seed_specs, seed_layout):
    import shlex

    m, cluster, t = seed_specs
    out = launchers(m, t, seed_layout, rank_placement(cluster, seed_layout))
    assert set(out) == {"megatron", "torchtitan", "deepspeed"}
    words = shlex.split(out["megatron"]["command"])
    assert words[0] == "CUDA_DEVICE_MAX_CONNECTIONS=1" and words[1] == "torchrun"
    script = words.index("pretrain_gpt.py")
    assert words[2:6] == ["--nnodes", "64", "--nproc-per-node", "8"]
    assert words[script + 1:] == out["megatron"]["args"]
    # torchtitan has no ZeRO-1 without PP and DeepSpeed no Megatron-style SP: refused, by rule
    assert out["torchtitan"]["problems"][0]["field"] == "layout.zero_stage"
    assert {p["field"] for p in out["deepspeed"]["problems"]} == {"layout.sequence_parallel"}


def _seed_cluster_dict():
    from service.routers.schemas import SEED_CLUSTER

    return dict(SEED_CLUSTER)


def test_groups_of_rank0_agree_with_topology_placement(seed_cluster):
    """The closed form (stride = product of faster dims) against topology.placement's groups."""
    from topology.placement import place

    layout = LayoutSpec(tp=4, cp=2, dp=16, pp=4, vpp=2)
    p = rank_placement(seed_cluster, layout)
    placed = place(seed_cluster, {"tp": 4, "cp": 2, "dp": 16, "pp": 4})
    for kind in ("tp", "cp", "dp", "pp"):
        assert p["groups_of_rank0"][kind] == placed.groups(kind)[0], kind


def test_rank_order_reaches_the_placement():
    """tp-cp-pp-dp: rank 1 of TP1 x PP2 x DP2 is PP stage 1 (its pipeline neighbour is the
    next rank), so ranks 0 and 1 are a PP group, not a DP group."""
    lay = LayoutSpec(tp=1, pp=2, dp=2, rank_order="tp-cp-pp-dp")
    c = load_cluster({"name": "c", "nodes": 1, "gpus_per_node": 4, "gpu": "seed-gpu",
                      "intra_node": {"bandwidth_gb_s": 450, "latency_us": 3},
                      "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}})
    placed = rank_placement(c, lay)
    assert placed["order"] == "tp-cp-pp-dp"
    assert 1 in placed["groups_of_rank0"]["pp"] and 1 not in placed["groups_of_rank0"]["dp"]
