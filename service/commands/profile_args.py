"""--profile on plan / search / estimate / validate: a calibrated profile (trainplan calibrate)."""
from __future__ import annotations

import argparse

from solver.cost.profile import Profile, check_framework, load_profile


def add_profile_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default=None,
                   help="calibrated profile JSON (trainplan calibrate): its constants and step-time band "
                        "replace the shipped ones; refused (exit 2) for another cost-model or schema version")


def profile_for(args: argparse.Namespace, framework: str | None = None) -> Profile | None:
    """The --profile, checked (and against training.framework when given). Raises: SpecError."""
    profile = load_profile(getattr(args, "profile", None))
    if framework is not None:
        profile = check_framework(profile, framework)
    return profile


def cost_kwargs(profile: Profile | None) -> dict:
    """cost_options / step_band keyword arguments for the solver calls (empty without a profile)."""
    return {} if profile is None else {"cost_options": profile.options, "step_band": profile.step_band}
