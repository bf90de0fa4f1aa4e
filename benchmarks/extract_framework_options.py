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
import subprocess
from pathlib import Path
from typing import Any

_MISSING = "<required>"


# ------------------------------------------------------------------ git and ast helpers
class Repo:
    """A fetched git directory read at HEAD."""

    def __init__(self, git_dir: str, name: str) -> None:
        self.git_dir, self.name = git_dir, name
        self.commit = self._git("rev-parse", "HEAD").strip()
        self._cache: dict[str, ast.Module] = {}

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "--git-dir", self.git_dir, *args], check=True,
                              capture_output=True, text=True).stdout

    def tree(self, path: str) -> ast.Module:
        if path not in self._cache:
            self._cache[path] = ast.parse(self._git("show", f"{self.commit}:{path}"))
        return self._cache[path]

    def find_class(self, name: str, under: str) -> str:
        """Path of the file under `under` that defines top-level class `name`."""
        found = subprocess.run(["git", "--git-dir", self.git_dir, "grep", "-l", "-E",
                                f"^class {name}\\b", self.commit, "--", under],
                               capture_output=True, text=True)  # exit 1: no match
        out = found.stdout if found.returncode in (0, 1) else found.check_returncode()
        paths = [line.split(":", 1)[1] for line in out.splitlines()]
        if not paths:
            raise LookupError(f"class {name} not found under {under}")
        return sorted(paths, key=len)[0]


def _literal(node: ast.AST | None) -> Any:
    """A JSON-able value for a default: the literal when it is one, else its source text."""
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return {"expr": ast.unparse(node)}
    if isinstance(value, (tuple, set)):
        return list(value)
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return {"expr": ast.unparse(node)}
    return value


def _class_in(module: ast.Module, dotted: str) -> ast.ClassDef | None:
    """Class `A` or nested `A.Config` in a module."""
    body: list[ast.stmt] = module.body
    found = None
    for part in dotted.split("."):
        found = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if found is None:
            return None
        body = found.body
    return found


def _strip_optional(ann: ast.AST) -> ast.AST:
    """X | None and Optional[X] -> X."""
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        sides = [s for s in (ann.left, ann.right) if not (isinstance(s, ast.Constant) and s.value is None)]
        if len(sides) == 1:
            return sides[0]
    if isinstance(ann, ast.Subscript) and ast.unparse(ann.value) in ("Optional", "typing.Optional"):
        return ann.slice
    return ann


def _literal_choices(ann: ast.AST) -> list[Any] | None:
    ann = _strip_optional(ann)
    if isinstance(ann, ast.Subscript) and ast.unparse(ann.value) in ("Literal", "typing.Literal"):
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        return [ast.literal_eval(e) for e in elts]
    return None


def _field_call(value: ast.AST | None) -> ast.Call | None:
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field", "Field"):
        return value
    return None


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def dataclass_fields(repo: Repo, path: str, dotted: str, under: str) -> dict[str, dict[str, Any]]:
    """Fields of a dataclass or pydantic model (bases first), each with its annotation,
    default (or '<required>'), choices (Literal) and the file that declares it."""
    cls = _class_in(repo.tree(path), dotted)
    if cls is None:
        raise LookupError(f"{dotted} not in {path}")
    out: dict[str, dict[str, Any]] = {}
    for base in cls.bases:
        base_name = ast.unparse(base)
        if base_name.split(".")[0] in ("object", "Enum", "ABC", "DeepSpeedConfigModel", "BaseModel"):
            continue
        base_path = path if _class_in(repo.tree(path), base_name) else _locate(repo, base_name, under)
        if base_path:
            out.update(dataclass_fields(repo, base_path, base_name, under))
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = _one_field(node, path)
    return out


def _locate(repo: Repo, dotted: str, under: str) -> str | None:
    try:
        return repo.find_class(dotted.split(".")[0], under)
    except LookupError:
        return None


