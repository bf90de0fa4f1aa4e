"""Checkpoint model: bytes written per checkpoint, write (blocking) time and load time.

Unit legend: `_bytes` bytes; `_s` seconds; `_gb_s` 1e9 bytes per second.

What each framework saves, read from its source (repository, file, commit):
- megatron-core (NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553):
  `megatron/training/config/training_config.py` — `ckpt_format` defaults to "torch_dist",
  `fully_parallel_save` defaults to True (the save is spread over the data-parallel ranks:
  every GPU writes a distinct part), `async_save` (--async-save, torch_dist only) defaults
  to False. `megatron/core/optimizer/distrib_optimizer.py`,
  `sharded_param_state_fs_model_space`: the distributed optimizer saves `fp32_param`,
  `exp_avg` and `exp_avg_sq` per parameter; replica_id keeps one copy of every tensor.
- torchtitan (pytorch/torchtitan @ b5bcd76c66d0acb1a08b176d9639425bc55e0b2a):
  `torchtitan/components/checkpointer/dcp.py` — DCP saves MODEL, OPTIMIZER, LR_SCHEDULER and
  DATALOADER states; `async_mode` is "disabled" (default), "async" or "async_with_pinned_mem".
  FSDP2 keeps the sharded parameters in their own dtype (the optimizer updates them), so
  with FP32 master weights the model weights ARE the 4-byte master copy: no second copy.
- deepspeed (deepspeedai/DeepSpeed @ edaa7221267243c7be7fb49c5d5f5c4fb97b4641):
  `deepspeed/runtime/engine.py` — `mp_rank_XX_model_states.pt` (the module's weights) is
  written by the data-parallel writer rank of each model-parallel rank
  (`save_non_zero_checkpoint`), and every ZeRO partition rank writes its
  `zero_pp_rank_N_mp_rank_XX_optim_states.pt` (`_save_zero_checkpoint`: FP32 master
  partition and moments); `deepspeed/runtime/model_checkpointing/constants.py` —
  checkpoint.writer.decoupled (default False) selects the DecoupledCheckpointEngine that
  writes from a background process.

Gradients are never saved. Bytes follow the precision recipe (solver.specs.PrecisionRecipe):
weights at weight_bytes, optimizer state at optimizer_bytes_per_param (moments, plus FP32
master weights when the recipe keeps them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from solver.frameworks.profile import FrameworkName
from solver.specs import LayoutSpec, PrecisionRecipe
from topology.spec import ClusterSpec, DEFAULT_STORAGE_GB_S_PER_GPU

FORMATS: dict[str, str] = {
    "megatron-core": "Megatron-Core distributed checkpoint (torch_dist), fully parallel save",
    "torchtitan": "torch.distributed.checkpoint (DCP), one shard per rank",
    "deepspeed": "DeepSpeed ZeRO checkpoint (mp_rank model states + zero_pp_rank optimizer states)",
}
ASYNC_FLAGS: dict[str, str] = {
    "megatron-core": "--async-save (with --ckpt-format torch_dist)",
    "torchtitan": "checkpoint.async_mode = 'async_with_pinned_mem'",
    "deepspeed": "checkpoint.writer.decoupled = true",
}


@dataclass(frozen=True)
class CheckpointCost:
    """One checkpoint of one layout: what is written, how long it blocks training, and
    how long a restart reads it back."""

    framework: str
    format: str
    weights_bytes: float
    optimizer_bytes: float
    writer_nodes: int
    write_gb_s: float  # effective write bandwidth of the whole save
    write_s: float  # until the checkpoint is durable
    blocking_s: float  # the part training waits for (write_s when synchronous)
    asynchronous: bool
    async_flag: str
    load_bytes: float
    load_s: float

    @property
    def bytes(self) -> float:
        """Bytes written per checkpoint (weights + optimizer state, each tensor once)."""
        return self.weights_bytes + self.optimizer_bytes

    def as_dict(self) -> dict[str, object]:
        return {"framework": self.framework, "format": self.format, "bytes": self.bytes,
                "weights_bytes": self.weights_bytes, "optimizer_bytes": self.optimizer_bytes,
                "writer_nodes": self.writer_nodes, "write_gb_s": self.write_gb_s,
                "write_s": self.write_s, "blocking_s": self.blocking_s,
                "asynchronous": self.asynchronous, "async_flag": self.async_flag,
                "load_bytes": self.load_bytes, "load_s": self.load_s,
                "formula": "write_s = bytes / min(aggregate write, writer nodes x per-node write); "
                           "blocking_s = write_s, or per-GPU bytes / host copy bandwidth when "
                           "asynchronous; load_s = load bytes / min(aggregate read, nodes x per-node read)"}


def saved_bytes_per_param(recipe: PrecisionRecipe, framework: str) -> tuple[float, float]:
    """(weight, optimizer) bytes per parameter in the saved checkpoint (see module docstring).

    torchtitan holds FSDP2 parameters in FP32 when the recipe keeps master weights, so the
    4-byte weights replace the separate master copy; the others save both.
    """
    if framework == "torchtitan" and recipe.master_weights:
        return 4.0, float(recipe.optimizer_moments * recipe.optimizer_moment_bytes)
    return float(recipe.weight_bytes), float(recipe.optimizer_bytes_per_param)


def _nodes(gpus: int, gpus_per_node: int) -> int:
    return max(1, math.ceil(gpus / gpus_per_node))


def aggregate_gb_s(cluster: ClusterSpec, read: bool = False) -> float:
    """The file system's aggregate bandwidth, GB/s (default scales with the cluster's GPUs)."""
    s = cluster.storage
    write = s.aggregate_write_gb_s or DEFAULT_STORAGE_GB_S_PER_GPU * cluster.gpus
    return (s.aggregate_read_gb_s or write) if read else write


def _bandwidth(cluster: ClusterSpec, nodes: int, read: bool = False) -> float:
    """min(aggregate, nodes x per-node limit), GB/s."""
    s = cluster.storage
    per_node = (s.per_node_read_gb_s or s.per_node_write_gb_s) if read else s.per_node_write_gb_s
    return min(aggregate_gb_s(cluster, read), nodes * per_node)


def checkpoint_cost(params: int, recipe: PrecisionRecipe, cluster: ClusterSpec, layout: LayoutSpec,
                    framework: FrameworkName = "megatron-core", asynchronous: bool = False) -> CheckpointCost:
    """Bytes, write time, blocking time and load time of one checkpoint of `layout`.

    Every node of the layout writes its part (Megatron fully parallel save, DCP shards,
    ZeRO partitions); DeepSpeed's model-states files come only from the data-parallel writer
    ranks (one per model-parallel rank: pp x ceil(tp x cp / gpus per node) nodes), which
