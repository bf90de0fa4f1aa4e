"""DeepSpeed export: the JSON config, the `deepspeed` launcher line, and the model as a
Hugging Face (Llama-style) config for the model code DeepSpeed wraps.

Keys and options are DeepSpeed's own at deepspeedai/DeepSpeed commit edaa7221 (2026-08-22):
deepspeed/runtime/constants.py (train_batch_size, train_micro_batch_size_per_gpu,
gradient_accumulation_steps, bf16), deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig:
stage, overlap_comm, contiguous_gradients, reduce_scatter, reduce_bucket_size), deepspeed/runtime/tensor_parallel/
config.py (TPTrainingConfig.autotp_size, read from the "tensor_parallel" key),
deepspeed/launcher/runner.py (--num_nodes, --num_gpus, --hostfile, --master_addr,
--master_port) and deepspeed/__init__.py (the script's --deepspeed --deepspeed_config);
tests/fixtures/frameworks/deepspeed.json holds them. Rules (refused, naming them): the
pipeline engine asserts ZeRO < 2 (runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are
incompatible with pipeline parallelism"); its only training schedule is TrainSchedule
(runtime/pipe/schedule.py), so no interleaving; no ring context parallelism; plus the
deepspeed profile's capabilities (solver/data/frameworks/deepspeed.json). Tensor parallelism
without PP is AutoTP (tensor_parallel.autotp_size); under PP the engine's process grid is the
PipelineModule's topology (runtime/pipe/module.py L169-183: num_stages alone builds
PipeDataParallelTopology with DP = world / pp, and runtime/pipe/engine.py L109-111 asserts
train_batch_size == micro x accumulation x that grid's DP), while AutoTP builds its own DP x TP
mesh over the whole world with no pipeline axis (utils/groups.py _init_tp_mesh_device
L136-171). So TP x PP is exported as PipeModelDataParallelTopology(num_pp, num_mp, num_dp)
(runtime/pipe/topology.py L244-248; axes pipe, data, model: TP innermost, PP outermost, the
'tp-cp-dp-pp' order) with the layers' TP over the grid's model axis in the model code
(Megatron-DeepSpeed's way), and no AutoTP key. A MoE model's
expert layers are DeepSpeed's native MoE layer, set in the model code: the export gives their
arguments (service.launchers.deepspeed_moe).
"""
from __future__ import annotations

from typing import Any

from service.launchers.common import model_values
from service.launchers.deepspeed_moe import deepspeed_moe, moe_notes
from solver.cost.accounting import batch_plan
from solver.frameworks.precision import deepspeed_bf16_section
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec

CONFIG_FILE = "ds_config.json"
MASTER_PORT = "29500"  # torch.distributed's default port (runner.py TORCH_DISTRIBUTED_DEFAULT_PORT)


def deepspeed_rules(layout: LayoutSpec) -> list[tuple[str, str]]:
    """DeepSpeed's own checks this layout fails (engine and schedule), as (field, rule)."""
    out = []
    if layout.pp > 1 and layout.zero_stage >= 2:
        out.append(("layout.zero_stage", "DeepSpeed's pipeline engine asserts ZeRO < 2: 'ZeRO-2 and "
                    "ZeRO-3 are incompatible with pipeline parallelism' (deepspeed/runtime/pipe/engine.py)"))
    return out  # no interleaving: the profile's capability (runtime/pipe/schedule.py)


def deepspeed_config(t: TrainingSpec, layout: LayoutSpec) -> dict[str, Any]:
    """DeepSpeed JSON config: batch (train_batch_size = micro x accumulation x DP), ZeRO,
    precision and AutoTP. PP is the model code's PipelineModule(num_stages=pp)."""
    batch = batch_plan(t, layout.dp, layout.micro_batch)
    cfg: dict[str, Any] = {
        "train_batch_size": batch.sequences_per_step,
        "train_micro_batch_size_per_gpu": layout.micro_batch,
        "gradient_accumulation_steps": batch.grad_accum,
        "zero_optimization": {"stage": layout.zero_stage, "overlap_comm": True,
                              "contiguous_gradients": True, "reduce_scatter": True},
        "bf16": deepspeed_bf16_section(t, layout.zero_stage),  # the BF16 recipe charged
    }
    if layout.zero_stage >= 1:
        cfg["zero_optimization"]["reduce_bucket_size"] = reduce_bucket_elements(layout)
    if layout.tp > 1 and layout.pp == 1:  # AutoTP's mesh has no pipeline axis (see the module doc)
        cfg["tensor_parallel"] = {"autotp_size": layout.tp}
    return cfg


def reduce_bucket_elements(layout: LayoutSpec) -> int:
    """zero_optimization.reduce_bucket_size: the gradient bucket the cost model charges, in
    time (terms.bucketed_traffic) and memory (memory.dp_buffer_bytes: DeepSpeed's ZeRO
    optimizers keep one or two buffers of it during backward), max(40M, 1M x DP) elements
    at the default options. DeepSpeed's default, 5e8 (zero/config.py L113), would keep
    2 x 5e8 BF16 elements = 2 GB under overlap_comm (stage_1_and_2.py L2493-2514)."""
    from solver.cost.options import CostOptions
    from solver.cost.terms import dp_bucket_elements

    return dp_bucket_elements(CostOptions(), layout.dp * layout.cp)


