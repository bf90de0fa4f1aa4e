"""What an export makes the framework do, checked against what the search charged for it: the
framework's own argument checks the option parsers in framework_options.py leave out, the
launch line, and the memory semantics (ZeRO / FSDP mode, recompute, state bytes per
parameter, FP8 recipe). Used by benchmarks/audit_rank1.py and tests/service/test_audit_rank1.py.

Sources (each at the commit its profile cites, solver/data/frameworks/*.json):
- NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/training/arguments.py
  validate_args: Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != "1" and --ckpt-format
  fsdp_dtensor (L1118-1170); TP or CP before Blackwell asserts CUDA_DEVICE_MAX_CONNECTIONS == "1"
  unless FSDP or the MoE A2A overlap (L1452-1479); selective recompute takes no method (L1425);
  --bf16 keeps FP32 main gradients unless --grad-reduce-in-bf16 or --main-grads-dtype bf16
  (L1204-1217); megatron/core/optimizer/__init__.py L1057: the precision-aware optimizer (the only
  way to lower the Adam moments' and main parameters' dtypes, optimizer_config.py L187-200) needs
  the distributed optimizer; megatron/core/parallel_state.py: the expert group EP x ETP divides
  TP x CP x DP.
- pytorch/torchtitan b5bcd76c66d0acb1a08b176d9639425bc55e0b2a config/configs.py, trainer.py.
- deepspeedai/DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641 runtime/config.py
  (train_batch_size = micro x accumulation x DP world, DP world = world / (TP x PP)).
- NVIDIA/TransformerEngine d0067d0da6cb01811b8072a7d304f0e00344ce2b pytorch/quantization.py
  L149-185: FP8 recipes' compute capabilities.
"""
from __future__ import annotations

import shlex
from typing import Any

from tests.service.framework_options import (
    megatron_defaults, megatron_violations, parse_megatron, torchtitan_module_problems, torchtitan_violations,
)
from tests.service.deepspeed_options import deepspeed_config_problems, deepspeed_moe_problems, parse_deepspeed_launcher

# TE quantization.py L149-185 (d0067d0): minimum compute capability of each FP8 recipe
FP8_MIN_CC = {"fp8-delayed": 8.9, "fp8-current": 8.9, "fp8-rowwise": 8.9, "fp8-blockwise": 9.0, "mxfp8": 10.0}
_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def export_mismatches(framework: str, model: Any, cluster: Any, training: Any, layout: Any,
                      split: list[int] | None, estimate: dict[str, Any], launch: dict[str, Any]) -> list[str]:
    """Every way the exported launch block differs from what runs at the predicted memory."""
    out = []
    if not estimate["fits"]:
        out.append("rank 1 is predicted not to fit its device")
    if estimate.get("framework_violations") or estimate.get("runs_in_framework") is False:
        out.append(f"the estimate flags framework violations: {estimate.get('framework_violations')}")
    cc = cluster.gpu.compute_capability
    need = FP8_MIN_CC.get(training.compute_precision)
    if need is not None and cc is not None and cc < need:
        out.append(f"{training.compute_precision} needs compute capability >= {need}, the GPU has {cc}")
    if framework == "megatron-core":
        return out + megatron_mismatches(model, cluster, training, layout, estimate, launch)
    if framework == "torchtitan":
        return out + torchtitan_mismatches(model, training, layout, estimate, launch)
    return out + deepspeed_mismatches(model, training, layout, estimate, launch)


def _charged_bytes_per_param(estimate: dict[str, Any]) -> float:
    return float(estimate["memory_recipe"]["bytes_per_param"])


def _precision_check(name: str, actual: float, estimate: dict[str, Any]) -> list[str]:
    charged = _charged_bytes_per_param(estimate)
    if actual > charged + 1e-6:
        return [f"{name} keeps {actual:g} bytes of model state per parameter as exported; the memory "
                f"model charged {charged:g} ({estimate['memory_recipe']['mode']})"]
    return []


# ------------------------------------------------------------------ Megatron-LM
def megatron_state_bytes(a: dict[str, Any], d: int) -> float:
    """Bytes of weights, main gradients and optimizer state per parameter Megatron-LM keeps
    for the parsed arguments `a`, sharded parts over d = DP x CP ranks."""
    fsdp, zero1 = a["use_megatron_fsdp"], a["use_distributed_optimizer"]
    weights = 2 if a["bf16"] else 4
    aware = a["use_precision_aware_optimizer"]
    moments = sum(_DTYPE_BYTES[a[k]] if aware else 4 for k in ("exp_avg_dtype", "exp_avg_sq_dtype"))
    if fsdp:  # Megatron-FSDP: main grads 'auto' = the model's gradient dtype, main params fp32
        grad_dtype = a["megatron_fsdp_main_grads_dtype"]
        grads = weights if grad_dtype == "auto" else _DTYPE_BYTES[grad_dtype]
        master = _DTYPE_BYTES.get(a["megatron_fsdp_main_params_dtype"], weights) if weights == 2 else 0
        strategy = a["data_parallel_sharding_strategy"]
        w_sharded = strategy == "optim_grads_params"
        return (0 if w_sharded else weights) + (weights / d if w_sharded else 0) + (grads + master + moments) / d
    bf16_grads = a["grad_reduce_in_bf16"] or a["main_grads_dtype"] == "bf16"
    grads = 2 if (a["bf16"] and bf16_grads) else 4
    master = 0 if weights == 4 else (2 if aware and a["main_params_dtype"] == "fp16" else 4)
    optimizer = master + moments
    return weights + grads + (optimizer / d if zero1 else optimizer)