XX
    (every replica loads its copy) and the optimizer state once (distributed optimizer /
    ZeRO partitions; a ZeRO-0 Megatron run that reads it per replica is not modelled).
    """
    w_pp, o_pp = saved_bytes_per_param(recipe, framework)
    weights, optimizer = params * w_pp, params * o_pp
    gpn = cluster.gpus_per_node
    nodes = _nodes(layout.gpus, gpn)
    write_s = (weights + optimizer) / (_bandwidth(cluster, nodes) * 1e9)
    per_gpu = (weights + optimizer) / layout.gpus
    if framework == "deepspeed":
        model_nodes = min(nodes, layout.pp * _nodes(layout.tp * layout.cp, gpn))
        write_s = max(write_s, weights / (_bandwidth(cluster, model_nodes) * 1e9))
        per_gpu = weights / (layout.tp * layout.pp * layout.cp) + optimizer / layout.gpus
    blocking = per_gpu / (cluster.storage.host_copy_gb_s * 1e9) if asynchronous else write_s
    load_bytes = weights * layout.dp * layout.cp + optimizer
    load_s = load_bytes / (_bandwidth(cluster, nodes, read=True) * 1e9)
    return CheckpointCost(framework, FORMATS[framework], weights, optimizer, nodes,
                          _bandwidth(cluster, nodes), write_s, min(blocking, write_s), asynchronous,
                          ASYNC_FLAGS[framework], load_bytes, load_s)
