"""Strict stand-ins for the frameworks' own parsers, built from the option fixtures that
benchmarks/extract_framework_options.py extracted from each framework's source (repository,
path and commit recorded in tests/fixtures/frameworks/*.json)."""
from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"
_TYPES = {"int": int, "float": float, "str": str}


@cache
def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


class OptionError(ValueError):
    """An argument the framework's parser would reject."""


def parse_megatron(args: list[str]) -> dict[str, Any]:
    """argparse semantics over the fixture: exact names (allow_abbrev=False at the cited
    commit), store_true/store_false, typed values, choices, nargs '+'. Returns dest -> value."""
    options = fixture("megatron")["options"]
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        name = args[i]
        if name not in options:
            raise OptionError(f"unknown Megatron-LM option {name}")
        spec = options[name]
        if spec["action"] in ("store_true", "store_false"):
            out[spec["dest"]] = spec["action"] == "store_true"
            i += 1
            continue
        values: list[Any] = []
        i += 1
        while i < len(args) and not args[i].startswith("--") and (spec.get("nargs") == "+" or not values):
            values.append(_typed(name, spec, args[i]))
            i += 1
        if not values:
            raise OptionError(f"{name} expects a value")
        out[spec["dest"]] = values if spec.get("nargs") == "+" else values[0]
    return out


def _typed(name: str, spec: dict[str, Any], raw: str) -> Any:
    kind = _TYPES.get(spec.get("type", "str"), str)
    try:
        value = kind(raw)
    except ValueError as exc:
        raise OptionError(f"{name}: {raw!r} is not {spec.get('type')}") from exc
    if spec.get("choices") is not None and value not in spec["choices"]:
        raise OptionError(f"{name}: {value!r} not in {spec['choices']}")
    return value


def megatron_defaults() -> dict[str, Any]:
    """dest -> default for every option (the namespace before the command line is applied)."""
    out: dict[str, Any] = {}
    for spec in fixture("megatron")["options"].values():
        out.setdefault(spec["dest"], spec.get("default"))
    return out