def megatron_mismatches(model: Any, cluster: Any, training: Any, layout: Any, estimate: dict[str, Any],
                        launch: dict[str, Any]) -> list[str]:
    args, env = launch["args"], launch["env"]
    parse_megatron(args)
    out = megatron_violations(args)
    a = {**megatron_defaults(), **parse_megatron(args)}
    out += _megatron_launch(args, env, launch["command"], layout)
    fsdp = a["use_megatron_fsdp"]
    if fsdp and env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
        out.append("Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1")
    if fsdp and a["ckpt_format"] != "fsdp_dtensor":
        out.append("Megatron-FSDP asserts --ckpt-format fsdp_dtensor")
    hopper = (cluster.gpu.compute_capability or 9.0) < 10
    tp_cp = a["tensor_model_parallel_size"] > 1 or a["context_parallel_size"] > 1
    if hopper and tp_cp and not fsdp and not a["overlap_moe_expert_parallel_comm"] \
            and env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        out.append("TP/CP before Blackwell asserts CUDA_DEVICE_MAX_CONNECTIONS == 1")
    if a["recompute_granularity"] == "selective" and a["recompute_method"] is not None:
        out.append("selective recompute takes no --recompute-method")
    if a["use_precision_aware_optimizer"] and not a["use_distributed_optimizer"]:
        out.append("--use-precision-aware-optimizer needs the distributed optimizer")
    tp, cp, pp = a["tensor_model_parallel_size"], a["context_parallel_size"], a["pipeline_model_parallel_size"]
    dp = layout.gpus // (tp * cp * pp)
    etp = a["expert_tensor_parallel_size"] or tp
    if (tp * cp * dp) % (etp * a["expert_model_parallel_size"]):
        out.append("EP x ETP does not divide TP x CP x DP (parallel_state expert groups)")
    # memory semantics: what the arguments make Megatron keep vs what was charged
    want = {0: (False, False, None), 1: (True, False, None), 2: (True, True, "optim_grads"),
            3: (True, True, "optim_grads_params")}[layout.zero_stage]
    got = (a["use_distributed_optimizer"], fsdp, a["data_parallel_sharding_strategy"] if fsdp else None)
    if got != want:
        out.append(f"ZeRO-{layout.zero_stage} charged, arguments give dist-opt/FSDP/strategy {got}")
    out += _precision_check("Megatron-LM", megatron_state_bytes(a, dp * cp), estimate)
    gran = {"none": None, "selective": "selective", "full": "full"}[layout.recompute]
    if a["recompute_granularity"] != gran:
        out.append(f"recompute '{layout.recompute}' charged, --recompute-granularity {a['recompute_granularity']}")
    if layout.recompute == "full" and (a["recompute_method"], a["recompute_num_layers"]) != ("uniform", 1):
        out.append("full recompute is charged for every layer: --recompute-method uniform --recompute-num-layers 1")
    if a["sequence_parallel"] != (layout.sequence_parallel and tp > 1):
        out.append("sequence parallelism differs from the layout")
    if a["micro_batch_size"] != layout.micro_batch or \
            a["global_batch_size"] != layout.micro_batch * dp * estimate["grad_accum"]:
        out.append("micro/global batch differ from the estimate's")
    recipe = {"bf16": None, "fp8-delayed": "delayed", "fp8-current": "tensorwise", "fp8-blockwise": "blockwise",
              "mxfp8": "mxfp8"}.get(training.compute_precision, "?")
    if (a["fp8_recipe"] if a.get("fp8") else None) != recipe:
        out.append(f"compute precision {training.compute_precision} charged, --fp8-recipe "
                   f"{a['fp8_recipe'] if a.get('fp8') else None}")
    return out


