"""torchtitan export: a configuration module (a Python function returning Trainer.Config),
selected with `-m torchtitan.train --module M --config F`.

torchtitan replaced its TOML job files with Python configurations in 2026: a run is "a
function that returns a complete Trainer.Config", selected by --module/--config; the
`--section.option` flags are frozen and will be deleted (torchtitan/config/README.md at
pytorch/torchtitan commit b5bcd76c, 2026-08-21). The module written here follows that
commit's torchtitan/models/llama3/config_registry.py (llama3_70b) and
torchtitan/models/llama3/__init__.py (_70b): the Llama 3 model built by _build_llama3_layers
with the spec's sizes, RoPE base and norm epsilon. Every class field, function parameter and
imported name it uses is in tests/fixtures/frameworks/torchtitan.json (extracted by
benchmarks/extract_framework_options.py). Rules it obeys (same commit):
- pipeline stages: module_fqns_per_model_part lists each stage's modules explicitly (the first
  stage holds tok_embeddings, the last norm and lm_head; stage s runs on rank s mod pp), so no
  layers_per_stage rounding applies and a MoE first/last split (solver.search.moe_split) is
  written chunk by chunk (configs.py L187-195; distributed/pipeline_parallel.py: the list is
  used as given, L88-92; the stage count must divide by pp; single-stage schedules need one
  stage per rank, multi-stage ones at least two); tied embeddings run at pp 1 only
  (models/common/decoder.py L168-171, solver.frameworks.models);
- batch: num_tokens_per_train_step must divide by the tokens of one accumulation step
  (trainer.py), which is microbatch tokens x num_pp_microbatches x DP;
- the Llama 3 builder has no biases, no LayerNorm, no learned positions and derives
  head_dim = dim / n_heads; other models are refused up front, naming the rule
  (solver.frameworks.models);
- a mixture-of-experts model is written with torchtitan's Qwen3 or DeepSeek-V3 modules
  (service.launchers.torchtitan_moe) and ParallelismConfig.expert_parallel_degree.
"""
from __future__ import annotations

import re
from typing import Any

from service.launchers.common import model_values
from service.launchers.torchtitan_moe import (
    llama_rope_scaling, moe_fp8_converters, moe_imports, moe_model_code, moe_notes, mtp_loss_code, registry_call,
)
from solver.cost.accounting import batch_plan
from solver.frameworks.models import layout_model_rules
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec

SOURCE = "pytorch/torchtitan b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
CONFIG_FN = "trainplan_config"
# ZeRO stage -> fsdp_reshard_after_forward (configs.py ParallelismConfig; distributed/fsdp.py):
# 'default' reshards the blocks and the embedding after forward without PP (ZeRO-3;
# get_fsdp_reshard_after_forward_policy L112-137) and keeps the [norm, lm_head] unit gathered
# to its backward (apply_fsdp_to_decoder L258-265: reshard only under 'always'), which is what
# the ZeRO-3 recipe charges (head_unit_unsharded); 'never' keeps the gathered weights to
# backward (ZeRO-2 memory); with PP the stage keeps gradients unsharded (ZeRO-1 memory) either
# way. ZeRO-3 under PP (not a torchtitan recipe: the estimate flags it) is written 'always',
# since 'default' there means no resharding.
RESHARD = {1: "default", 2: "never", 3: "default"}


def reshard_policy(zero_stage: int, pp: int) -> str:
    """fsdp_reshard_after_forward for a ZeRO stage (RESHARD; 'always' for ZeRO-3 under PP)."""
    return "always" if zero_stage == 3 and pp > 1 else RESHARD[zero_stage]


def torchtitan_rules(m: ModelSpec, layout: LayoutSpec) -> list[tuple[str, str]]:
    """What torchtitan cannot run for this model and layout, as (field, rule): its pipeline's
    stage list, and the degrees a model part limits (multi-token prediction at pp 1 and cp 1:
    solver.frameworks.models.layout_model_rules, the search's rule too); the model rules are
    solver.frameworks.models' (applied by the search up front too)."""
    out = layout_model_rules("torchtitan", m, layout.pp, layout.cp)
    if layout.pipeline_layers and len(layout.pipeline_layers) != layout.pp * layout.vpp and layout.vpp > 1:
        out.append(("layout.pipeline_layers", "torchtitan takes the modules of every stage "
                    "(module_fqns_per_model_part): give pp x vpp values"))
    return out


