"""Model and training presets (one JSON file each under solver/data/), read lazily.

`load_model` also accepts a Hugging Face config.json (see solver.hf_config).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from solver.errors import Problem, SpecError
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.catalog import PresetFolder, read_json_arg
from topology.spec import parse_spec

DATA = Path(__file__).parent / "data"


_PRESETS = PresetFolder(DATA, {"models": "model", "training": "training"})
preset_names = _PRESETS.names


def _resolve(arg: Any, kind: str, field: str) -> Any:
    if isinstance(arg, str):
        if arg.endswith(".json") or "/" in arg:
            return read_json_arg(arg, field)
        return _PRESETS.load(kind, arg)
    return arg


def load_model(arg: str | dict[str, Any] | ModelSpec) -> ModelSpec:
    """A model from a preset name, a JSON path or an object (native or HF config.json).

    Raises: SpecError.
    """
    if isinstance(arg, ModelSpec):
        return arg
    data = _resolve(arg, "models", "model")
    if not isinstance(data, dict):
        raise SpecError("model: expected an object, a preset name or a path to a JSON file")
    from solver.hf_config import is_hf_config, model_from_hf_config

    if is_hf_config(data):
        return model_from_hf_config(data)
    return parse_spec(ModelSpec, data, "model")


def load_training(arg: str | dict[str, Any] | TrainingSpec) -> TrainingSpec:
    """Training spec from a preset name, a JSON path or an object. Raises: SpecError."""
    if isinstance(arg, TrainingSpec):
        return arg
    data = _resolve(arg, "training", "training")
    if not isinstance(data, dict):
        raise SpecError("training: expected an object, a preset name or a path to a JSON file")
    return parse_spec(TrainingSpec, data, "training")


def _inline_json(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        reason = f"inline JSON does not parse ({exc.msg} at column {exc.colno})"
        raise SpecError(f"{field}: {reason}", [Problem(field, reason)]) from None


def load_layout(arg: str | dict[str, Any] | LayoutSpec) -> LayoutSpec:
    """Layout from an inline object, a JSON path, or a JSON string. Raises: SpecError."""
    if isinstance(arg, LayoutSpec):
        return arg
    if isinstance(arg, str):
        arg = _inline_json(arg, "layout") if arg.lstrip().startswith("{") else read_json_arg(arg, "layout")
    return parse_spec(LayoutSpec, arg, "layout")
