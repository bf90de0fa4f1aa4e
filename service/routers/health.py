"""Liveness and readiness probes (never behind the API token).

Both are async and touch nothing slow on the event loop: /healthz answers from memory;
/readyz asks the store from a thread, with a time limit, and counts live solve workers.
"""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

router = APIRouter(tags=["health"])

STORE_CHECK_S = 1.0  # a store slower than this to answer is reported unreachable


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the plan store answers and takes writes, solve "
            "workers are up", responses={503: {"description": "not ready: `checks` says which"}})
async def readyz(request: Request) -> JSONResponse:
    store, pool = request.app.state.store, request.app.state.pool
    try:
        state = await asyncio.wait_for(asyncio.to_thread(store.state), timeout=STORE_CHECK_S)
    except TimeoutError:
        state = "unreachable"
    checks = {"store": state == "ok", "workers": pool.healthy()}
    ready = all(checks.values())
    return JSONResponse({"status": "ready" if ready else "not_ready", "checks": checks,
                         "store": state, "workers_alive": pool.alive()},
                        status_code=200 if ready else 503)
