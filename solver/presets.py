"""Model and training presets (one JSON file each under solver/data/), read lazily.

`load_model` also accepts a Hugging Face config.json (see solver.hf_config).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.catalog import PresetFolder, expect_object, read_spec_arg
from topology.spec import parse_spec

DATA = Path(__file__).parent / "data"


_PRESETS = PresetFolder(DATA, {"models": "model", "training": "training"})
preset_names = _PRESETS.names


def _resolve(arg: Any, kind: str, field: str) -> dict[str, Any]:
    data = read_spec_arg(arg, field, _PRESETS, kind) if isinstance(arg, str) else arg
    return expect_object(data, field)


def load_model(arg: str | dict[str, Any] | ModelSpec) -> ModelSpec:
    """A model from a preset name, a JSON path or an object (native or HF config.json).

    Raises: SpecError.
    """
    if isinstance(arg, ModelSpec):
        return arg
    data = _resolve(arg, "models", "model")
    from solver.hf_config import is_hf_config, model_from_hf_config

    if is_hf_config(data):
        return model_from_hf_config(data)
    return parse_spec(ModelSpec, data, "model")


def load_training(arg: str | dict[str, Any] | TrainingSpec) -> TrainingSpec:
    """Training spec from a preset name, a JSON path or an object. Raises: SpecError."""
    if isinstance(arg, TrainingSpec):
        return arg
    data = _resolve(arg, "training", "training")
    return parse_spec(TrainingSpec, data, "training")


def priced_training(training: TrainingSpec, price_per_gpu_hour: float | None = None,
                    currency: str | None = None) -> TrainingSpec:
    """`training` with the price per GPU-hour and/or the ISO 4217 currency replaced (the CLI's
    --price-per-gpu-hour/--currency, the HTTP body's fields), validated as training fields.
    Raises: SpecError naming training.price_per_gpu_hour or training.currency."""
    update = {k: v for k, v in (("price_per_gpu_hour", price_per_gpu_hour), ("currency", currency))
              if v is not None}
    if not update:
        return training
    return parse_spec(TrainingSpec, {**training.model_dump(), **update}, "training")


def load_layout(arg: str | dict[str, Any] | LayoutSpec) -> LayoutSpec:
    """Layout from an inline object, a JSON path, or a JSON string. Raises: SpecError."""
    if isinstance(arg, LayoutSpec):
        return arg
    data = read_spec_arg(arg, "layout") if isinstance(arg, str) else arg
    return parse_spec(LayoutSpec, expect_object(data, "layout", presets=False), "layout")
