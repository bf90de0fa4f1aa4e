"""Launcher exports for one layout: Megatron-LM arguments, a torchtitan TOML config, a
DeepSpeed JSON config, and the rank-to-GPU placement.

Option names follow each framework's own parser (cited beside each mapping):
- Megatron-LM: megatron/training/arguments.py (NVIDIA/Megatron-LM), e.g.
  --tensor-model-parallel-size, --num-layers-per-virtual-pipeline-stage,
  --recompute-granularity {full,selective}, --recompute-method {uniform,block},
  --data-parallel-sharding-strategy {no_shard,optim,optim_grads,optim_grads_params}
  (Megatron-FSDP, docs "Megatron-FSDP"; ZeRO-1 = --use-distributed-optimizer).
- torchtitan: torchtitan/config/job_config.py (pytorch/torchtitan): [training]
  local_batch_size, global_batch_size, seq_len; [parallelism] data_parallel_replicate_degree,
  data_parallel_shard_degree, tensor_parallel_degree, pipeline_parallel_degree,
  context_parallel_degree, pipeline_parallel_schedule, pipeline_parallel_microbatch_size,
  pipeline_parallel_layers_per_stage, fsdp_reshard_after_forward; [activation_checkpoint] mode.
- DeepSpeed: the JSON config keys train_batch_size, train_micro_batch_size_per_gpu,
  gradient_accumulation_steps, zero_optimization.stage, bf16.enabled (deepspeed.ai config docs);
  its pipeline engine accepts only ZeRO 0/1 (deepspeed/runtime/pipe/engine.py; DeepSpeed
  issues #1110, #3589).
"""
from __future__ import annotations

import shlex
from collections import Counter
from typing import Any

from solver.cost.accounting import batch_plan
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.spec import ClusterSpec

RANKS_LISTED_MAX = 4096  # placements list every rank up to this world size


# ------------------------------------------------------------------ Megatron-LM
def _megatron_model_args(m: ModelSpec, t: TrainingSpec) -> list[str]:
    args = ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden),
            "--ffn-hidden-size", str(m.ffn_hidden), "--num-attention-heads", str(m.heads),
            "--kv-channels", str(m.head_dim), "--seq-length", str(t.seq_len),
            "--max-position-embeddings", str(m.max_positions or t.seq_len)]
    if m.kv_heads != m.heads:
        args += ["--group-query-attention", "--num-query-groups", str(m.kv_heads)]
    if m.ffn_gated:
        args.append("--swiglu")
    if not m.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not m.bias:
        args.append("--disable-bias-linear")
        # TransformerConfig.add_qkv_bias "Add a bias term only for QKV projections", exposed as
        # --add-qkv-bias by ArgumentGroupFactory (NVIDIA/Megatron-LM d98e8a64, argument_utils.py).
        if m.qkv_bias:
            args.append("--add-qkv-bias")
    args += ["--position-embedding-type", "rope" if m.position_embedding == "rope" else "learned_absolute",
             "--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"]
    return args


