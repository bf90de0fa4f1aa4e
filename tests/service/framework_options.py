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
        values = []
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
    if per_vstage is not None and vstages is not None:
        out.append("at most one of the virtual-pipeline options")
    vpp = None
    if per_vstage is not None:
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
