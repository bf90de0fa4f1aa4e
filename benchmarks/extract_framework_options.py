"""Extract each framework's own option names, defaults and choices from its source.

Run against fetched git directories (no work tree needed; files are read with `git show`):

    python -m benchmarks.extract_framework_options \
        --megatron /path/NVIDIA+Megatron-LM/repo --torchtitan /path/pytorch+torchtitan/repo \
        --deepspeed /path/deepspeedai+DeepSpeed/repo --out tests/fixtures/frameworks

It writes one JSON fixture per framework (repository, commit and paths recorded inside) and
prints a JSON summary. Nothing is imported from the frameworks (they need torch and GPUs):
the sources are parsed with `ast`, and where the framework builds options from dataclasses
(Megatron-LM's ArgumentGroupFactory, megatron/training/argument_utils.py) its naming rules
are re-applied: `--` + field name with '-' for '_'; a bool defaulting to False is
`store_true`, any other bool default gives `--no-NAME` / `--disable-NAME` (`store_false`);
Literal -> choices; Enum -> member names as choices; list[X] / List[X] -> nargs '+'; a field's
metadata["argparse_meta"] overrides the inferred values.
"""
from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path
from typing import Any

from benchmarks.framework_source import (
    Repo, add_argument_calls, class_in, dataclass_fields, function_params, keyword_arg, literal, locate,
    method_params, module_names, strip_optional,
)


# ------------------------------------------------------------------ Megatron-LM
MEGATRON_ARGS = "megatron/training/arguments.py"


def _factories(repo: Repo) -> list[tuple[str, list[str]]]:
    """(dataclass name, excluded fields) of each ArgumentGroupFactory in arguments.py."""
    out = []
    for fn in (n for n in repo.tree(MEGATRON_ARGS).body if isinstance(n, ast.FunctionDef)):
        local_lists = {t.id: n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                       for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.List)}
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            if ast.unparse(call.func) != "ArgumentGroupFactory":
                continue
            excl = keyword_arg(call, "exclude")
            if isinstance(excl, ast.Name):
                excl = local_lists.get(excl.id)
            out.append((ast.unparse(call.args[0]), ast.literal_eval(excl) if excl is not None else []))
    return out


def _enum_members(repo: Repo, name: str) -> list[str] | None:
    if not name.isidentifier() or not name[:1].isupper():
        return None
    path = locate(repo, name, "megatron")
    if path is None:
        return None
    cls = class_in(repo.tree(path), name)
    if cls is None:
        return None
    bases = [ast.unparse(b) for b in cls.bases]
    if not any("Enum" in b for b in bases):
        return None
    return [t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]


