"""Launcher exports checked against each framework's documented option names.

The frameworks (Megatron-LM, torchtitan, DeepSpeed) need torch and GPUs and cannot be
installed here, so their parsers are represented by the option names they declare:
- Megatron-LM: megatron/training/arguments.py (NVIDIA/Megatron-LM, commit 000c4ac2...):
  group.add_argument('--tensor-model-parallel-size' ...), '--num-layers-per-virtual-pipeline-stage',
  '--recompute-granularity' choices ['full', 'selective'], '--recompute-method' choices
  ['uniform', 'block'], '--data-parallel-sharding-strategy' choices ['no_shard', 'optim',
  'optim_grads', 'optim_grads_params'] (Megatron-FSDP docs), '--decoder-first-pipeline-num-layers'.
- torchtitan: torchtitan/config/job_config.py (pytorch/torchtitan, commit 000204a4...),
  dataclasses Training, Parallelism, ActivationCheckpoint (mode: 'selective'|'full'|'none').
- DeepSpeed: config-json docs (train_batch_size = micro x accumulation x DP world size).
"""
from __future__ import annotations

import tomllib

import pytest

from service.launchers import (
    deepspeed_config, deepspeed_warnings, launchers, megatron_args, megatron_env, rank_placement,
    to_toml, torchrun_args, torchtitan_config,
)
from solver.specs import LayoutSpec
from topology.catalog import load_cluster

MEGATRON_OPTIONS = {
    "--tensor-model-parallel-size": int, "--pipeline-model-parallel-size": int,
    "--context-parallel-size": int, "--num-layers-per-virtual-pipeline-stage": int,
    "--num-virtual-stages-per-pipeline-rank": int, "--sequence-parallel": None,
    "--use-distributed-optimizer": None, "--use-megatron-fsdp": None,
    "--no-gradient-accumulation-fusion": None,
    "--data-parallel-sharding-strategy": ("no_shard", "optim", "optim_grads", "optim_grads_params"),
    "--ckpt-format": ("torch", "torch_dist", "zarr", "fsdp_dtensor"),
    "--micro-batch-size": int, "--global-batch-size": int,
    "--recompute-granularity": ("full", "selective"), "--recompute-method": ("uniform", "block"),
    "--recompute-num-layers": int, "--num-layers": int, "--hidden-size": int,
    "--ffn-hidden-size": int, "--num-attention-heads": int, "--kv-channels": int,
    "--seq-length": int, "--max-position-embeddings": int, "--group-query-attention": None,
    "--num-query-groups": int, "--swiglu": None, "--untie-embeddings-and-output-weights": None,
    "--disable-bias-linear": None,
    # transformer_config.py add_qkv_bias, as --add-qkv-bias (argument_utils.py; Megatron-LM d98e8a64).
    "--add-qkv-bias": None, "--position-embedding-type": ("learned_absolute", "rope", "none"),
    "--normalization": ("LayerNorm", "RMSNorm"), "--bf16": None,
    "--decoder-first-pipeline-num-layers": int, "--decoder-last-pipeline-num-layers": int,
    # megatron/training/arguments.py: "rank initialization order tp-cp-ep-pp-dp".
    "--use-tp-pp-dp-mapping": None,
    # arguments.py: "If set, overlap DDP grad reduce." / "... param all-gather in distributed optimizer."
    "--overlap-grad-reduce": None, "--overlap-param-gather": None,
}
TORCHTITAN_KEYS = {
    "training": {"local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "fsdp_reshard_after_forward", "tensor_parallel_degree", "pipeline_parallel_degree",
                    "pipeline_parallel_split_points", "pipeline_parallel_layers_per_stage",
                    "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
                    "context_parallel_degree"},
    "activation_checkpoint": {"mode"},
}


def parse_megatron(args: list[str]) -> dict[str, object]:
    """A strict stand-in for Megatron's argparse: known options, typed values, choices."""
    out, i = {}, 0
    while i < len(args):
        name = args[i]
        assert name in MEGATRON_OPTIONS, f"unknown Megatron-LM option {name}"
        kind = MEGATRON_OPTIONS[name]
        if kind is None:
            out[name] = True
            i += 1
            continue
        value = args[i + 1]
        out[name] = int(value) if kind is int else value
        assert kind is int or value in kind, f"{name} {value} not in {kind}"
        i += 2
    return out


@pytest.fixture(scope="module")
def seed_specs(seed_model, seed_cluster, seed_training):
    return seed_model, seed_cluster, seed_training


def test_megatron_seed_layout(seed_specs, seed_layout):
    """Seed plan: TP8 in-node, DP64, ZeRO-1, micro-batch 1, 8 micro-batches -> 512 sequences."""
    m, _, t = seed_specs
    a = parse_megatron(megatron_args(m, t, seed_layout))
    assert a["--tensor-model-parallel-size"] == 8 and a["--pipeline-model-parallel-size"] == 1
    assert a["--sequence-parallel"] and a["--use-distributed-optimizer"]
    assert a["--overlap-grad-reduce"] and a["--overlap-param-gather"]  # as dp_exposed_s assumes
    assert a["--micro-batch-size"] == 1 and a["--global-batch-size"] == 512  # 64 x 1 x 8
    assert a["--recompute-granularity"] == "selective" and "--recompute-method" not in a
    assert a["--num-query-groups"] == 8 and a["--swiglu"] and "--untie-embeddings-and-output-weights" not in a
    assert a["--seq-length"] == 8192 and a["--bf16"]
    assert megatron_env(seed_layout) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


