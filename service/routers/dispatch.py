"""Hand a request's work to the solve workers under the request's one deadline.

The deadline runs from the moment the request arrived (stamped by the body-size middleware)
for TRAINPLAN_MAX_TIME_LIMIT_S seconds and covers everything after it: parsing, admission,
topology, tables, search, explanation and exports. Over it, or when the client leaves, the
worker is killed and replaced; the client (if still there) gets a 504 naming the stages done.
"""
from __future__ import annotations

import time
from typing import Any

from fastapi import Request

from service.routers.errors import error_response
from service.workers import JobStopped


def deadline_of(request: Request) -> float:
    """Monotonic time (s) by which this request must be answered."""
    arrived = request.scope.get("state", {}).get("arrived_s", time.monotonic())
    return arrived + request.app.state.settings.max_time_limit_s


async def run_job(request: Request, kind: str, payload: dict[str, Any]) -> Any:
    """Result of job `kind` (service.jobs.JOBS). Raises: PlannerError, JobStopped."""
    settings = request.app.state.settings
    return await request.app.state.pool.run(kind, {"body": payload, "settings": settings},
                                            deadline_of(request), request.is_disconnected)


_STOPPED = {  # reason -> (status, error type, Retry-After)
    "busy": (503, "saturated", "1"),
    "deadline": (504, "deadline_exceeded", None),
    "memory": (503, "memory_exceeded", None),
    "crashed": (503, "worker_crashed", "1"),
    "disconnect": (499, "client_closed", None),
}


def stopped_response(request: Request, exc: JobStopped):
    """The JSON error for a job that did not finish: what was done and where it stopped."""
    status, kind, retry = _STOPPED[exc.reason]
    cap = request.app.state.settings.max_time_limit_s
    progress = {"stages_done": exc.stages[:-1], "stopped_in": exc.stages[-1] if exc.stages
                else "queue", "elapsed_s": round(exc.elapsed_s, 3), "deadline_s": cap}
    message = exc.message
    if exc.reason == "deadline":
        message = (f"stopped after {progress['elapsed_s']} s, in stage '{progress['stopped_in']}'"
                   f": the server answers every request within {cap} s "
                   "(TRAINPLAN_MAX_TIME_LIMIT_S); a smaller problem or options.time_limit_s fits")
    return error_response(status, kind, message, progress=progress,
                          headers={"Retry-After": retry} if retry else None)
