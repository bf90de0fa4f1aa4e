"""Megatron-LM export: pretrain_gpt.py arguments, environment and the torchrun line.

Every option name, type and choice below is Megatron-LM's own, from
megatron/training/arguments.py and the dataclasses its ArgumentGroupFactory turns into options
(megatron/core/model_parallel_config.py, megatron/core/transformer/transformer_config.py,
megatron/training/config/*.py) at NVIDIA/Megatron-LM commit d98e8a64ddf3 (2026-08-22);
tests/fixtures/frameworks/megatron.json holds them, extracted by
benchmarks/extract_framework_options.py. Rules the export obeys (same files):
- interleaving (arguments.py validate_args): layers divisible by pp (arguments.py: 'Number of
  layers should be divisible by the pipeline-model-parallel size'), layers per stage divisible
  by --num-layers-per-virtual-pipeline-stage; with p2p overlap disabled interleaving needs
  pp > 2. p2p overlap is on by default (`--no-overlap-p2p-communication` is a store_false
  option), so PP = 2 with interleaving runs as long as the export never disables it; there is
  no `--overlap-p2p-comm` option at this commit.
- uneven pipelines: an uneven first/last stage around equal middle stages is
  --decoder-first/last-pipeline-num-layers; any other split (and every uneven interleaved one)
  is --pipeline-model-parallel-layout, which lists each virtual stage's layers ('E' embedding,
  'L' loss, 't' decoder layer; stage i on rank i mod pp; core/transformer/
  pipeline_parallel_layer_layout.py) and excludes the other virtual-pipeline options.
- ZeRO-1 is --use-distributed-optimizer; ZeRO-2/3 are Megatron-FSDP's optim_grads /
  optim_grads_params strategies (Megatron-FSDP docs), which want CUDA_DEVICE_MAX_CONNECTIONS
  unset (arguments.py asserts != "1").
- context parallelism: seq-length divisible by 2 x cp (arguments.py); it runs on Transformer
  Engine attention only, so CP > 1 with attention_kernel 'unfused' is refused.
"""
from __future__ import annotations

import math
import shlex

from service.launchers.common import ModelValues, model_values, refuse
from service.launchers.megatron_moe import (
    mla_args, moe_args, moe_notes, moe_rules, mtp_args, recompute_module_args, rope_variant_args,
)
from solver.cost.accounting import batch_plan
from solver.frameworks.precision import megatron_precision_args
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec

# Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP
# (megatron/training/vocab_utils.py); default 128.
VOCAB_DIVISOR_DEFAULT = 128


def _rank_layers(layout: LayoutSpec, split: list[int] | None) -> list[int] | None:
    """Layers per pipeline rank from a per-stage or per-chunk split (chunk c on rank c mod pp)."""
    if not split:
        return None
    if len(split) == layout.pp:
        return list(split)
    return [sum(split[r::layout.pp]) for r in range(layout.pp)]


def _first_last(layout: LayoutSpec, ranks: list[int] | None) -> bool:
    """True when the split is an uneven first/last stage around equal middle stages
    (--decoder-first/last-pipeline-num-layers, vpp 1); other splits use the layout string."""
    return layout.vpp == 1 and ranks is not None and len(set(ranks[1:-1])) <= 1


def pipeline_rules(m: ModelSpec, layout: LayoutSpec, split: list[int] | None) -> list[tuple[str, str]]:
    """Megatron-LM's pipeline checks that this layout would fail (empty when it runs)."""
    pp, vpp, ranks = layout.pp, layout.vpp, _rank_layers(layout, split)
    if pp == 1:
        return []
    if ranks is None or (len(set(ranks)) == 1 and (not split or len(set(split)) == 1)):
        if m.layers % (pp * vpp):
            return [("layout.pp", f"model.layers ({m.layers}) must be divisible by pp x vpp "
                     f"({pp * vpp}) (arguments.py validate_args; use pipeline_layers for an "
                     "uneven split)")]
        return []
    if len(split or []) != pp * vpp and not _first_last(layout, ranks):
        return [("layout.pipeline_layers", f"give the layers of all pp x vpp ({pp * vpp}) model "
                 "chunks: --pipeline-model-parallel-layout lists every virtual stage")]
    return []


def megatron_rules(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec,
                   split: list[int] | None) -> list[tuple[str, str]]:
    """Every Megatron-LM rule the layout breaks, as (field, rule with its source)."""
    out = pipeline_rules(m, layout, split)
    if layout.cp > 1 and t.attention_kernel == "unfused":
        out.append(("training.attention_kernel", "Megatron-LM runs context parallelism only on "
                    "Transformer Engine (fused/flash) attention, not 'unfused'"))
    if layout.cp > 1 and t.seq_len % (2 * layout.cp):
        out.append(("layout.cp", f"seq_len ({t.seq_len}) must be a multiple of 2 x cp "
                    f"({2 * layout.cp}) (arguments.py)"))
    return out