def _factory_option(repo: Repo, name: str, f: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """ArgumentGroupFactory._build_argparse_kwargs_from_field, re-applied to one field."""
    ann = strip_optional(ast.parse(f["annotation"], mode="eval").body)
    flag = "--" + name.replace("_", "-")
    settings: dict[str, Any] = {"dest": name, "action": "store", "default": f["default"], "path": f["path"]}
    kind = ast.unparse(ann)
    if kind == "bool":
        settings["action"] = "store_true" if f["default"] is False else "store_false"
        names = [flag] if settings["action"] == "store_true" else [
            "--no-" + name.replace("_", "-"), "--disable-" + name.replace("_", "-")]
    else:
        names = [flag]
        # list[X] and typing's List[X] alike (argument_utils._extract_type: origin list)
        if isinstance(ann, ast.Subscript) and ast.unparse(ann.value) in ("list", "List", "typing.List"):
            settings["nargs"] = "+"
            kind = ast.unparse(ann.slice)
        if "choices" in f:
            settings["choices"] = f["choices"]
            kind = type(f["choices"][0]).__name__
        elif (members := _enum_members(repo, kind)) is not None:
            settings["choices"], kind = members, "str"
        settings["type"] = kind
    meta = f.get("argparse_meta") or {}
    if "arg_names" in meta and isinstance(meta["arg_names"], list):
        names = meta["arg_names"]
    settings.update({k: v for k, v in meta.items() if k != "arg_names"})
    return names, settings


def extract_megatron(repo: Repo) -> dict[str, Any]:
    options = add_argument_calls(repo, MEGATRON_ARGS)
    sources = {MEGATRON_ARGS}
    for cls_name, exclude in _factories(repo):
        path = repo.find_class(cls_name, "megatron")
        for name, f in dataclass_fields(repo, path, cls_name, "megatron").items():
            if name in exclude or f.get("init") is False:
                continue
            names, settings = _factory_option(repo, name, f)
            sources.add(f["path"])
            for n in names:
                options.setdefault(n, settings)
    return {"framework": "megatron-lm", "repository": "NVIDIA/Megatron-LM", "commit": repo.commit,
            "paths": sorted(sources), "entry_point": "pretrain_gpt.py",
            "allow_abbrev": _allow_abbrev(repo), "options": dict(sorted(options.items()))}


def _allow_abbrev(repo: Repo) -> bool:
    for node in ast.walk(repo.tree(MEGATRON_ARGS)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "argparse.ArgumentParser":
            value = keyword_arg(node, "allow_abbrev")
            return True if value is None else bool(literal(value))
    return True


# ------------------------------------------------------------------ torchtitan
TITAN_CLASSES = {
    "TrainingConfig": "torchtitan/config/configs.py",
    "ParallelismConfig": "torchtitan/config/configs.py",
    "CompileConfig": "torchtitan/config/configs.py",
    "Trainer.Config": "torchtitan/trainer.py",
    "ActivationCheckpointing.Config": "torchtitan/distributed/activation_checkpoint.py",
    "FullAC.Config": "torchtitan/distributed/activation_checkpoint.py",
    "SelectiveAC.Config": "torchtitan/distributed/activation_checkpoint.py",
    "Llama3Model.Config": "torchtitan/models/llama3/model.py",
    "RoPE.Config": "torchtitan/models/common/rope.py",
    "ComplexRoPE.Config": "torchtitan/models/common/rope.py",
    "RMSNorm.Config": "torchtitan/models/common/nn_modules.py",
    "Embedding.Config": "torchtitan/models/common/embedding.py",
    "Linear.Config": "torchtitan/models/common/linear.py",
    "Llama3TransformerBlock.Config": "torchtitan/models/llama3/model.py",
    "TransformerBlock.Config": "torchtitan/models/common/decoder.py",
    "ChunkedLossWrapper.Config": "torchtitan/components/loss.py",
    "ModelSpec": "torchtitan/protocols/model_spec.py",
    "CrossEntropyLoss.Config": "torchtitan/components/loss.py",
    # MoE models (service/launchers/torchtitan_moe.py): Qwen3's decoder over the common MoE
    # builders, and DeepSeek-V3's MLA + MoE decoder.
    "Qwen3Model.Config": "torchtitan/models/qwen3/model.py",
    "Qwen3TransformerBlock.Config": "torchtitan/models/qwen3/model.py",
    "DeepSeekV3Model.Config": "torchtitan/models/deepseek_v3/model.py",
    "CosSinRoPE.Config": "torchtitan/models/common/rope.py",
    "MoE.Config": "torchtitan/models/common/moe.py",
    # FP8 (service/launchers/torchtitan.py fp8_converters), MoE grouped experts included
    "Float8LinearConverter.Config": "torchtitan/components/quantization/float8.py",
    "MXFP8LinearConverter.Config": "torchtitan/components/quantization/mx.py",
    "Float8GroupedExpertsConverter.Config": "torchtitan/components/quantization/float8.py",
    "MXFP8GroupedExpertsConverter.Config": "torchtitan/components/quantization/mx.py",
    # DeepSeek-V3's multi-token prediction (service/launchers/torchtitan_moe.py)
    "MTPTransformerBlock.Config": "torchtitan/models/deepseek_v3/mtp.py",
    "MTPLoss.Config": "torchtitan/models/deepseek_v3/mtp.py",
}
TITAN_FUNCTIONS = {
    "_build_llama3_layers": "torchtitan/models/llama3/__init__.py",
    "model_registry": "torchtitan/models/llama3/__init__.py",
    "llama3_8b": "torchtitan/models/llama3/config_registry.py",
}
TITAN_MODULES = {
    "torchtitan.models.llama3": "torchtitan/models/llama3/__init__.py",
    "torchtitan.models.llama3.config_registry": "torchtitan/models/llama3/config_registry.py",
    "torchtitan.models.common": "torchtitan/models/common/__init__.py",
    "torchtitan.config": "torchtitan/config/__init__.py",
    "torchtitan.distributed.activation_checkpoint": "torchtitan/distributed/activation_checkpoint.py",
    "torchtitan.protocols.model_spec": "torchtitan/protocols/model_spec.py",
    "torchtitan.trainer": "torchtitan/trainer.py",
    "torchtitan.components.loss": "torchtitan/components/loss.py",
    "torchtitan.models.common.config_utils": "torchtitan/models/common/config_utils.py",
    "torchtitan.models.llama3.model": "torchtitan/models/llama3/model.py",
    "torchtitan.models.qwen3": "torchtitan/models/qwen3/__init__.py",
    "torchtitan.models.qwen3.model": "torchtitan/models/qwen3/model.py",
    "torchtitan.models.deepseek_v3": "torchtitan/models/deepseek_v3/__init__.py",
    "torchtitan.models.deepseek_v3.model": "torchtitan/models/deepseek_v3/model.py",
    "torchtitan.components.quantization": "torchtitan/components/quantization/__init__.py",
    "torchtitan.models.utils": "torchtitan/models/utils.py",
}
# Functions by the module they are imported from (names repeat across model modules, e.g.
# model_registry): module -> function -> its path; the exported module's calls are checked
# against the function of the module it imported the name from.
TITAN_MODULE_FUNCTIONS = {
    "torchtitan.models.common.config_utils": ("torchtitan/models/common/config_utils.py", [
        "get_attention_config", "make_gqa_config", "make_ffn_config", "make_moe_config", "make_router_config",
        "make_routed_experts_config", "decoder_vocab_size"]),
    "torchtitan.models.qwen3": ("torchtitan/models/qwen3/__init__.py", [
        "model_registry", "_residual_output_init", "_moe_experts_init"]),
    "torchtitan.models.deepseek_v3": ("torchtitan/models/deepseek_v3/__init__.py", [
        "model_registry", "build_mla_moe_layers", "_output_linear_init", "_depth_init", "_depth_experts_init",
        "_build_mtp_layers"]),
    "torchtitan.models.llama3": ("torchtitan/models/llama3/__init__.py", [
        "model_registry", "_build_llama3_layers", "_output_linear_init"]),
    "torchtitan.models.utils": ("torchtitan/models/utils.py", ["validate_converter_order"]),
}
# The flavor tables of model_registry (module -> the dict it indexes).
TITAN_FLAVORS = {"torchtitan.models.llama3": ("torchtitan/models/llama3/__init__.py", "llama3_configs"),
                 "torchtitan.models.qwen3": ("torchtitan/models/qwen3/__init__.py", "qwen3_configs"),
                 "torchtitan.models.deepseek_v3": ("torchtitan/models/deepseek_v3/__init__.py",
                                                   "deepseekv3_configs")}
# torch.distributed.pipelining schedules by kind (pytorch/pytorch
# torch/distributed/pipelining/schedules.py: ScheduleGPipe/Schedule1F1B subclass
# PipelineScheduleSingle; ScheduleInterleaved1F1B/ScheduleLoopedBFS/ScheduleInterleavedZeroBubble/
# ScheduleZBVZeroBubble subclass PipelineScheduleMulti); torchtitan's get_schedule_class looks
# the name up there (torchtitan/distributed/pipeline_parallel.py).
TORCH_SCHEDULES = {"single": ["GPipe", "1F1B"],
                   "multi": ["Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble"]}


def extract_torchtitan(repo: Repo) -> dict[str, Any]:
    classes: dict[str, dict[str, Any]] = {
        name: {"path": path, "fields": dataclass_fields(repo, path, name, "torchtitan")}
        for name, path in TITAN_CLASSES.items()}
    functions: dict[str, dict[str, Any]] = {name: {"path": path, "params": function_params(repo, path, name)}
                                            for name, path in TITAN_FUNCTIONS.items()}
    modules: dict[str, dict[str, Any]] = {mod: {"path": path, "names": module_names(repo, path)}
                                          for mod, path in TITAN_MODULES.items()}
    paths = sorted({c["path"] for c in classes.values()} | {f["path"] for f in functions.values()}
                   | {m["path"] for m in modules.values()})
    by_module = {mod: {name: {"path": path, "params": function_params(repo, path, name)} for name in names}
                 for mod, (path, names) in TITAN_MODULE_FUNCTIONS.items()}
    flavors = {mod: _flavors(repo, path, table) for mod, (path, table) in TITAN_FLAVORS.items()}
    paths = sorted(set(paths) | {path for path, _ in TITAN_MODULE_FUNCTIONS.values()})
    return {"framework": "torchtitan", "repository": "pytorch/torchtitan", "commit": repo.commit,
            "paths": paths, "entry_point": "torchtitan.train (--module M --config F)",
            "classes": classes, "functions": functions, "module_functions": by_module, "modules": modules,
            "llama3_flavors": flavors["torchtitan.models.llama3"], "flavors": flavors,
            "pipeline_schedules": TORCH_SCHEDULES}


def _flavors(repo: Repo, path: str, table: str) -> list[str]:
    for node in repo.tree(path).body:
        if (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == table
                and isinstance(node.value, ast.Dict)):
            return [ast.literal_eval(k) for k in node.value.keys if k is not None]
    return []


# ------------------------------------------------------------------ DeepSpeed
DS_CONSTANTS = "deepspeed/runtime/constants.py"
DS_CLASSES = {
    "zero_optimization": ("deepspeed/runtime/zero/config.py", "DeepSpeedZeroConfig"),
    "bf16": ("deepspeed/runtime/precision_config.py", "DeepSpeedBF16Config"),
    "fp16": ("deepspeed/runtime/precision_config.py", "DeepSpeedFP16Config"),
    "tensor_parallel": ("deepspeed/runtime/tensor_parallel/config.py", "TPTrainingConfig"),
}
DS_RUNNER = "deepspeed/launcher/runner.py"
DS_SCRIPT_ARGS = "deepspeed/__init__.py"  # add_config_arguments: --deepspeed, --deepspeed_config
DS_MOE = "deepspeed/moe/layer.py"  # the native MoE layer the model code builds (MoE.__init__)


def _constants(repo: Repo) -> dict[str, Any]:
    """NAME = 'key' string constants and NAME_DEFAULT values of constants.py."""
    values = {t.id: n.value for n in repo.tree(DS_CONSTANTS).body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name)}
    keys = {}
    for name, node in values.items():
        if name.endswith(("_DEFAULT", "_FORMAT")) or not isinstance(node, ast.Constant) \
                or not isinstance(node.value, str):
            continue
        default = values.get(name + "_DEFAULT")
        keys[node.value] = {"constant": name, "default": literal(default) if default is not None else None}
    return keys


def extract_deepspeed(repo: Repo) -> dict[str, Any]:
    sections = {}
    for key, (path, cls) in DS_CLASSES.items():
        fields = dataclass_fields(repo, path, cls, "deepspeed")
        sections[key] = {"path": path, "class": cls, "fields": fields}
    return {"framework": "deepspeed", "repository": "deepspeedai/DeepSpeed", "commit": repo.commit,
            "paths": sorted({DS_CONSTANTS, DS_RUNNER, DS_SCRIPT_ARGS, DS_MOE} | {p for p, _ in DS_CLASSES.values()}),
            "moe_layer": {"path": DS_MOE, "class": "MoE", "params": method_params(repo, DS_MOE, "MoE", "__init__")},
            "top_level_keys": _constants(repo), "sections": sections,
            "zero_stages": [0, 1, 2, 3], "launcher": add_argument_calls(repo, DS_RUNNER),
            "script_arguments": add_argument_calls(repo, DS_SCRIPT_ARGS)}


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--megatron")
    p.add_argument("--torchtitan")
    p.add_argument("--deepspeed")
    p.add_argument("--out", default="tests/fixtures/frameworks")
    args = p.parse_args(argv)
    jobs = {"megatron": extract_megatron, "torchtitan": extract_torchtitan, "deepspeed": extract_deepspeed}
    summary = {}
    for name, fn in jobs.items():
        git_dir = getattr(args, name)
        if not git_dir:
            continue
        data = {**fn(Repo(git_dir, name)), "extracted_by": "benchmarks/extract_framework_options.py"}
        out = Path(args.out) / f"{name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
        summary[name] = {"commit": data["commit"], "file": str(out), "bytes": out.stat().st_size}
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
