"""Liveness and readiness probes (never behind the API token)."""
from __future__ import annotations

import importlib

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from service.routers.common import app_store
from service.store import PlanStore

router = APIRouter(tags=["health"])

# The solver entry points a request needs; readiness fails while one is missing.
_REQUIRED = (("solver.plan", "build_plan"), ("solver.plan", "estimate_accounting"),
             ("solver.search", "search_layouts"), ("solver.cost.estimate", "estimate_layout"))


def _available(module: str, name: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the plan store answers and the solver imports",
            responses={503: {"description": "not ready"}})
def readyz(store: PlanStore = Depends(app_store)) -> JSONResponse:
    checks = {"store": store.ping()}
    checks.update({f"{module}.{name}": _available(module, name) for module, name in _REQUIRED})
    ready = all(checks.values())
    return JSONResponse({"status": "ready" if ready else "not_ready", "checks": checks},
                        status_code=200 if ready else 503)