def _one_field(node: ast.AnnAssign, path: str) -> dict[str, Any]:
    call = _field_call(node.value)
    entry: dict[str, Any] = {"annotation": ast.unparse(node.annotation), "path": path}
    if call is None:
        entry["default"] = _MISSING if node.value is None else _literal(node.value)
    else:
        default = _kw(call, "default") or (call.args[0] if call.args else None)
        factory = _kw(call, "default_factory")
        entry["default"] = (_literal(default) if default is not None else
                            {"factory": ast.unparse(factory)} if factory is not None else _MISSING)
        alias = _kw(call, "alias")
        if alias is not None:
            entry["alias"] = _literal(alias)
        init = _kw(call, "init")
        if init is not None and _literal(init) is False:
            entry["init"] = False
        meta = _kw(call, "metadata")
        if isinstance(meta, ast.Dict):
            for k, v in zip(meta.keys, meta.values):
                if k is not None and _literal(k) == "argparse_meta":
                    entry["argparse_meta"] = _argparse_meta(v)
    choices = _literal_choices(node.annotation)
    if choices is not None:
        entry["choices"] = choices
    return entry


def _argparse_meta(node: ast.AST) -> dict[str, Any]:
    if not isinstance(node, ast.Dict):
        return {"expr": ast.unparse(node)}
    return {_literal(k): (_literal(v) if _literal(k) != "type" else ast.unparse(v))
            for k, v in zip(node.keys, node.values) if k is not None}


def function_params(repo: Repo, path: str, name: str) -> dict[str, Any]:
    """Parameters of a top-level function: name -> default (or '<required>')."""
    fn = next(n for n in repo.tree(path).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return _params(fn)


def method_params(repo: Repo, path: str, cls: str, name: str) -> dict[str, Any]:
    """Parameters of a method of a top-level class, without self."""
    body = _class_in(repo.tree(path), cls).body
    fn = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    return {k: v for k, v in _params(fn).items() if k != "self"}


def _params(fn: ast.FunctionDef) -> dict[str, Any]:
    a = fn.args
    params: dict[str, Any] = {}
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, default in zip(positional, defaults):
        params[arg.arg] = _MISSING if default is None else _literal(default)
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params[arg.arg] = _MISSING if default is None else _literal(default)
    return params


def module_names(repo: Repo, path: str) -> list[str]:
    """Top-level names a module defines or imports (what `from module import X` can take)."""
    names: set[str] = set()
    for node in repo.tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return sorted(names)


# ------------------------------------------------------------------ argparse calls
def add_argument_calls(repo: Repo, path: str) -> dict[str, dict[str, Any]]:
    """Every literal `*.add_argument('--x', ...)` call in a file: option -> its settings."""
    out: dict[str, dict[str, Any]] = {}
    for node in ast.walk(repo.tree(path)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names or not names[0].startswith("-"):
            continue
        settings = {k.arg: (ast.unparse(k.value) if k.arg == "type" else _literal(k.value))
                    for k in node.keywords if k.arg in ("type", "default", "choices", "action", "dest", "nargs")}
        long_names = [n for n in names if n.startswith("--")]
        settings.setdefault("dest", (long_names or names)[0].lstrip("-").replace("-", "_"))
        settings.setdefault("action", "store")
        if settings["action"] in ("store_true", "store_false") and "default" not in settings:
            settings["default"] = settings["action"] == "store_false"
        settings["path"] = path
        for n in names:
            out[n] = settings
    return out


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
            excl = _kw(call, "exclude")
            if isinstance(excl, ast.Name):
                excl = local_lists.get(excl.id)
            out.append((ast.unparse(call.args[0]), ast.literal_eval(excl) if excl is not None else []))
    return out


def _enum_members(repo: Repo, name: str) -> list[str] | None:
    if not name.isidentifier() or not name[:1].isupper():
        return None
    path = _locate(repo, name, "megatron")
    if path is None:
        return None
    cls = _class_in(repo.tree(path), name)
    bases = [ast.unparse(b) for b in cls.bases]
    if not any("Enum" in b for b in bases):
        return None
    return [t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]


def _factory_option(repo: Repo, name: str, f: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """ArgumentGroupFactory._build_argparse_kwargs_from_field, re-applied to one field."""
    ann = _strip_optional(ast.parse(f["annotation"], mode="eval").body)
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
            value = _kw(node, "allow_abbrev")
            return True if value is None else bool(_literal(value))
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
    classes = {name: {"path": path, "fields": dataclass_fields(repo, path, name, "torchtitan")}
               for name, path in TITAN_CLASSES.items()}
    functions = {name: {"path": path, "params": function_params(repo, path, name)}
                 for name, path in TITAN_FUNCTIONS.items()}
    modules = {mod: {"path": path, "names": module_names(repo, path)} for mod, path in TITAN_MODULES.items()}
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
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == table:
            return [ast.literal_eval(k) for k in node.value.keys]
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
        keys[node.value] = {"constant": name, "default": _literal(default) if default is not None else None}
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