def deepspeed_pipeline(layout: LayoutSpec) -> dict[str, Any] | None:
    """How the model code builds its PipelineModule (None without PP): num_stages alone when
    TP is 1 (PipeDataParallelTopology), else a PipeModelDataParallelTopology with TP as the
    model axis, so that the grid's DP is the layout's."""
    if layout.pp == 1:
        return None
    if layout.tp == 1:
        return {"module": "deepspeed.pipe.PipelineModule", "num_stages": layout.pp}
    return {"module": "deepspeed.pipe.PipelineModule",
            "topology": {"class": "deepspeed.runtime.pipe.topology.PipeModelDataParallelTopology",
                         "num_pp": layout.pp, "num_mp": layout.tp, "num_dp": layout.dp}}


def zero3_limits(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec) -> dict[str, int]:
    """ZeRO-3's gathered-parameter limits, in elements, as the deepspeed profile charges them
    (two layers gathered: recipe gathered_layers 2). DeepSpeed's defaults allow more: it keeps
    every parameter reused within stage3_max_reuse_distance (1e9 elements) resident, and
    prefetches up to stage3_prefetch_bucket_size (5e7) while under stage3_max_live_parameters
    (1e9) (deepspeed/runtime/zero/partitioned_param_coordinator.py L450-460, L640-665;
    zero/config.py L215-244, edaa7221): for a 8B-class model several layers beyond the two
    charged. Limits of one layer (reuse, prefetch) and two layers (live) keep it at the two,
    plus the one parameter a prefetch may add whole past the limit (the LM head, V x h,
    L452-476), which the profile charges too (recipe whole_parameter_prefetch).
    Empty below ZeRO-3."""
    from solver.cost.accounting import parameter_counts

    if layout.zero_stage < 3:
        return {}
    layer = parameter_counts(m, t.seq_len).per_layer // layout.tp
    return {"stage3_max_live_parameters": 2 * layer, "stage3_max_reuse_distance": layer,
            "stage3_prefetch_bucket_size": layer}


def deepspeed_launcher(placement: dict[str, Any]) -> list[str]:
    """`deepspeed` runner arguments and the training script's DeepSpeed arguments."""
    per_node = placement["ranks_per_node"]
    nproc = per_node if isinstance(per_node, int) else max(per_node)
    return ["deepspeed", "--num_nodes", str(len(placement["nodes"])), "--num_gpus", str(nproc),
            "--hostfile", "hostfile", "--master_addr", "$MASTER_ADDR", "--master_port", MASTER_PORT,
            "train.py", "--deepspeed", "--deepspeed_config", CONFIG_FILE]


def hf_model_config(m: ModelSpec, t: TrainingSpec) -> dict[str, Any] | None:
    """The model as a Hugging Face Llama config (what solver.hf_config reads back), or None
    when the model is not Llama-shaped (learned positions, LayerNorm, ungated FFN)."""
    if m.position_embedding != "rope" or m.norm != "rmsnorm" or not m.ffn_gated:
        return None
    values = model_values(m)
    return {"model_type": "llama", "num_hidden_layers": m.layers, "hidden_size": m.hidden,
            "intermediate_size": m.ffn_hidden, "num_attention_heads": m.heads,
            "num_key_value_heads": m.kv_heads, "head_dim": m.head_dim, "vocab_size": m.vocab,
            "tie_word_embeddings": m.tied_embeddings, "rope_theta": values.rope_base,
            "rms_norm_eps": values.norm_eps, "attention_bias": m.bias, "mlp_bias": m.bias,
            "attention_dropout": m.dropout, "hidden_act": "silu",
            "max_position_embeddings": m.max_positions or t.seq_len}


def deepspeed_export(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec,
                     placement: dict[str, Any]) -> dict[str, Any]:
    """The DeepSpeed launch block (rules checked by the caller)."""
    launcher = deepspeed_launcher(placement)
    notes = [*model_values(m).notes,
             f"save `config` as {CONFIG_FILE}; train.py calls deepspeed.initialize(args=args, "
             "model=model) with deepspeed.add_config_arguments on its parser"]
    if layout.pp > 1 and layout.tp == 1:
        notes.append(f"the model code builds PipelineModule(layers, num_stages={layout.pp}) "
                     "(deepspeed/runtime/pipe/module.py); the config has no pipeline key")
    elif layout.pp > 1:
        notes.append(f"the model code builds PipelineModule(layers, topology=PipeModelDataParallelTopology("
                     f"num_pp={layout.pp}, num_mp={layout.tp}, num_dp={layout.dp})) and splits its layers "
                     f"{layout.tp}-way over the grid's model-parallel group (Megatron-DeepSpeed style): AutoTP "
                     "cannot run under the pipeline engine (its DP x TP mesh has no pipeline axis)")
    if layout.recompute != "none":
        notes.append(f"recompute '{layout.recompute}' is model code in DeepSpeed "
                     "(deepspeed.checkpointing.checkpoint around each layer)")
    hf = hf_model_config(m, t)
    if hf is None:
        notes.append("the model is not Llama-shaped; no Hugging Face model config is given")
    elif m.dropout:
        notes.append("a Hugging Face Llama config has attention_dropout only; hidden dropout "
                     f"{m.dropout:g} is the model code's")
    moe = None
    if m.moe is not None:
        moe = deepspeed_moe(m, t, layout)
        notes += moe_notes(m, layout)
    config = deepspeed_config(t, layout)
    config["zero_optimization"].update(zero3_limits(m, t, layout))
    return {"config": config, "pipeline": deepspeed_pipeline(layout),
            "launcher": " ".join(launcher),
            "launcher_args": launcher, "model_config": hf, "moe": moe, "notes": notes,
            "source": "deepspeedai/DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641"}
