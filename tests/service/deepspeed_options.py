"""DeepSpeed's extracted options (tests/fixtures/frameworks/deepspeed.json, extracted from
deepspeedai/DeepSpeed by benchmarks/extract_framework_options.py): a config's keys, the MoE
layer's arguments and the launcher line checked against them. Megatron-LM and torchtitan:
tests/service/framework_options.py."""
from __future__ import annotations

from typing import Any

from tests.service.framework_options import OptionError, _typed, _value_ok, fixture


def deepspeed_config_problems(cfg: dict[str, Any]) -> list[str]:
    """Keys of a DeepSpeed config against the fixture: top-level keys (constants.py), each
    section's fields or aliases (pydantic models), values by annotation."""
    fx, out = fixture("deepspeed"), []
    for key, value in cfg.items():
        section = fx["sections"].get(key)
        if section is None:
            if key not in fx["top_level_keys"]:
                out.append(f"unknown DeepSpeed key {key}")
            elif not isinstance(value, int) or isinstance(value, bool):
                out.append(f"{key}: {value!r} is not an integer")
            continue
        fields = section["fields"]
        names = {f.get("alias") or n: f for n, f in fields.items()} | fields
        for sub, v in value.items():
            spec = names.get(sub)
            if spec is None:
                out.append(f"unknown DeepSpeed key {key}.{sub}")
            elif sub == "stage":
                out += [] if v in fx["zero_stages"] else [f"{key}.stage {v} not in {fx['zero_stages']}"]
            elif not _value_ok(spec["annotation"].replace("Optional[", "").rstrip("]"), v, None):
                out.append(f"{key}.{sub}: {v!r} does not fit {spec['annotation']}")
    return out


def deepspeed_moe_problems(moe: dict[str, Any]) -> list[str]:
    """The MoE layer arguments against deepspeed.moe.layer.MoE.__init__ (the fixture) and its
    own assert (num_experts % ep_size == 0); `expert` is the model code's module."""
    params, args = fixture("deepspeed")["moe_layer"]["params"], moe["arguments"]
    out = [f"MoE has no argument {k}" for k in args if k not in params]
    out += [f"MoE needs {k}" for k, v in params.items() if v == "<required>" and k not in args and k != "expert"]
    out += [f"MoE.{k}: {v!r} is not a {type(params[k]).__name__}" for k, v in args.items()
            if k in params and params[k] not in ("<required>", None) and type(v) is not type(params[k])]
    if args.get("num_experts", 1) % args.get("ep_size", 1):
        out.append("num_experts must be divisible by ep_size")
    return out


def parse_deepspeed_launcher(args: list[str]) -> dict[str, Any]:
    """`deepspeed` runner options (launcher/runner.py), the script, then the script's
    DeepSpeed options (deepspeed/__init__.py add_config_arguments)."""
    fx = fixture("deepspeed")
    if args[0] != "deepspeed":
        raise OptionError("not a deepspeed command")
    out: dict[str, Any] = {}
    i = 1
    table = fx["launcher"]
    while i < len(args):
        name = args[i]
        if not name.startswith("-"):
            if table is fx["script_arguments"]:
                raise OptionError(f"unexpected {name}")
            out["script"], table, i = name, fx["script_arguments"], i + 1
            continue
        if name not in table:
            raise OptionError(f"unknown DeepSpeed option {name}")
        spec = table[name]
        if spec["action"] in ("store_true", "store_false"):
            out[spec["dest"]], i = spec["action"] == "store_true", i + 1
        else:
            raw = args[i + 1]
            out[spec["dest"]] = raw if raw.startswith("$") else _typed(name, spec, raw)
            i += 2
    return out