def stage_layers(m: ModelSpec, layout: LayoutSpec, split: list[int] | None) -> list[int]:
    """Layers of each of the pp x vpp stages: the given split, or an even one (earlier
    stages get the remainder)."""
    stages = layout.pp * layout.vpp
    if split and len(split) == stages:
        return list(split)
    base, extra = divmod(m.layers, stages)
    return [base + (1 if s < extra else 0) for s in range(stages)]


def module_fqns(m: ModelSpec, layout: LayoutSpec, split: list[int] | None) -> list[list[str]]:
    """module_fqns_per_model_part: each stage's module names, stage s on rank s mod pp."""
    parts, first = [], 0
    for n in stage_layers(m, layout, split):
        parts.append([f"layers.{i}" for i in range(first, first + n)])
        first += n
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "lm_head"]
    return parts


def torchtitan_settings(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec,
                        split: list[int] | None = None) -> dict[str, dict[str, Any]]:
    """The TrainingConfig and ParallelismConfig fields the module sets, and the AC policy."""
    batch = batch_plan(t, layout.dp, layout.micro_batch)
    micro_tokens = layout.micro_batch * t.seq_len
    par: dict[str, Any] = {
        "data_parallel_replicate_degree": layout.dp if layout.zero_stage == 0 else 1,
        "data_parallel_shard_degree": 1 if layout.zero_stage == 0 else layout.dp,
        "tensor_parallel_degree": layout.tp,
        "enable_sequence_parallel": layout.sequence_parallel,
        "context_parallel_degree": layout.cp,
        "pipeline_parallel_degree": layout.pp,
    }
    if m.moe is not None:  # configs.py ParallelismConfig.expert_parallel_degree (no expert-TP degree)
        par["expert_parallel_degree"] = layout.ep
    if layout.zero_stage:
        par["fsdp_reshard_after_forward"] = reshard_policy(layout.zero_stage, layout.pp)
    if layout.pp > 1:  # every micro-batch of the step in one pipeline round
        par["pipeline_parallel_schedule"] = "Interleaved1F1B" if layout.vpp > 1 else "1F1B"
        par["num_pp_microbatches"] = batch.grad_accum
        par["module_fqns_per_model_part"] = module_fqns(m, layout, split)
    training = {"num_tokens_per_microbatch_per_dp_rank": micro_tokens,
                "num_tokens_per_train_step": micro_tokens * batch.grad_accum * layout.dp,
                "max_context_length": t.seq_len,
                "mixed_precision_param": "bfloat16",  # the BF16 recipe charged (solver.frameworks.precision)
                # FSDP2 reduces in FP32: the reduce-scatter copy memory.dp_buffer_bytes charges
                # (profile memory.reduce_scatter_copy_bytes, torchtitan configs.py L102)
                "mixed_precision_reduce": "float32"}
    ac = {"none": None, "selective": "SelectiveAC", "full": "FullAC"}[layout.recompute]
    return {"training": training, "parallelism": par, "activation_checkpoint": {"policy": ac}}


def _kwargs(values: dict[str, Any], indent: str) -> str:
    return "".join(f"{indent}{k}={v!r},\n" for k, v in values.items())


def _model_code(m: ModelSpec, t: TrainingSpec) -> str:
    values = model_values(m)
    embed_init = "_EMBEDDING_SKIP_INIT" if m.tied_embeddings else "_EMBEDDING_INIT"
    return f'''def _model() -> Llama3Model.Config:
    """{m.name}: {m.layers} layers, width {m.hidden}, FFN {m.ffn_hidden}, {m.heads} heads, {m.kv_heads} KV heads."""
    layers = _build_llama3_layers(
        n_layers={m.layers},
        dim={m.hidden},
        n_heads={m.heads},
        n_kv_heads={m.kv_heads},
        hidden_dim={m.ffn_hidden},
        fuse_qkv=True,
        rope=ComplexRoPE.Config(
            dim={m.head_dim},
            max_context_length={m.max_positions or t.seq_len},
            theta={values.rope_base!r},
            {llama_rope_scaling(m)}
        ),
        attn_backend="flex",
    )
    for block in layers:
        block.attention_norm.eps = {values.norm_eps!r}
        block.ffn_norm.eps = {values.norm_eps!r}
    return Llama3Model.Config(
        dim={m.hidden},
        vocab_size={m.vocab},
        enable_weight_tying={m.tied_embeddings!r},
        tok_embeddings=Embedding.Config(
            num_embeddings={m.vocab}, embedding_dim={m.hidden}, param_init={embed_init},
        ),
        norm=RMSNorm.Config(normalized_shape={m.hidden}, eps={values.norm_eps!r}, param_init=_NORM_INIT),
        lm_head=Linear.Config(
            in_features={m.hidden}, out_features={m.vocab}, param_init=_output_linear_init({m.hidden}),
        ),
        layers=layers,
    )
'''