def layout_string(split: list[int], mtp_layers: int = 0) -> str:
    """--pipeline-model-parallel-layout for layers per virtual stage (stage i on rank i mod pp,
    pipeline_parallel_layer_layout.py): 'E' embedding first, 'L' loss last, 't*n' layers, and
    'm' once per multi-token-prediction layer in the last stage before the loss (validate_layer_layout
    L112-133 d98e8a64: the count must equal --mtp-num-layers, in a rank's last virtual stage)."""
    stages = [f"t*{n}" for n in split]
    stages[-1] += "m" * mtp_layers
    return "|".join(["E" + stages[0], *stages[1:-1], stages[-1] + "L"]) if len(stages) > 1 else f"E{stages[0]}L"


def _pipeline_args(m: ModelSpec, layout: LayoutSpec, split: list[int] | None) -> list[str]:
    ranks = _rank_layers(layout, split)
    if layout.pp == 1:
        return []
    if ranks is not None and (len(set(ranks)) > 1 or len(set(split or [])) > 1):
        if _first_last(layout, ranks):
            return ["--decoder-first-pipeline-num-layers", str(ranks[0]),
                    "--decoder-last-pipeline-num-layers", str(ranks[-1])]
        return ["--pipeline-model-parallel-layout", layout_string(list(split or []), m.mtp_layers)]
    if layout.vpp > 1:
        return ["--num-layers-per-virtual-pipeline-stage", str(m.layers // (layout.pp * layout.vpp))]
    return []


def _zero_args(zero_stage: int) -> list[str]:
    """ZeRO-1 is Megatron's distributed optimizer; 2 and 3 are Megatron-FSDP strategies."""
    if zero_stage == 0:
        return []
    if zero_stage == 1:
        return ["--use-distributed-optimizer"]
    strategy = "optim_grads" if zero_stage == 2 else "optim_grads_params"
    # Megatron-FSDP "How to use" (Megatron-LM docs): these flags plus its checkpoint format.
    return ["--use-distributed-optimizer", "--use-megatron-fsdp",
            "--data-parallel-sharding-strategy", strategy, "--no-gradient-accumulation-fusion",
            "--ckpt-format", "fsdp_dtensor"]


def _recompute_args(recompute: str) -> list[str]:
    if recompute == "selective":
        return ["--recompute-granularity", "selective"]
    if recompute == "full":
        return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"]
    return []


def vocab_divisor(vocab: int, tp: int) -> int:
    """The largest make-vocab-size-divisible-by <= 128 whose padding (to a multiple of it x TP)
    leaves the model's vocabulary unchanged; 128 when no such value exists (then padded)."""
    if vocab % tp:
        return VOCAB_DIVISOR_DEFAULT
    return math.gcd(vocab // tp, VOCAB_DIVISOR_DEFAULT)


def _model_args(m: ModelSpec, t: TrainingSpec, tp: int, values: ModelValues) -> list[str]:
    args = ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden),
            "--ffn-hidden-size", str(m.ffn_hidden), "--num-attention-heads", str(m.heads),
            "--kv-channels", str(m.head_dim), "--seq-length", str(t.seq_len),
            "--max-position-embeddings", str(m.max_positions or t.seq_len),
            "--vocab-size", str(m.vocab), "--make-vocab-size-divisible-by", str(vocab_divisor(m.vocab, tp))]
    if m.kv_heads != m.heads:
        args += ["--group-query-attention", "--num-query-groups", str(m.kv_heads)]
    if m.ffn_gated:
        args.append("--swiglu")
    if not m.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not m.bias:  # with biases on (the default) Megatron also adds the QKV bias
        args.append("--disable-bias-linear")
        # TransformerConfig.add_qkv_bias "Add a bias term only for QKV projections" (Qwen2).
        if m.qkv_bias:
            args.append("--add-qkv-bias")
    if m.qk_norm == "head":  # per-head Q/K norms (attention.py L1712-1745; "full" is refused up front)
        args.append("--qk-layernorm")
    if m.position_embedding == "rope":
        args += ["--position-embedding-type", "rope", "--rotary-base", str(int(values.rope_base))]
        args += rope_variant_args(m)  # QK L2 norm, NoPE layers, RoPE scaling (megatron_moe.py)
    else:
        args += ["--position-embedding-type", "learned_absolute"]
    args += ["--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm",
             "--norm-epsilon", repr(values.norm_eps),
             "--attention-dropout", repr(m.dropout), "--hidden-dropout", repr(m.dropout)]
    return args


def megatron_args(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec,
                  split: list[int] | None = None) -> list[str]:
    """pretrain_gpt.py arguments for the layout (tokenizer, data and LR are left to the user).

    `split` is the layers per pipeline stage (or per chunk) when the search chose an uneven
    split. Raises: SpecError naming the Megatron-LM rule the layout breaks.
    """
    # capabilities: export_layout
    refuse("megatron-core", megatron_rules(m, t, layout, split) + moe_rules(m, t, layout))
    batch = batch_plan(t, layout.dp, layout.micro_batch)
    args = ["--tensor-model-parallel-size", str(layout.tp),
            "--pipeline-model-parallel-size", str(layout.pp),
            "--context-parallel-size", str(layout.cp)]
    args += _pipeline_args(m, layout, split)
    if layout.rank_order == "tp-cp-pp-dp":  # parallel_state order 'tp-cp-ep-pp-dp'
        args.append("--use-tp-pp-dp-mapping")
    if layout.sequence_parallel:
        args.append("--sequence-parallel")
    args += _zero_args(layout.zero_stage)
    if layout.dp * layout.cp > 1:  # the cost model hides DP traffic under compute (dp_exposed_s)
        args.append("--overlap-grad-reduce")
        if layout.zero_stage >= 1:  # arguments.py: needs the distributed optimizer or FSDP
            args.append("--overlap-param-gather")
    args += ["--micro-batch-size", str(layout.micro_batch),
             "--global-batch-size", str(batch.sequences_per_step)]
    args += _recompute_args(layout.recompute) + recompute_module_args(m, t, layout)
    args += ["--attention-backend", "unfused" if t.attention_kernel == "unfused" else "flash"]
    args += _model_args(m, t, layout.tp, model_values(m))
    args += moe_args(m, t, layout) + mla_args(m) + mtp_args(m)  # experts, MLA, MTP (megatron_moe.py)
    args += megatron_precision_args(t, layout.zero_stage)  # --bf16 and stated state dtypes
    return args + fp8_args(t.compute_precision)


# training.compute_precision -> Megatron --fp8-recipe (NVIDIA/Megatron-LM d98e8a64,
# megatron/core/transformer/transformer_config.py L594-600) and the --fp8-format each recipe's
# Transformer Engine class defaults to (NVIDIA/TransformerEngine d0067d0, common/recipe/
# __init__.py: DelayedScaling L254 and Float8CurrentScaling L303 HYBRID, i.e. E4M3 forward /
# E5M2 gradients; MXFP8BlockScaling L369 and Float8BlockScaling L431 E4M3).
FP8_RECIPE_ARGS = {"fp8-delayed": ("hybrid", "delayed"), "fp8-current": ("hybrid", "tensorwise"),
                   "fp8-blockwise": ("e4m3", "blockwise"), "mxfp8": ("e4m3", "mxfp8")}


def fp8_args(precision: str) -> list[str]:
    """--fp8-format / --fp8-recipe for an FP8 compute recipe (none for BF16)."""
    if precision not in FP8_RECIPE_ARGS:
        return []
    fmt, recipe = FP8_RECIPE_ARGS[precision]
    return ["--fp8-format", fmt, "--fp8-recipe", recipe]


def megatron_env(layout: LayoutSpec) -> dict[str, str]:
    """Environment Megatron-LM checks: TP/CP overlap wants CUDA_DEVICE_MAX_CONNECTIONS=1
    before Blackwell (arguments.py); Megatron-FSDP (ZeRO 2/3) asserts it is not 1."""
    if (layout.tp > 1 or layout.cp > 1) and layout.zero_stage < 2:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


def megatron_command(args: list[str], env: dict[str, str], torchrun: list[str]) -> str:
    """One shell line per node: env, torchrun (node rank and master address from the
    scheduler's environment), pretrain_gpt.py and the arguments."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    launch = ["torchrun", *torchrun, "--node-rank", "$NODE_RANK", "--master-addr", "$MASTER_ADDR",
              "--master-port", "${MASTER_PORT:-6000}", "pretrain_gpt.py"]
    line = " ".join(launch) + " " + shlex.join(args)
    return f"{prefix} {line}" if prefix else line


def megatron_export(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec, torchrun: list[str],
                    split: list[int] | None = None) -> dict:
    """The Megatron-LM launch block. Raises: SpecError when Megatron-LM cannot run the layout."""
    args, env = megatron_args(m, t, layout, split), megatron_env(layout)
    notes = [*model_values(m).notes, *moe_notes(m),
             f"add tokenizer, data, optimizer and checkpoint arguments; the tokenizer's vocabulary "
             f"must be {m.vocab} tokens (--vocab-size is what NullTokenizer uses)"]
    if m.vocab % (vocab_divisor(m.vocab, layout.tp) * layout.tp):
        notes.append(f"Megatron pads the vocabulary {m.vocab} to a multiple of "
                     f"{VOCAB_DIVISOR_DEFAULT * layout.tp}; the padded rows are not in the plan")
    return {"args": args, "env": env, "torchrun": torchrun,
            "command": megatron_command(args, env, torchrun), "notes": notes,
            "source": "NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553"}
