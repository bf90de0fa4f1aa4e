"""The one place domain exceptions become HTTP responses (JSON with field paths).

Body shape of every error: {"error": {"status", "type", "message", "problems": [{"field",
"reason"}], "explanation"?}}. 422 bad input or nothing fits, 404 unknown id, 401 missing
token, 413 body too large, 503 saturated or out of time. Anything unexpected is a 500 with
no internals in the body (and is a bug: user input must never get there).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.admission import OverCapacity
from service.store import StoreUnavailable, _reason
from service.workers import JobStopped
from topology.errors import InfeasibleError, PlannerError, Problem, SolverTimeoutError

log = logging.getLogger("trainplan.service")


def jsonable(obj: Any) -> Any:
    """Plain JSON values: non-finite floats become None, tuples lists, numpy scalars Python."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "item"):  # numpy scalar
        return jsonable(obj.item())
    if hasattr(obj, "as_dict"):
        return jsonable(obj.as_dict())
    if hasattr(obj, "model_dump"):
        return jsonable(obj.model_dump(mode="json"))
    return str(obj)


def error_response(status: int, kind: str, message: str, problems: list[Problem] | None = None,
                   explanation: dict | None = None, headers: dict | None = None,
                   progress: dict | None = None) -> JSONResponse:
    body: dict[str, Any] = {"status": status, "type": kind, "message": message,
                            "problems": [p.as_dict() for p in problems or []]}
    if explanation is not None:
        body["explanation"] = jsonable(explanation)
    if progress is not None:
        body["progress"] = progress
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _field(loc: tuple) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def _validation_problem(err: dict) -> Problem:
    kind = err.get("type", "")
    if kind == "json_invalid":
        ctx = err.get("ctx", {}).get("error", "")
        return Problem("body", f"malformed JSON ({ctx})" if ctx else "malformed JSON")
    if kind == "missing":
        return Problem(_field(err.get("loc", ())), "required field is missing")
    if kind == "extra_forbidden":
        return Problem(_field(err.get("loc", ())), "unknown field")
    return Problem(_field(err.get("loc", ())), str(err.get("msg", "invalid")))


async def _on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    problems = [_validation_problem(e) for e in exc.errors()]
    return error_response(422, "invalid_input", "; ".join(map(str, problems)), problems)


async def _on_planner_error(_: Request, exc: PlannerError) -> JSONResponse:
    if isinstance(exc, InfeasibleError):
        return error_response(422, "infeasible", exc.message, exc.problems, exc.explanation)
    if isinstance(exc, SolverTimeoutError):  # a timeout is never "infeasible" (STYLE.md)
        return error_response(503, "solver_timeout", exc.message + "; a larger "
                              "options.time_limit_s (up to the server cap) may find one",
                              exc.problems)
    problems = exc.problems or [Problem("", exc.message)]
    kind = "over_capacity" if isinstance(exc, OverCapacity) else "invalid_input"
    return error_response(422, kind, exc.message, problems)


async def _on_stopped(request: Request, exc: Exception) -> JSONResponse:
    from service.routers.dispatch import stopped_response

    assert isinstance(exc, JobStopped)  # registered for JobStopped only (not user-caused)
    return stopped_response(request, exc)


async def _on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    if exc.status_code == 400:  # FastAPI could not decode the body (e.g. nested too deeply)
        problem = Problem("body", "unreadable JSON body (undecodable or nested too deeply)")
        return error_response(422, "invalid_input", str(problem), [problem])
    kinds = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
    return error_response(exc.status_code, kinds.get(exc.status_code, "http_error"),
                          str(exc.detail), headers=getattr(exc, "headers", None))


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal", "internal error (a bug: please report the request)")


async def _on_store(request: Request, exc: Exception) -> JSONResponse:
    reason = _reason(exc) if isinstance(exc, SQLAlchemyError) else str(exc)
    log.warning("store unavailable on %s %s: %s", request.method, request.url.path, reason)
    return error_response(503, "store_unavailable", f"the plan store cannot take this request "
                          f"now ({reason}); retry later", headers={"Retry-After": "5"})


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers above on `app`."""
    # Callable[..., ...]: Starlette types a handler's exception as plain Exception.
    handlers: dict[type[Exception], Callable[..., Awaitable[JSONResponse]]] = {
        RequestValidationError: _on_validation, PlannerError: _on_planner_error,
        JobStopped: _on_stopped, StoreUnavailable: _on_store, SQLAlchemyError: _on_store,
        StarletteHTTPException: _on_http, Exception: _on_unexpected}
    for exc_type, handler in handlers.items():
        app.add_exception_handler(exc_type, handler)