@pytest.mark.parametrize("zero, strategy", [(2, "optim_grads"), (3, "optim_grads_params")])
def test_megatron_zero_2_3_use_fsdp_strategies(seed_specs, seed_layout, zero, strategy):
    m, _, t = seed_specs
    a = parse_megatron(megatron_args(m, t, seed_layout.model_copy(update={"zero_stage": zero})))
    assert a["--use-megatron-fsdp"] and a["--data-parallel-sharding-strategy"] == strategy


def test_megatron_interleaving_full_recompute_and_uneven_split(seed_specs):
    m, _, t = seed_specs
    lay = LayoutSpec(tp=4, pp=4, vpp=5, dp=32, micro_batch=1, recompute="full")
    a = parse_megatron(megatron_args(m, t, lay))
    assert a["--num-layers-per-virtual-pipeline-stage"] == 4  # 80 layers / (4 x 5)
    assert (a["--recompute-granularity"], a["--recompute-method"]) == ("full", "uniform")
    uneven = LayoutSpec(tp=8, pp=4, dp=16)
    a = parse_megatron(megatron_args(m, t, uneven, split=[19, 21, 21, 19]))
    assert a["--decoder-first-pipeline-num-layers"] == 19
    assert a["--decoder-last-pipeline-num-layers"] == 19


def test_torchtitan_toml_round_trips(seed_specs, seed_layout):
    m, _, t = seed_specs
    cfg = torchtitan_config(m, t, seed_layout)
    parsed = tomllib.loads(to_toml(cfg))
    assert parsed == cfg
    for section, keys in parsed.items():
        assert set(keys) <= TORCHTITAN_KEYS[section], section
    par = parsed["parallelism"]
    assert (par["tensor_parallel_degree"], par["data_parallel_shard_degree"]) == (8, 64)
    assert par["fsdp_reshard_after_forward"] == "never"  # nearest torchtitan form of ZeRO-1
    assert parsed["activation_checkpoint"]["mode"] == "selective"
    # torchtitan derives accumulation as global / (local x DP): 512 / (1 x 64) = 8
    assert parsed["training"]["global_batch_size"] // (parsed["training"]["local_batch_size"] * 64) == 8


def test_torchtitan_pipeline_split_points(seed_specs):
    m, _, t = seed_specs
    cfg = torchtitan_config(m, t, LayoutSpec(tp=8, pp=4, dp=16, zero_stage=0), split=[19, 21, 21, 19])
    par = cfg["parallelism"]
    assert par["pipeline_parallel_split_points"] == ["layers.19", "layers.40", "layers.61"]
    assert par["data_parallel_replicate_degree"] == 16 and par["data_parallel_shard_degree"] == 1
    # with PP the local batch holds all micro-batches of a step: 512 / 16 replicas = 32
    assert cfg["training"]["local_batch_size"] == 32
    assert cfg["parallelism"]["pipeline_parallel_schedule"] == "1F1B"


def test_deepspeed_batch_identity(seed_specs, seed_layout):
    """DeepSpeed requires train_batch_size = micro x accumulation x DP world size."""
    _, _, t = seed_specs
    cfg = deepspeed_config(t, seed_layout)
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * \
        cfg["gradient_accumulation_steps"] * seed_layout.dp == 512
    assert cfg["zero_optimization"]["stage"] == 1 and cfg["bf16"]["enabled"] is True
    assert deepspeed_warnings(seed_layout) == []
    assert deepspeed_warnings(LayoutSpec(tp=8, pp=2, dp=32, zero_stage=2))  # pipe engine: ZeRO<=1


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
    assert tomllib.loads(out["torchtitan"]["toml"]) == out["torchtitan"]["config"]
    words = shlex.split(out["megatron"]["command"])
    assert words[0] == "CUDA_DEVICE_MAX_CONNECTIONS=1" and words[1] == "torchrun"
    script = words.index("pretrain_gpt.py")
    assert words[2:6] == ["--nnodes", "64", "--nproc-per-node", "8"]
    assert words[script + 1:] == out["megatron"]["args"]


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


def test_rank_order_reaches_megatron_and_the_placement():
    """tp-cp-pp-dp -> --use-tp-pp-dp-mapping; rank 1 of TP1 x PP2 x DP2 is PP stage 1 (its
    pipeline neighbour is the next rank), so ranks 0 and 1 are a PP group, not a DP group."""
    from solver.presets import load_model, load_training

    lay = LayoutSpec(tp=1, pp=2, dp=2, rank_order="tp-cp-pp-dp")
    args = megatron_args(load_model("llama3-8b"), load_training("seed-300b"), lay)
    assert "--use-tp-pp-dp-mapping" in args
    default = megatron_args(load_model("llama3-8b"), load_training("seed-300b"),
                            lay.model_copy(update={"rank_order": "tp-cp-dp-pp"}))
    assert "--use-tp-pp-dp-mapping" not in default
    c = load_cluster({"name": "c", "nodes": 1, "gpus_per_node": 4, "gpu": "seed-gpu",
                      "intra_node": {"bandwidth_gb_s": 450, "latency_us": 3},
                      "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}})
    placed = rank_placement(c, lay)
    assert placed["order"] == "tp-cp-pp-dp"
    assert 1 in placed["groups_of_rank0"]["pp"] and 1 not in placed["groups_of_rank0"]["dp"]
