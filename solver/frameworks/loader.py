"""Read framework profiles from solver/data/frameworks/<name>.json (lazily, cached)."""
from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from solver.errors import Problem, SpecError, UnknownPresetError
from solver.frameworks.profile import FRAMEWORK_NAMES, FrameworkProfile
from topology.spec import parse_spec

DATA = Path(__file__).resolve().parent.parent / "data" / "frameworks"


def framework_names() -> list[str]:
    """Names of the framework profiles (the training.framework vocabulary)."""
    return sorted(FRAMEWORK_NAMES)


@cache
def _load(name: str) -> FrameworkProfile:
    path = DATA / f"{name}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"framework: profile file {path.name} cannot be read ({exc})") from None
    profile = parse_spec(FrameworkProfile, data, f"framework[{name}]")
    if profile.name != name:
        raise SpecError(f"framework: {path.name} names itself '{profile.name}'")
    return profile


def load_framework(name: str) -> FrameworkProfile:
    """The profile of a framework by name.

    Raises: UnknownPresetError naming the known frameworks; SpecError for a broken file.
    """
    if name not in FRAMEWORK_NAMES:
        reason = f"unknown framework '{name}' (known: {', '.join(framework_names())})"
        raise UnknownPresetError(f"framework: {reason}", [Problem("framework", reason)])
    return _load(name)
