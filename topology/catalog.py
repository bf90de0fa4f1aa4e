"""GPU and cluster presets: one JSON file each under topology/data/, read lazily on first use."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from topology.errors import Problem, SpecError, UnknownPresetError
from topology.spec import ClusterSpec, GpuSpec, parse_spec

DATA = Path(__file__).parent / "data"


class PresetFolder:
    """Presets of several kinds under one folder: <root>/<kind>/<name>.json, read lazily.

    `fields` maps each kind to the spec field its errors name (e.g. 'gpus' -> 'gpu'). Keys
    starting with '_' (citations such as '_source') are dropped on load. topology and
    solver keep their presets in one of these each.
    """

    def __init__(self, root: Path, fields: dict[str, str]) -> None:
        self.root, self.fields = root, fields
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}

    def names(self, kind: str) -> list[str]:
        """Names of the presets of one kind."""
        return sorted(p.stem for p in (self.root / kind).glob("*.json"))

    def raw(self, kind: str, name: str) -> dict[str, Any]:
        """The preset's JSON object as stored. Raises: UnknownPresetError."""
        if (kind, name) not in self._cache:
            path = self.root / kind / f"{name}.json"
            if not path.is_file():
                field = self.fields[kind]
                reason = f"unknown preset '{name}' (known: {', '.join(self.names(kind))})"
                raise UnknownPresetError(f"{field}: {reason}", [Problem(field, reason)])
            self._cache[(kind, name)] = json.loads(path.read_text())
        return self._cache[(kind, name)]

    def load(self, kind: str, name: str) -> dict[str, Any]:
        """The preset without its '_'-prefixed keys. Raises: UnknownPresetError."""
        return strip_private(self.raw(kind, name))


def strip_private(raw: dict[str, Any]) -> dict[str, Any]:
    """The object without its '_'-prefixed keys (citations)."""
    return {k: v for k, v in raw.items() if not k.startswith("_")}


PRESETS = PresetFolder(DATA, {"gpus": "gpu", "clusters": "cluster"})
preset_names = PRESETS.names


def load_gpu(name: str) -> GpuSpec:
    """A GPU preset by name. Raises: UnknownPresetError."""
    return parse_spec(GpuSpec, PRESETS.load("gpus", name), "gpu")


def read_json_arg(arg: str, field: str) -> Any:
    """Read a JSON file named on the command line. Raises: SpecError."""
    try:
        return json.loads(Path(arg).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"{field}: cannot read '{arg}': {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{field}: '{arg}' is not UTF-8 text (byte {exc.start}); "
                        "expected a JSON file") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{field}: '{arg}' is not valid JSON ({exc.msg} at line {exc.lineno})") from None


def inline_json(text: str, field: str) -> Any:
    """JSON given inline on the command line. Raises: SpecError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        reason = f"inline JSON does not parse ({exc.msg} at column {exc.colno})"
        raise SpecError(f"{field}: {reason}", [Problem(field, reason)]) from None


def read_spec_arg(arg: str, field: str, presets: PresetFolder | None = None, kind: str = "") -> Any:
    """One command-line spec argument: inline JSON (starts with '{' or '['), a JSON file, or
    a preset name. A file is an argument that ends in .json, has a '/', or is not a preset
    name but exists on disk (so a directory is reported as one, not as an unknown preset).
    Raises: SpecError (UnknownPresetError for a name that is neither)."""
    if arg.lstrip().startswith(("{", "[")):
        return inline_json(arg, field)
    if presets is None or arg.endswith(".json") or "/" in arg or (
            arg not in presets.names(kind) and Path(arg).exists()):
        return read_json_arg(arg, field)
    return presets.load(kind, arg)


def expect_object(data: Any, field: str, presets: bool = True) -> dict[str, Any]:
    """`data` when it is a JSON object. Raises: SpecError naming what was given instead."""
    if isinstance(data, dict):
        return data
    kind = {list: "a JSON list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(data), "a number")
    other = "a preset name or a path to a JSON file" if presets else "a path to a JSON file"
    reason = f"expected a JSON object ({{...}}), {other}; got {kind}"
    raise SpecError(f"{field}: {reason}", [Problem(field, reason)])


def cluster_dict(raw: dict[str, Any]) -> dict[str, Any]:
    """Expand a cluster preset: a 'gpu' given as a preset name becomes the GPU object."""
    out = strip_private(raw)
    if isinstance(out.get("gpu"), str):
        out["gpu"] = PRESETS.load("gpus", out["gpu"])
    return out


def load_cluster(arg: str | dict[str, Any] | ClusterSpec) -> ClusterSpec:
    """A cluster from a preset name, a JSON file path or an inline object.

    Raises: SpecError (UnknownPresetError for an unknown name that is not a file).
    """
    if isinstance(arg, ClusterSpec):
        return arg
    data = read_spec_arg(arg, "cluster", PRESETS, "clusters") if isinstance(arg, str) else arg
    return parse_spec(ClusterSpec, cluster_dict(expect_object(data, "cluster")), "cluster")