def _megatron_pipeline_args(m: ModelSpec, layout: LayoutSpec, split: list[int] | None) -> list[str]:
    """Interleaving and uneven splits. An uneven split with equal middle stages maps to
    --decoder-first/last-pipeline-num-layers (Megatron-LM arguments.py)."""
    args: list[str] = []
    if split and layout.vpp == 1 and len(split) == layout.pp and len(set(split)) > 1:
        middle = split[1:-1]
        if len(set(middle)) <= 1:
            args += ["--decoder-first-pipeline-num-layers", str(split[0]),
                     "--decoder-last-pipeline-num-layers", str(split[-1])]
    if layout.vpp == 1:
        return args
    if m.layers % (layout.pp * layout.vpp) == 0:
        return ["--num-layers-per-virtual-pipeline-stage", str(m.layers // (layout.pp * layout.vpp))]
    return ["--num-virtual-stages-per-pipeline-rank", str(layout.vpp)]


def _megatron_zero_args(zero_stage: int) -> list[str]:
    """ZeRO-1 is Megatron's distributed optimizer; 2 and 3 are Megatron-FSDP strategies."""
    if zero_stage == 0:
        return []
    if zero_stage == 1:
        return ["--use-distributed-optimizer"]
    strategy = "optim_grads" if zero_stage == 2 else "optim_grads_params"
    # Megatron-FSDP "How to use" (Megatron-LM docs): these four flags plus its checkpoint format.
    return ["--use-distributed-optimizer", "--use-megatron-fsdp",
            "--data-parallel-sharding-strategy", strategy, "--no-gradient-accumulation-fusion",
            "--ckpt-format", "fsdp_dtensor"]


def _megatron_recompute_args(recompute: str) -> list[str]:
    if recompute == "selective":
        return ["--recompute-granularity", "selective"]
    if recompute == "full":
        return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"]
    return []


def megatron_args(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec,
                  split: list[int] | None = None) -> list[str]:
    """pretrain_gpt.py arguments for the layout (tokenizer, data and LR are left to the user).

    `split` is the layers per pipeline stage when the search chose an uneven split.
    """
    batch = batch_plan(t, layout.dp, layout.micro_batch)
    args = ["--tensor-model-parallel-size", str(layout.tp),
            "--pipeline-model-parallel-size", str(layout.pp),
            "--context-parallel-size", str(layout.cp)]
    args += _megatron_pipeline_args(m, layout, split)
    if layout.rank_order == "tp-cp-pp-dp":  # parallel_state order 'tp-cp-ep-pp-dp'
        args.append("--use-tp-pp-dp-mapping")
    if layout.sequence_parallel:
        args.append("--sequence-parallel")
    args += _megatron_zero_args(layout.zero_stage)
    if layout.dp * layout.cp > 1:  # the cost model hides DP traffic under compute (dp_exposed_s)
        args.append("--overlap-grad-reduce")
        if layout.zero_stage >= 1:
            args.append("--overlap-param-gather")
    args += ["--micro-batch-size", str(layout.micro_batch),
             "--global-batch-size", str(batch.sequences_per_step)]
    args += _megatron_recompute_args(layout.recompute)
    args += _megatron_model_args(m, t)
    if t.precision.weight_bytes == 2:
        args.append("--bf16")
    return args


def megatron_env(layout: LayoutSpec) -> dict[str, str]:
    """Environment Megatron-LM checks: TP/CP overlap needs CUDA_DEVICE_MAX_CONNECTIONS=1
    (validate_args in arguments.py); Megatron-FSDP (ZeRO 2/3) wants it unset."""
    if (layout.tp > 1 or layout.cp > 1) and layout.zero_stage < 2:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


# ------------------------------------------------------------------ torchtitan
def _split_points(split: list[int]) -> list[str]:
    """torchtitan split points: the first layer of every stage after the first ('layers.k')."""
    points, first = [], 0
    for layers in split[:-1]:
        first += layers
        points.append(f"layers.{first}")
    return points


def torchtitan_config(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec,
                      split: list[int] | None = None) -> dict[str, dict[str, Any]]:
    """torchtitan job-config sections for the layout.

    ZeRO 0 -> DDP (data_parallel_replicate_degree = dp); ZeRO 3 -> FSDP2 sharding
    (data_parallel_shard_degree = dp). torchtitan has no ZeRO-1/2 as such: the nearest is
    FSDP2 without resharding after forward (weights stay gathered through backward), noted
    in the result. torchtitan's TP always shards the sequence (sequence parallelism).
    """
    batch = batch_plan(t, layout.dp, layout.micro_batch)
    local = layout.micro_batch * (batch.grad_accum if layout.pp > 1 else 1)
    par: dict[str, Any] = {
        "data_parallel_replicate_degree": layout.dp if layout.zero_stage == 0 else 1,
        "data_parallel_shard_degree": 1 if layout.zero_stage == 0 else layout.dp,
        "tensor_parallel_degree": layout.tp,
        "pipeline_parallel_degree": layout.pp,
        "context_parallel_degree": layout.cp,
    }
    if layout.zero_stage in (1, 2):
        par["fsdp_reshard_after_forward"] = "never"
    if layout.pp > 1:
        stages = layout.pp * layout.vpp
        par["pipeline_parallel_schedule"] = "Interleaved1F1B" if layout.vpp > 1 else "1F1B"
        par["pipeline_parallel_microbatch_size"] = layout.micro_batch
        if split and len(split) == stages and len(set(split)) > 1:
            par["pipeline_parallel_split_points"] = _split_points(split)
        elif m.layers % stages == 0:
            par["pipeline_parallel_layers_per_stage"] = m.layers // stages
    return {
        "training": {"local_batch_size": local, "global_batch_size": batch.sequences_per_step,
                     "seq_len": t.seq_len,
                     "mixed_precision_param": "bfloat16" if t.precision.weight_bytes == 2 else "float32"},
        "parallelism": par,
        "activation_checkpoint": {"mode": layout.recompute},
    }


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def to_toml(sections: dict[str, dict[str, Any]]) -> str:
    """TOML text of flat sections (values: bool, int, float, str, lists of those)."""
    out: list[str] = []
    for name, body in sections.items():
        out.append(f"[{name}]")
        out += [f"{key} = {_toml_value(val)}" for key, val in body.items()]
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------ DeepSpeed
def deepspeed_config(t: TrainingSpec, layout: LayoutSpec) -> dict[str, Any]:
    """DeepSpeed JSON config (batch and ZeRO); TP/PP/CP are set by the model code."""
    batch = batch_plan(t, layout.dp, layout.micro_batch)
    cfg: dict[str, Any] = {
        "train_batch_size": batch.sequences_per_step,
        "train_micro_batch_size_per_gpu": layout.micro_batch,
        "gradient_accumulation_steps": batch.grad_accum,
        "zero_optimization": {"stage": layout.zero_stage, "overlap_comm": True,
                              "contiguous_gradients": True},
        "bf16": {"enabled": t.precision.weight_bytes == 2},
    }
    return cfg


def deepspeed_warnings(layout: LayoutSpec) -> list[str]:
    """Known incompatibilities of the layout with DeepSpeed's engines."""
    out = []
    if layout.pp > 1 and layout.zero_stage > 1:
        out.append("DeepSpeed's pipeline engine supports ZeRO 0/1 only (runtime/pipe/engine.py); "
                   "use Megatron-LM or torchtitan for pipeline + ZeRO 2/3")
    if layout.cp > 1:
        out.append("context parallelism is not a DeepSpeed config option; the model code "
                   "(e.g. Megatron-DeepSpeed or Ulysses) must provide it")
    return out


# ------------------------------------------------------------------ placement
def _groups_of_rank0(order: tuple[str, ...], dims: dict[str, int]) -> dict[str, list[int]]:
    """Rank 0's group of each kind: ranks 0, s, 2s, ... with s the product of the faster dims."""
    out, stride = {}, 1
    for kind in order:
        out[kind] = [i * stride for i in range(dims[kind])]
        stride *= dims[kind]
    return {k: out[k] for k in ("tp", "cp", "dp", "pp")}


def rank_placement(cluster: ClusterSpec, layout: LayoutSpec) -> dict[str, Any]:
    """Rank -> (node, local GPU) from topology.placement.place in the layout's rank order
    (Megatron's default TP, CP, DP, PP, or TP, CP, PP, DP); unavailable nodes get no rank.

    `ranks[r]` is [node, local GPU] of rank r (listed up to RANKS_LISTED_MAX ranks);
    `groups_of_rank0` gives the TP, CP, DP and PP groups that contain rank 0.
    Raises: InfeasibleError when the layout needs more GPUs than are available.
    """
    from topology.placement import parse_order, place

    dims = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    placed = place(cluster, dims, parse_order(layout.rank_order))
    per_node = Counter(s.node for s in placed.slots)
    counts = sorted(set(per_node.values()))
    out: dict[str, Any] = {
        "order": "-".join(placed.order), "world_size": layout.gpus,
        "gpus_per_node": cluster.gpus_per_node, "nodes": sorted(per_node),
        "ranks_per_node": counts[0] if len(counts) == 1 else counts,
        "domain_aligned": placed.aligned,
        "rule": ("rank = tp + TP*(cp + CP*(dp + DP*pp))" if layout.rank_order == "tp-cp-dp-pp"
                 else "rank = tp + TP*(cp + CP*(pp + PP*dp))") + "; ranks[r] = [node, local GPU]",
        "groups_of_rank0": _groups_of_rank0(placed.order, dims),
    }
    if layout.gpus <= RANKS_LISTED_MAX:
        out["ranks"] = [[s.node, s.local] for s in placed.slots]
    return out


def torchrun_args(placement: dict[str, Any]) -> list[str]:
    """torchrun arguments for a placement: one process per placed GPU on each node used.

    torchrun needs the same process count on every node; a placement with uneven nodes
    (domain alignment leaving GPUs idle) gets the largest count and a note in `launchers`.
    """
    per_node = placement["ranks_per_node"]
    nproc = per_node if isinstance(per_node, int) else max(per_node)
    return ["--nnodes", str(len(placement["nodes"])), "--nproc-per-node", str(nproc)]


def megatron_command(args: list[str], env: dict[str, str], torchrun: list[str]) -> str:
    """One shell line per node: env, torchrun (node rank and master address from the
    scheduler's environment), pretrain_gpt.py and the arguments."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    launch = ["torchrun", *torchrun, "--node-rank", "$NODE_RANK", "--master-addr", "$MASTER_ADDR",
              "--master-port", "${MASTER_PORT:-6000}", "pretrain_gpt.py"]
    line = " ".join(launch) + " " + shlex.join(args)
    return f"{prefix} {line}" if prefix else line


# ------------------------------------------------------------------ all of them
def launchers(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec, placement: dict[str, Any],
              split: list[int] | None = None) -> dict[str, Any]:
    """Every launcher export for one layout (placement from `rank_placement`; `split` the
    layers per pipeline stage when uneven)."""
    titan = torchtitan_config(m, t, layout, split)
    titan_notes = ["torchtitan TP always shards the sequence (sequence parallelism)"]
    if layout.zero_stage in (1, 2):
        titan_notes.append(f"torchtitan has no ZeRO-{layout.zero_stage}; the nearest is FSDP2 with "
                           "fsdp_reshard_after_forward = 'never' (ZeRO-2-like: gradients and "
                           "optimizer state sharded, weights gathered once per step), whose memory "
                           "and traffic differ from this estimate")
    args, env, run = megatron_args(m, t, layout, split), megatron_env(layout), torchrun_args(placement)
    return {
        "megatron": {"args": args, "env": env, "torchrun": run,
                     "command": megatron_command(args, env, run),
                     "notes": ["add tokenizer, data, optimizer and checkpoint arguments; "
                               f"the model's vocabulary is {m.vocab} tokens"]},
        "torchtitan": {"config": titan, "toml": to_toml(titan), "notes": titan_notes},
        "deepspeed": {"config": deepspeed_config(t, layout), "warnings": deepspeed_warnings(layout)},
    }
