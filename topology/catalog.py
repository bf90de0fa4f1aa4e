"""GPU and cluster presets: one JSON file each under topology/data/, read lazily on first use."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from topology.errors import Problem, SpecError, UnknownPresetError
from topology.spec import ClusterSpec, GpuSpec, parse_spec

DATA = Path(__file__).parent / "data"


def preset_names(kind: str) -> list[str]:
    """Names of the presets of one kind ('gpus' or 'clusters')."""
    return sorted(p.stem for p in (DATA / kind).glob("*.json"))


@lru_cache(maxsize=None)
def _raw(kind: str, name: str) -> dict[str, Any]:
    path = DATA / kind / f"{name}.json"
    if not path.is_file():
        reason = f"unknown preset '{name}' (known: {', '.join(preset_names(kind))})"
        raise UnknownPresetError(f"{kind[:-1]}: {reason}", [Problem(kind[:-1], reason)])
    return json.loads(path.read_text())


def preset_source(kind: str, name: str) -> str:
    """The citation stored with a preset (its '_source' key)."""
    return _raw(kind, name).get("_source", "")


def _strip(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def load_gpu(name: str) -> GpuSpec:
    """A GPU preset by name. Raises: UnknownPresetError."""
    return parse_spec(GpuSpec, _strip(_raw("gpus", name)), "gpu")


def read_json_arg(arg: str, field: str) -> Any:
    """Read a JSON file named on the command line. Raises: SpecError."""
    try:
        return json.loads(Path(arg).read_text())
    except OSError as exc:
        raise SpecError(f"{field}: cannot read '{arg}': {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{field}: '{arg}' is not valid JSON ({exc.msg} at line {exc.lineno})") from None


def cluster_dict(raw: dict[str, Any]) -> dict[str, Any]:
    """Expand a cluster preset: a 'gpu' given as a preset name becomes the GPU object."""
    out = _strip(raw)
    if isinstance(out.get("gpu"), str):
        out["gpu"] = _strip(_raw("gpus", out["gpu"]))
    return out


def load_cluster(arg: str | dict[str, Any] | ClusterSpec) -> ClusterSpec:
    """A cluster from a preset name, a JSON file path or an inline object.

    Raises: SpecError (UnknownPresetError for an unknown name that is not a file).
    """
    if isinstance(arg, ClusterSpec):
        return arg
    if isinstance(arg, str):
        if arg.endswith(".json") or "/" in arg:
            arg = read_json_arg(arg, "cluster")
        else:
            arg = _raw("clusters", arg)
    if not isinstance(arg, dict):
        raise SpecError("cluster: expected an object, a preset name or a path to a JSON file")
    return parse_spec(ClusterSpec, cluster_dict(arg), "cluster")