def megatron_violations(args: list[str]) -> list[str]:
    """Megatron-LM's validate_args / TransformerConfig checks on pipeline, interleaving and
    optimizer options (megatron/training/arguments.py, megatron/core/transformer/
    transformer_config.py at the fixture's commit), re-implemented on the parsed namespace."""
    a = {**megatron_defaults(), **parse_megatron(args)}
    out: list[str] = []
    pp, layers = a["pipeline_model_parallel_size"], a["num_layers"]
    per_vstage, vstages = a["num_layers_per_virtual_pipeline_stage"], a["num_virtual_stages_per_pipeline_rank"]
    first, last = a["decoder_first_pipeline_num_layers"], a["decoder_last_pipeline_num_layers"]
    layout = a["pipeline_model_parallel_layout"]
    if (per_vstage is not None) + (vstages is not None) + (layout is not None) > 1:
        out.append("at most one of the virtual-pipeline options")
    vpp = None
    if layout is not None:
        out += _layout_string_violations(layout, layers, pp, a.get("mtp_num_layers") or 0)
        if first is not None or last is not None:
            out.append("a layout string defines the first and last stages itself")
        vpp, first, last = len(layout.split("|")) // pp, None, None
    elif per_vstage is not None:
        if first is not None or last is not None:
            out.append("uneven pipelines need --num-virtual-stages-per-pipeline-rank")
        elif layers % pp or (layers // pp) % per_vstage:
            out.append("layers per stage not divisible by layers per virtual stage")
        else:
            vpp = layers // pp // per_vstage
    elif vstages is not None:
        vpp = vstages
    elif first is None and last is None and layers % pp:
        out.append("layers not divisible by pipeline size")
    vpp = None if vpp == 1 else vpp
    if vpp is not None and not a["overlap_p2p_comm"] and pp <= 2:
        out.append("interleaving without p2p overlap needs pp > 2")
    if vpp is not None and pp == 1:
        out.append("interleaving needs pp > 1")
    if layout is None:  # with a layout string only validate_layer_layout runs (transformer_config.py L2242-2292)
        out += _uneven_violations(layers, pp, vpp, first, last)
    if a["overlap_param_gather"] and not (a["use_distributed_optimizer"] or a["use_megatron_fsdp"]):
        out.append("--overlap-param-gather needs the distributed optimizer or Megatron-FSDP")
    if a["overlap_param_gather"] and not a["overlap_grad_reduce"]:
        out.append("--overlap-param-gather needs --overlap-grad-reduce")
    cp = a["context_parallel_size"]
    if cp > 1 and a["seq_length"] % (2 * cp):
        out.append("seq-length must be a multiple of 2 x context-parallel-size")
    if a["num_attention_heads"] % a["tensor_model_parallel_size"]:
        out.append("heads not divisible by TP")
    return out + _moe_violations(a)


def _moe_violations(a: dict[str, Any]) -> list[str]:
    """Megatron-LM's MoE checks at the fixture's commit, re-implemented: arguments.py
    validate_args (num_experts % EP, EP needs experts), moe_freq_type / _eval_pattern (a
    pattern's length is num_layers), moe_layer.py (TP > 1 without SP raises in training),
    transformer_config.py (the A2A overlap needs EP > 1 and the alltoall/flex dispatcher)."""
    out: list[str] = []
    experts, ep = a["num_experts"], a["expert_model_parallel_size"]
    if ep > 1 and (experts is None or experts % ep):
        out.append("num_experts must be a multiple of expert_model_parallel_size")
    if experts is None:
        return out
    freq = a["moe_layer_freq"]
    if isinstance(freq, str) and "[" in freq:
        pattern = eval(freq, {"__builtins__": {}})  # Megatron's own _eval_pattern evaluates it too
        if len(pattern) != a["num_layers"] or set(pattern) - {0, 1}:
            out.append("moe_layer_freq pattern must give 0/1 for every layer")
    if a["tensor_model_parallel_size"] > 1 and not a["sequence_parallel"]:
        out.append("MoE with tensor parallelism needs sequence parallelism")
    if a["overlap_moe_expert_parallel_comm"] and (
            ep == 1 or a["moe_token_dispatcher_type"] not in ("alltoall", "flex")):
        out.append("A2A overlap needs EP > 1 and the alltoall/flex dispatcher")
    return out


def _layout_string_violations(text: str, layers: int, pp: int, mtp_layers: int = 0) -> list[str]:
    """PipelineParallelLayerLayout.parse_str_to_list and validate_layer_layout, re-implemented."""
    import re

    flat = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        flat = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), flat)
    stages = flat.split("|")
    out = []
    if len(stages) % pp:
        out.append("layout stages not divisible by pp")
    if set(flat) - set("ELtm|"):
        out.append("unknown layer character in the layout")
    joined = flat.replace("|", "")
    if not joined.startswith("E") or not joined.endswith("L") or joined.count("E") != 1 or joined.count("L") != 1:
        out.append("the layout must start with one E and end with one L")
    if joined.count("t") != layers:
        out.append("layout decoder layers != num_layers")
    if joined.count("m") != mtp_layers:  # validate_layer_layout L112-114
        out.append("layout mtp layers != mtp_num_layers")
    return out