BASE_IMPORTS = '''import dataclasses

from torchtitan.components.loss import CrossEntropyLoss
from torchtitan.config import ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.models.llama3.config_registry import llama3_8b
from torchtitan.trainer import Trainer
'''
LLAMA3_IMPORTS = '''from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.llama3 import (
    _EMBEDDING_INIT,
    _EMBEDDING_SKIP_INIT,
    _NORM_INIT,
    _build_llama3_layers,
    _output_linear_init,
    model_registry,
)
from torchtitan.models.llama3.model import Llama3Model
'''


# FP8 recipe -> torchtitan's linear converter at b5bcd76c (components/quantization/float8.py:
# Float8LinearConverter recipe_name "rowwise"; mx.py: MXFP8LinearConverter with an include list
# of module FQNs). The LM head stays BF16 in both, as solver.cost.fp8 charges ("output" filtered,
# float8.md). Per-tensor "fp8-current" (tensorwise) was removed before this commit: refused up
# front (solver.frameworks.models).
FP8_CONVERTERS = {
    "fp8-rowwise": ("Float8LinearConverter", 'Float8LinearConverter.Config(recipe_name="rowwise", '
                                             'filter_fqns=["lm_head"])'),
    "mxfp8": ("MXFP8LinearConverter", 'MXFP8LinearConverter.Config(fqns=["layers"])'),
}


def fp8_code(m: ModelSpec, t: TrainingSpec) -> tuple[str, str]:
    """(imports, the _converted() function) applying the FP8 recipe's converters to the model
    config the way model_registry does (validate_converter_order, then build().convert());
    a MoE model gets its own linear filter and the grouped-experts converter
    (torchtitan_moe.moe_fp8_converters); empty strings for BF16."""
    if t.compute_precision not in FP8_CONVERTERS:
        return "", ""
    converters = [FP8_CONVERTERS[t.compute_precision]] if m.moe is None else moe_fp8_converters(t.compute_precision)
    names = ", ".join(cls for cls, _ in converters)
    configs = ",\n        ".join(config for _, config in converters)
    imports = (f"from torchtitan.components.quantization import {names}\n"
               "from torchtitan.models.utils import validate_converter_order\n")
    return imports, f'''

def _converted(model):
    """{t.compute_precision}: torchtitan's converters, applied as model_registry applies converters."""
    converters = [
        {configs},
    ]
    validate_converter_order(converters)
    for converter in converters:
        model = converter.build().convert(model)
    return model
'''


def loss_code(m: ModelSpec) -> str:
    """The Trainer.Config loss: CrossEntropyLoss over the whole logits, or with multi-token
    prediction DeepSeek-V3's MTPLoss (torchtitan_moe.mtp_loss_code).

    Not llama3_8b's ChunkedLossWrapper (components/loss.py L501-540 at b5bcd76c: lm_head, loss
    and backward per 1/8 of the tokens, so the full logits never exist): the memory model
    charges the unchunked loss the torchtitan profile's logit_bytes cites (cross_entropy_loss on
    the FP32 upcast, 12 bytes per logit; 16 under TP), which the measured torchtitan runs used,
    so the export writes that loss and runs at the predicted memory (the notes say how to chunk).
    MTPDecoder refuses the chunked loss anyway (deepseek_v3/mtp.py L268-272)."""
    if m.mtp_layers:
        return mtp_loss_code()
    return "CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec))"


def module_name(m: ModelSpec) -> str:
    """A Python module name for the model's configuration file."""
    return "trainplan_" + (re.sub(r"\W+", "_", m.name.lower()).strip("_") or "model")


