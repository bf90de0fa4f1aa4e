"""Training-framework profiles (solver/data/frameworks/*.json): capabilities and memory.

`load_framework(name)` returns the validated FrameworkProfile; unknown names are refused
with the known list. Profiles are read lazily and cached (no import-time work).
"""
from __future__ import annotations

from solver.frameworks.loader import framework_names, load_framework
from solver.frameworks.profile import (
    DEFAULT_FRAMEWORK, FRAMEWORK_NAMES, FrameworkName, FrameworkProfile, StateRecipe,
)

__all__ = ["DEFAULT_FRAMEWORK", "FRAMEWORK_NAMES", "FrameworkName", "FrameworkProfile", "StateRecipe",
           "framework_names", "load_framework"]