def _uneven_violations(layers: int, pp: int, vpp: int | None, first: int | None, last: int | None) -> list[str]:
    if first is None and last is None:
        if vpp is not None and layers % (pp * vpp):
            return ["layers not divisible by pp x vpp"]
        return []
    out, rest, middle = [], layers, pp
    for n in (first, last):
        if n is not None:
            if n <= 0 or (vpp and n % vpp):
                out.append("first/last stage layers must be positive and divisible by vpp")
            rest, middle = rest - n, middle - 1
    if bool(rest) != bool(middle) or (middle and rest % middle):
        out.append("middle layers must split evenly over the middle stages")
    elif middle and vpp and (rest // middle) % vpp:
        out.append("middle stage layers must be divisible by vpp")
    return out


# ------------------------------------------------------------------ torchtitan
_PY_TYPES = {"int": (int,), "float": (float, int), "str": (str,), "bool": (bool,)}


def _value_ok(annotation: str, value: Any, choices: list[Any] | None) -> bool:
    """A literal value against a dataclass annotation (as written in the source)."""
    if choices is not None:
        return value in choices
    kinds = [k.strip() for k in annotation.split("|")]
    if value is None:
        return "None" in kinds
    for kind in kinds:
        if kind in _PY_TYPES and isinstance(value, _PY_TYPES[kind]) and \
                not (kind != "bool" and isinstance(value, bool)):
            return True
        if kind.startswith("list") and isinstance(value, list):
            return True
    return False


def _class_fields(name: str) -> dict[str, Any]:
    classes = fixture("torchtitan")["classes"]
    if name not in classes:
        raise OptionError(f"class {name} is not a torchtitan config class in the fixture")
    return classes[name]["fields"]


def _check_call(cls: str, params: dict[str, Any], call: Any, problems: list[str]) -> None:
    import ast

    given = {k.arg for k in call.keywords} | set(list(params)[:len(call.args)])  # positional: in order
    problems += [f"{cls}: unknown field {k}" for k in given - set(params)]
    problems += [f"{cls}: required {k} missing" for k, v in params.items()
                 if (v == "<required>" or (isinstance(v, dict) and v.get("default") == "<required>"))
                 and not k.startswith("_") and k not in given]
    for kw in call.keywords:
        spec = params.get(kw.arg)
        if not isinstance(spec, dict):
            continue
        try:
            value = ast.literal_eval(kw.value)
        except ValueError:
            continue
        if not _value_ok(spec["annotation"], value, spec.get("choices")):
            problems.append(f"{cls}.{kw.arg}: {value!r} does not fit {spec['annotation']}")


def torchtitan_module_problems(text: str) -> list[str]:
    """Every name the configuration module uses, checked against the torchtitan fixture:
    imports, config-class fields (names, required ones, literal types and choices), the
    layer builder's parameters and the attributes it assigns."""
    import ast

    fx = fixture("torchtitan")
    problems: list[str] = []
    tree = ast.parse(text)
    imported = {a.asname or a.name: n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                for a in n.names}
    by_module = fx.get("module_functions", {})
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in by_module.get(
                imported.get(ast.unparse(node.func)), {}):
            func = ast.unparse(node.func)  # the function of the module the name was imported from
            _check_call(func, by_module[imported[func]][func]["params"], node, problems)
            problems += _flavor_problems(func, imported[func] or "", node, fx)
        elif isinstance(node, ast.ImportFrom):
            names = fx["modules"].get(node.module, {}).get("names")
            if names is None:
                problems.append(f"module {node.module} is not in the fixture")
                continue
            problems += [f"{node.module} has no {a.name}" for a in node.names if a.name not in names]
        elif isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func in fx["classes"] or func in ("TrainingConfig", "ParallelismConfig"):
                _check_call(func, _class_fields(func), node, problems)
            elif func.endswith(".Config"):
                problems.append(f"{func} is not a torchtitan config class in the fixture")
            elif func in fx["functions"]:
                _check_call(func, fx["functions"][func]["params"], node, problems)
            elif func == "dataclasses.replace":  # replace(model_spec, field=...): ModelSpec fields
                fields = _class_fields("ModelSpec")
                problems += [f"ModelSpec has no {k.arg}" for k in node.keywords if k.arg not in fields]
        elif isinstance(node, ast.Assign):
            problems += _assignment_problems(ast.unparse(node.targets[0]))
    return problems


def _flavor_problems(func: str, module: str, call: Any, fx: dict[str, Any]) -> list[str]:
    """model_registry("<flavor>"): the flavor is a key of that module's registry table."""
    import ast

    flavors = fx.get("flavors", {}).get(module)
    if func != "model_registry" or flavors is None or not call.args:
        return []
    flavor = ast.literal_eval(call.args[0])
    return [] if flavor in flavors else [f"{module}.model_registry has no flavor {flavor!r}"]


def _assignment_problems(target: str) -> list[str]:
    """config.<Trainer.Config field>, block.<norm>.eps (TransformerBlock.Config norms),
    mtp.<norm>.eps (MTPTransformerBlock.Config norms) and block.moe.<MoE.Config field>."""
    parts = target.split(".")
    if parts[0] == "config" and len(parts) == 2:
        return [] if parts[1] in _class_fields("Trainer.Config") else [f"Trainer.Config has no {parts[1]}"]
    if parts[0] == "mtp" and len(parts) == 3:  # an MTP layer's own norms (MTPTransformerBlock.Config)
        ok = parts[1] in _class_fields("MTPTransformerBlock.Config") and parts[2] in _class_fields("RMSNorm.Config")
        return [] if ok else [f"no field {target}"]
    if parts[:2] == ["block", "moe"] and len(parts) == 3:
        return [] if parts[2] in _class_fields("MoE.Config") else [f"no field {target}"]
    if parts[0] == "block" and len(parts) == 3:
        ok = parts[1] in _class_fields("Llama3TransformerBlock.Config") and \
            parts[2] in _class_fields("RMSNorm.Config")
        return [] if ok else [f"no field {target}"]
    return [] if len(parts) == 1 else [f"unchecked assignment {target}"]


def torchtitan_violations(settings: dict[str, Any], layers: int, world: int, mtp_layers: int = 0) -> list[str]:
    """torchtitan's own checks on the parallelism and batch settings (parallel_dims.py,
    distributed/pipeline_parallel.py, trainer.py at the fixture's commit; with multi-token
    prediction, deepseek_v3/mtp.py MTPDecoder.Config.update_from_config: no PP, no CP)."""
    fx = fixture("torchtitan")
    defaults = {k: v["default"] for k, v in _class_fields("ParallelismConfig").items()}
    par = {**defaults, **settings["parallelism"]}
    out = []
    if mtp_layers and par["pipeline_parallel_degree"] > 1:
        out.append("MTP does not support pipeline parallelism yet")
    if mtp_layers and par["context_parallel_degree"] > 1:
        out.append("MTP does not support context parallelism yet")
    for section, cls in (("parallelism", "ParallelismConfig"), ("training", "TrainingConfig")):
        fields = _class_fields(cls)
        for key, value in settings[section].items():
            if key not in fields:
                out.append(f"{cls} has no field {key}")
            elif not _value_ok(fields[key]["annotation"], value, fields[key].get("choices")):
                out.append(f"{cls}.{key}: {value!r} does not fit {fields[key]['annotation']}")
    dims = [par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"],
            par["context_parallel_degree"], par["tensor_parallel_degree"], par["pipeline_parallel_degree"]]
    if dims[0] * dims[1] * dims[2] * dims[3] * dims[4] != world:
        out.append("dp_replicate x dp_shard x cp x tp x pp != WORLD_SIZE")
    if (dims[1] * dims[2] * dims[3]) % par["expert_parallel_degree"]:  # parallel_dims.py _validate
        out.append("expert_parallel_degree must divide dp_shard x cp x tp")
    pp = par["pipeline_parallel_degree"]
    if pp > 1:
        out += _stage_violations(par, layers, pp, fx["pipeline_schedules"])
    t = settings["training"]
    step = t["num_tokens_per_microbatch_per_dp_rank"] * (par["num_pp_microbatches"] if pp > 1 else 1) \
        * dims[0] * dims[1]
    if t["num_tokens_per_train_step"] % step:
        out.append("num_tokens_per_train_step not divisible by one accumulation step's tokens")
    return out


def _stage_violations(par: dict[str, Any], layers: int, pp: int, schedules: dict[str, list[str]]) -> list[str]:
    parts, schedule, out = par["module_fqns_per_model_part"], par["pipeline_parallel_schedule"], []
    if schedule not in schedules["single"] + schedules["multi"]:
        return [f"unknown schedule {schedule}"]
    if parts is None:
        return ["module_fqns_per_model_part not given"]
    per_rank, rest = divmod(len(parts), pp)
    if rest:
        out.append("stage count not divisible by pp")
    if schedule in schedules["single"] and per_rank != 1:
        out.append("single-stage schedule needs exactly one stage per rank")
    if schedule in schedules["multi"] and per_rank < 2:
        out.append("multi-stage schedule needs at least two stages per rank")
    flat = [name for part in parts for name in part]
    expected = ["tok_embeddings", *[f"layers.{i}" for i in range(layers)], "norm", "lm_head"]
    if flat != expected or any(not any(n.startswith("layers.") for n in p) for p in parts):
        out.append("stages do not hold every module once, in order, with a layer each")
    return out