def torchtitan_module(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec,
                      split: list[int] | None = None) -> str:
    """The configuration module's text (save as <module_name>.py on PYTHONPATH)."""
    s = torchtitan_settings(m, t, layout, split)
    policy = s["activation_checkpoint"]["policy"]
    ac = "None" if policy is None else f"{policy}.Config()"
    head = (f'"""torchtitan configuration written by trainplan ({SOURCE}).\n\n'
            f"Layout: TP {layout.tp}, PP {layout.pp} x VPP {layout.vpp}, CP {layout.cp}, DP {layout.dp}, "
            f"ZeRO-{layout.zero_stage}, micro-batch {layout.micro_batch}, recompute {layout.recompute}.\n"
            f"Run: torchrun ... -m torchtitan.train --module {module_name(m)} --config {CONFIG_FN}\n"
            '"""\n')
    if m.moe is None:
        imports, model_code, registry = LLAMA3_IMPORTS, _model_code(m, t), 'model_registry("8B")'
    else:
        imports, model_code, registry = moe_imports(m), moe_model_code(m, t), registry_call(m)
    fp8_imports, converted = fp8_code(m, t)
    model = "_converted(_model())" if converted else "_model()"
    return (head + BASE_IMPORTS + imports + fp8_imports + "\n\n" + model_code + converted + f'''

def {CONFIG_FN}() -> Trainer.Config:
    """llama3_8b's data, optimizer, checkpoint and metrics (edit for your run) with this model and layout."""
    config = llama3_8b()
    config.model_spec = dataclasses.replace({registry}, flavor="trainplan", model={model})
    config.loss = {loss_code(m)}
    config.training = TrainingConfig(
{_kwargs(s["training"], " " * 8)}    )
    config.parallelism = ParallelismConfig(
{_kwargs(s["parallelism"], " " * 8)}    )
    config.activation_checkpoint = {ac}
    return config
''')


def torchtitan_launch(m: ModelSpec, torchrun: list[str], world: int) -> dict[str, str]:
    """The torchrun line per node, and the CPU dry run torchtitan offers (run_train.sh with
    COMM_MODE=fake_backend: configuration validation without GPUs)."""
    select = f"-m torchtitan.train --module {module_name(m)} --config {CONFIG_FN}"
    return {"command": " ".join(["torchrun", *torchrun, "--node-rank", "$NODE_RANK", "--master-addr",
                                 "$MASTER_ADDR", "--master-port", "${MASTER_PORT:-29500}", select]),
            "dry_run": f"NGPU={world} LOCAL_RANK=0 python3 {select} --comm.mode=fake_backend --training.steps 1"}


def torchtitan_export(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec, torchrun: list[str],
                      split: list[int] | None = None) -> dict[str, Any]:
    """The torchtitan launch block (rules checked by the caller)."""
    notes = [*model_values(m).notes, *(moe_notes(m) if m.moe is not None else []),
             f"save `module` as {module_name(m)}.py on PYTHONPATH; data, tokenizer (hf_assets_path) "
             "and optimizer come from llama3_8b(): edit them for your run",
             "the module imports private builders of torchtitan.models.llama3 (_build_llama3_layers, "
             "param inits) as its own _70b does; they may move in later torchtitan releases"]
    if t.compute_precision in FP8_CONVERTERS:
        notes.append("torchtitan's FP8 converters need torchao and SM89+ (MXFP8: SM100), and reach their speed "
                     "under torch.compile (components/quantization/float8.md): enable config.compile for the "
                     "model")
    if not m.mtp_layers:
        notes.append("the loss is CrossEntropyLoss over the whole logits, as the memory estimate charges them "
                     "(12 bytes per logit, 16 under TP); torchtitan's ChunkedLossWrapper (llama3_8b's default) "
                     "would hold about 1/8 of that: swap it in for headroom, not for a larger layout")
    if layout.zero_stage == 1:
        notes.append("ZeRO-1 is FSDP2 under pipelining: each stage keeps gradients unsharded "
                     "through the step and reduce-scatters once (torch pipelining stage.py)")
    return {"settings": torchtitan_settings(m, t, layout, split),
            "module": torchtitan_module(m, t, layout, split), "module_name": module_name(m),
            "config_fn": CONFIG_FN, **torchtitan_launch(m, torchrun, layout.gpus), "notes": notes,
            "source": SOURCE}