def _megatron_launch(args: list[str], env: dict[str, str], command: str, layout: Any) -> list[str]:
    """The launch line: environment, torchrun over every GPU, pretrain_gpt.py, then the args."""
    words = shlex.split(command.replace("$NODE_RANK", "0").replace("$MASTER_ADDR", "h")
                        .replace("${MASTER_PORT:-6000}", "6000"))
    prefix = dict(w.split("=", 1) for w in words[:words.index("torchrun")])
    out = [] if prefix == env else [f"the command's environment {prefix} != env {env}"]
    script = words.index("pretrain_gpt.py")
    if words[script + 1:] != args:
        out.append("the command's arguments differ from args")
    run = words[:script]
    nodes = int(run[run.index("--nnodes") + 1]) if "--nnodes" in run else 1
    per = int(run[run.index("--nproc-per-node") + 1]) if "--nproc-per-node" in run else 1
    if nodes * per < layout.gpus:
        out.append(f"torchrun starts {nodes} x {per} ranks for {layout.gpus} GPUs")
    return out


# ------------------------------------------------------------------ torchtitan
def torchtitan_mismatches(model: Any, training: Any, layout: Any, estimate: dict[str, Any],
                          launch: dict[str, Any]) -> list[str]:
    from solver.frameworks import load_framework

    s = launch["settings"]
    out = torchtitan_module_problems(launch["module"]) + torchtitan_violations(s, model.layers, layout.gpus)
    par, t = s["parallelism"], s["training"]
    if layout.pp > 1 and layout.pipeline_layers:  # the split the estimate charged, chunk by chunk
        got = [sum(n.startswith("layers.") for n in p) for p in par.get("module_fqns_per_model_part") or []]
        if got != list(layout.pipeline_layers):
            out.append(f"stages hold {got} layers, the estimate charged {list(layout.pipeline_layers)}")
    shard = 1 if layout.zero_stage == 0 else layout.dp
    if (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) != (shard, layout.dp // shard):
        out.append(f"ZeRO-{layout.zero_stage} charged, FSDP shard/replicate {par['data_parallel_shard_degree']}/"
                   f"{par['data_parallel_replicate_degree']}")
    reshard = par.get("fsdp_reshard_after_forward", "default")
    want = {0: "default", 1: "default", 2: "never", 3: "always"}[layout.zero_stage]
    if reshard != want and not (layout.zero_stage == 3 and reshard == "default" and layout.pp == 1):
        out.append(f"ZeRO-{layout.zero_stage} charged, fsdp_reshard_after_forward {reshard!r}")
    policy = s["activation_checkpoint"]["policy"]
    if policy != {"none": None, "selective": "SelectiveAC", "full": "FullAC"}[layout.recompute]:
        out.append(f"recompute '{layout.recompute}' charged, activation checkpoint {policy}")
    if t["num_tokens_per_train_step"] != training.seq_len * layout.micro_batch * layout.dp * estimate["grad_accum"]:
        out.append("num_tokens_per_train_step differs from the estimate's batch")
    if f"NGPU={layout.gpus} " not in launch["dry_run"] or f"--module {launch['module_name']}" not in launch["command"]:
        out.append("the launch line does not select the module or all GPUs")
    own = load_framework("torchtitan").recipe(layout.zero_stage, layout.pp)
    if own is not None:  # torchtitan has no option for other state dtypes than its own recipe's
        out += _precision_check("torchtitan", own.bytes_per_param(layout.dp * layout.cp), estimate)
    return out


# ------------------------------------------------------------------ DeepSpeed
def deepspeed_mismatches(model: Any, training: Any, layout: Any, estimate: dict[str, Any],
                         launch: dict[str, Any]) -> list[str]:
    cfg = launch["config"]
    out = deepspeed_config_problems(cfg)
    if launch.get("moe") is not None:
        out += deepspeed_moe_problems(launch["moe"])
    run = parse_deepspeed_launcher(launch["launcher_args"])
    if run["num_nodes"] * run["num_gpus"] < layout.gpus:
        out.append("the launcher starts fewer ranks than the layout's GPUs")
    dp_world = layout.gpus // (layout.tp * layout.pp)  # DeepSpeed's DP world: world / (TP x PP)
    if cfg["train_batch_size"] != cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp_world:
        out.append("train_batch_size != micro x accumulation x DP world (runtime/config.py)")
    out += _deepspeed_pipeline(cfg, launch.get("pipeline"), layout)
    if cfg["gradient_accumulation_steps"] != estimate["grad_accum"] or \
            cfg["train_micro_batch_size_per_gpu"] != layout.micro_batch:
        out.append("micro-batch / accumulation differ from the estimate's")
    if cfg["zero_optimization"]["stage"] != layout.zero_stage:
        out.append("ZeRO stage differs from the layout's")
    out += _deepspeed_state(cfg["bf16"], layout, estimate)
    out += _deepspeed_reduce_bucket(cfg["zero_optimization"], layout)
    return out + _deepspeed_zero3(cfg["zero_optimization"], model, training, layout)


def _deepspeed_reduce_bucket(zero: dict[str, Any], layout: Any) -> list[str]:
    """ZeRO 1-3 keep one or two reduce_bucket_size buffers during backward (stage_1_and_2.py
    L2493-2514, stage3.py L730-735; default 5e8 elements, zero/config.py L113): the memory
    model charges buckets of terms.dp_bucket_elements, which the export must set."""
    from solver.cost.options import CostOptions
    from solver.cost.terms import dp_bucket_elements

    if layout.zero_stage < 1:
        return []
    bucket = zero.get("reduce_bucket_size", 5 * 10 ** 8)
    charged = dp_bucket_elements(CostOptions(), layout.dp * layout.cp)
    return [] if bucket <= charged else [f"reduce_bucket_size {bucket:,} above the {charged:,} charged"]


def _deepspeed_zero3(zero: dict[str, Any], model: Any, training: Any, layout: Any) -> list[str]:
    """ZeRO-3 keeps parameters reused within stage3_max_reuse_distance and prefetches within
    stage3_max_live_parameters (partitioned_param_coordinator.py L450-460, L640-665): the
    limits must hold the gathered parameters to the two layers the profile charges."""
    from solver.cost.accounting import parameter_counts

    if layout.zero_stage < 3:
        return []
    layer = parameter_counts(model, training.seq_len).per_layer // layout.tp
    live = zero.get("stage3_max_live_parameters", 10 ** 9)
    reuse = zero.get("stage3_max_reuse_distance", 10 ** 9)
    prefetch = zero.get("stage3_prefetch_bucket_size", 5 * 10 ** 7)
    if live > 2 * layer or reuse > layer or prefetch > layer:
        return [f"ZeRO-3 may keep more than the 2 layers charged ({2 * layer:,} elements): live {live:,}, "
                f"reuse distance {reuse:,}, prefetch {prefetch:,}"]
    return []


def _deepspeed_state(bf16: dict[str, Any], layout: Any, estimate: dict[str, Any]) -> list[str]:
    """DeepSpeed's BF16 ZeRO optimizer keeps FP32 master weights, master gradients and moments
    (16 bytes); bf16_master_weights_and_grads makes the first two BF16 (12), with
    bf16_optimizer_states the moments too (8); both need ZeRO 1-3 (runtime/config.py
    L1041-1049)."""
    from solver.frameworks import load_framework

    mwg, bos = bf16.get("bf16_master_weights_and_grads"), bf16.get("bf16_optimizer_states")
    out = []
    if (mwg or bos) and layout.zero_stage == 0:
        out.append("bf16_master_weights_and_grads / bf16_optimizer_states need ZeRO 1-3 (runtime/config.py)")
    if bos and not mwg:
        out.append("bf16_optimizer_states needs bf16_master_weights_and_grads (runtime/config.py)")
    own = load_framework("deepspeed").recipe(layout.zero_stage, layout.pp)
    if own is None or not bf16.get("enabled"):
        return out + ([] if bf16.get("enabled") else ["bf16 is off: the BF16 recipe was charged"])
    d, opt_own = layout.dp * layout.cp, own.optimizer_full_bytes + own.optimizer_sharded_bytes
    opt = 8 if bos else 12 if mwg else opt_own
    actual = own.bytes_per_param(d) - (1 - opt / opt_own) * (own.optimizer_full_bytes + own.optimizer_sharded_bytes / d)
    return out + _precision_check("DeepSpeed", actual, estimate)


def _deepspeed_pipeline(cfg: dict[str, Any], pipeline: dict[str, Any] | None, layout: Any) -> list[str]:
    """Under PP the engine's grid is the PipelineModule's topology (pipe/module.py L169-180:
    num_stages alone gives PipeDataParallelTopology, DP = world / pp) and pipe/engine.py
    L109-111 asserts train_batch_size == micro x accumulation x the grid's DP; AutoTP
    (tensor_parallel.autotp_size) builds its own DP x TP mesh over the whole world
    (utils/groups.py _init_tp_mesh_device L136-171), which has no pipeline axis."""
    if layout.pp == 1:
        return []
    out = []
    topo = (pipeline or {}).get("topology") or {"num_pp": layout.pp, "num_mp": 1,
                                                 "num_dp": layout.gpus // layout.pp}
    if topo["num_pp"] * topo["num_mp"] * topo["num_dp"] != layout.gpus or topo["num_pp"] != layout.pp:
        out.append(f"the pipeline topology {topo} does not cover the layout")
    grid_dp = topo["num_dp"]
    if cfg["train_batch_size"] != cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * grid_dp:
        out.append(f"pipe/engine.py asserts train_batch_size == micro x accumulation x the grid's DP ({grid_dp})")
    if cfg.get("tensor_parallel", {}).get("autotp_size", 1) > 1:
        out.append("AutoTP's DP x TP mesh has no pipeline axis: TP under PP is the pipeline topology's model axis")
    return out
