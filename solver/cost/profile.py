"""Calibrated profiles: what `trainplan calibrate` writes and `--profile` reads.

A profile is JSON: `schema_version` (PROFILE_SCHEMA), `model_version` (solver.cost.version, the
cost model it was fitted against), `framework` (the runs' training.framework, or null for all),
`constants` (CostOptions fields it replaces), optionally `framework_constants` ({framework:
{trait: value}}: the framework traits of solver.cost.calibrate.FRAMEWORK_TRAITS fitted per
framework on runs of several frameworks; a prediction for that training.framework uses them,
any other framework the shared `constants`), `fitted_on` (each run's id and measured step time,
and the input file's SHA-256), `fit` (per-constant posterior s.d. ratio, pinned / not pinned),
`errors` (before / after / leave-one-out), `method` ("runs" or "measure"), and optionally
`step_log_residuals` (leave-one-out ln(measured / predicted)) from which its own step-time band
is drawn when it has at least 9 (solver.cost.bands). A profile of another schema or model
version is refused (SpecError: exit 2 on the CLI, 422 over HTTP). Schema 2 added the network
efficiencies and `framework_constants`; a schema-1 profile is read as it was written (a subset).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solver.cost.bands import Band, band_from_groups, log_interval
from solver.cost.options import DEFAULT_OPTIONS, CostOptions
from solver.cost.version import MODEL_VERSION
from solver.errors import SpecError
from solver.frameworks.profile import FRAMEWORK_NAMES

PROFILE_SCHEMA = 2
READABLE_SCHEMAS = (1, 2)
FITTABLE = ("gemm_peak_fraction", "attention_peak_fraction", "hbm_fraction", "intra_node_network_efficiency",
            "inter_node_network_efficiency", "dp_overlap_fraction")
TRAITS = ("dp_overlap_fraction",)  # solver.cost.calibrate.FRAMEWORK_TRAITS (a test keeps them equal)


@dataclass(frozen=True)
class Profile:
    """A loaded profile: the constants to use, its framework and its own step-time band."""

    options: CostOptions
    framework: str | None
    step_band: Band | None
    path: str
    framework_options: dict[str, CostOptions] = dataclasses.field(default_factory=dict)

    def options_for(self, framework: str) -> CostOptions:
        """The constants for a run of `framework`: its own traits where the profile has them."""
        return self.framework_options.get(framework, self.options)

    def for_framework(self, framework: str) -> Profile:
        """This profile with `options` resolved for one framework's runs."""
        return dataclasses.replace(self, options=self.options_for(framework))


def _fail(path: str, reason: str) -> SpecError:
    return SpecError(f"profile: {path}: {reason}")


def parse_profile(data: Any, path: str = "profile") -> Profile:
    """Check a profile dict and build its CostOptions. Raises: SpecError naming the field."""
    if not isinstance(data, dict):
        raise _fail(path, "expected a JSON object")
    if data.get("schema_version") not in READABLE_SCHEMAS:
        raise _fail(path, f"schema_version {data.get('schema_version')!r} is not one of "
                          f"{', '.join(map(str, READABLE_SCHEMAS))}; re-run trainplan calibrate")
    if data.get("model_version") != MODEL_VERSION:
        raise _fail(path, f"fitted against cost model {data.get('model_version')!r}, this trainplan is "
                          f"{MODEL_VERSION!r}; re-run trainplan calibrate on the same runs")
    options = _options(data.get("constants"), FITTABLE, DEFAULT_OPTIONS, path, "constants")
    per_fw = data.get("framework_constants") or {}
    if not isinstance(per_fw, dict) or set(per_fw) - set(FRAMEWORK_NAMES):
        raise _fail(path, f"framework_constants: expected an object keyed by {', '.join(FRAMEWORK_NAMES)}")
    framework_options = {f: _options(v, TRAITS, options, path, f"framework_constants.{f}")
                         for f, v in per_fw.items()}
    return Profile(options, data.get("framework"), _own_band(data, path), path, framework_options)


def _options(constants: Any, allowed: tuple[str, ...], base: CostOptions, path: str, where: str) -> CostOptions:
    """`base` with the numbers of a constants object. Raises: SpecError naming the field."""
    if not isinstance(constants, dict) or set(constants) - set(allowed):
        raise _fail(path, f"{where}: expected an object with keys among {', '.join(allowed)}")
    for k, v in constants.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _fail(path, f"{where}.{k}: expected a number, got {v!r}")
    values: dict[str, Any] = {k: float(v) for k, v in constants.items()}
    try:
        return dataclasses.replace(base, **values)
    except SpecError as exc:
        raise _fail(path, f"{where}: {exc.message}") from None


def _own_band(data: dict[str, Any], path: str) -> Band | None:
    residuals = data.get("step_log_residuals")
    if not residuals or log_interval(residuals) is None:
        return None
    return band_from_groups({"profile": {"log_residuals": residuals}}, "step_time", "profile",
                            f"profile {path} (leave-one-out)")


def load_profile(path: str | None) -> Profile | None:
    """Read and check a profile file (None for no path). Raises: SpecError."""
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise _fail(path, f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise _fail(path, "not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(path, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_profile(data, path)


def check_framework(profile: Profile | None, framework: str) -> Profile | None:
    """The profile resolved for `framework` (Profile.for_framework); refuses a profile fitted on
    another framework's runs only. Raises: SpecError."""
    if profile is None:
        return None
    if profile.framework is not None and profile.framework != framework:
        raise _fail(profile.path, f"fitted on {profile.framework} runs, but training.framework is "
                                  f"{framework}; calibrate on {framework} runs or pass --framework "
                                  f"{profile.framework}")
    return profile.for_framework(framework)
