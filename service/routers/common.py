"""Shared route plumbing: settings/store dependencies, bearer auth, spec loading.

Over HTTP a model, cluster or training field is a preset name or an inline object; strings
are only ever looked up among the shipped presets (never read as file paths).
"""
from __future__ import annotations

import json
import secrets
from typing import Any

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.settings import Settings, check_cluster_size
from service.store import PlanStore
from topology.errors import Problem, SpecError, UnknownPresetError

_bearer = HTTPBearer(auto_error=False, description="Set when the server has TRAINPLAN_API_TOKEN.")


def app_settings(request: Request) -> Settings:
    """The settings of the app serving this request."""
    return request.app.state.settings


def app_store(request: Request) -> PlanStore:
    """The plan store of the app serving this request."""
    return request.app.state.store


def require_token(settings: Settings = Depends(app_settings),
                  cred: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """401 unless the server has no token or the request carries it as a bearer token."""
    if settings.api_token is None:
        return
    if cred is None or not secrets.compare_digest(cred.credentials.encode(),
                                                  settings.api_token.encode()):
        raise HTTPException(401, "missing or wrong bearer token",
                            headers={"WWW-Authenticate": "Bearer"})


def _preset(arg: Any, field: str, names: list[str]) -> Any:
    if isinstance(arg, str):
        if arg not in names:
            raise UnknownPresetError(
                f"{field}: unknown preset '{arg[:100]}'",
                [Problem(field, f"unknown preset (known: {', '.join(names)})")])
        return arg
    if not isinstance(arg, dict):
        raise SpecError(f"{field}: expected a preset name or an object",
                        [Problem(field, "expected a preset name (string) or an object")])
    return arg


def load_model_arg(arg: Any):
    """ModelSpec from a preset name or inline object (native or HF config). Raises: SpecError."""
    from solver.presets import load_model, preset_names

    return load_model(_preset(arg, "model", preset_names("models")))


def load_training_arg(arg: Any):
    """TrainingSpec from a preset name or inline object. Raises: SpecError."""
    from solver.presets import load_training, preset_names

    return load_training(_preset(arg, "training", preset_names("training")))


def load_cluster_arg(arg: Any):
    """ClusterSpec from a preset name or inline object (its 'gpu' may name a GPU preset).

    Raises: SpecError.
    """
    from topology.catalog import cluster_dict, load_cluster, preset_names
    from topology.spec import ClusterSpec, parse_spec

    arg = _preset(arg, "cluster", preset_names("clusters"))
    if isinstance(arg, str):
        return load_cluster(arg)
    if isinstance(arg.get("gpu"), str):
        _preset(arg["gpu"], "cluster.gpu", preset_names("gpus"))
    # JSON-mode validation: a request's arrays are valid for tuple fields (unavailable_nodes).
    return parse_spec(ClusterSpec, json.dumps(cluster_dict(arg)), "cluster")


def load_layout_arg(arg: Any):
    """LayoutSpec from an inline object. Raises: SpecError."""
    from solver.presets import load_layout

    if not isinstance(arg, dict):
        raise SpecError("layout: expected an object", [Problem("layout", "expected an object")])
    return load_layout(arg)



def load_specs(**args: Any) -> dict[str, Any]:
    """Load several request fields at once (names: model, cluster, training, layout),
    reporting the problems of all of them together. Raises: SpecError."""
    loaders = {"model": load_model_arg, "cluster": load_cluster_arg,
               "training": load_training_arg, "layout": load_layout_arg}
    out, problems = {}, []
    for name, value in args.items():
        try:
            out[name] = loaders[name](value)
        except SpecError as exc:
            problems += exc.problems or [Problem(name, exc.message)]
    if problems:
        raise SpecError("; ".join(map(str, problems)), problems)
    return out


def problem_specs(settings: Settings, **args: Any) -> dict[str, Any]:
    """`load_specs(**args)` (model, cluster, ...), the cluster checked against the server's
    size cap. Raises: SpecError (-> 422)."""
    specs = load_specs(**args)
    check_cluster_size(specs["cluster"], settings)
    return specs


def search_inputs(body: Any, settings: Settings, plan: bool = False) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """What a search route needs from its body: (model, cluster, training, search options,
    applied limits), each validated; the cluster checked against the server's size cap.
    `plan`: the options of a plan (solving.plan_search_options), else of a search.
    Raises: SpecError (-> 422)."""
    from service.routers import solving

    from solver.presets import priced_training

    specs = problem_specs(settings, model=body.model, cluster=body.cluster, training=body.training)
    if plan:
        options, limits = solving.plan_search_options(body.options, specs["cluster"], settings)
    else:
        options, limits = solving.search_options(body.options, settings)
    training = priced_training(specs["training"], getattr(body, "price_per_gpu_hour", None),
                               getattr(body, "currency", None))
    return specs["model"], specs["cluster"], training, options, limits
