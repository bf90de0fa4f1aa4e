"""The FastAPI app factory: routers, error handlers, body-size limit, store, solve workers.

`create_app(settings)` builds an independent app (its own store connection and workers), so
tests run several side by side; `trainplan serve` builds one from the environment.
"""
from __future__ import annotations

import asyncio
import json
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service.routers import estimate, health, layouts, plans, presets
from service.routers.errors import install_error_handlers
from service.routers.openapi import install_docs
from service.settings import Settings, get_settings
from service.store import PlanStore
from service.workers import WorkerPool

DESCRIPTION = """\
trainplan as a service: costed training plans and ranked parallel layouts.

* **POST /v1/layouts** — a scheduler's call: ranked layouts with Megatron-LM arguments, a
  torchtitan config, a DeepSpeed config and the rank-to-GPU placement.
* **POST /v1/plans** — the whole plan (as `trainplan plan`), stored; **GET /v1/plans/{id}**
  and **GET /v1/plans/{id}/report** (HTML with charts) fetch it again, also after a restart.
* **POST /v1/estimate** — one fixed layout. **GET /v1/presets** — preset names.

Model, cluster and training take a preset name or an inline object. Errors are JSON:
`{"error": {"status", "type", "message", "problems": [{"field", "reason"}]}}`.
"""


BODY_METHODS = (b"POST", b"PUT", b"PATCH")


class BodySizeLimit:
    """ASGI middleware on every request body: 413 above `max_bytes`, 415 unless a /v1 body
    is JSON, 408 when the whole body is not in within `read_timeout_s` of its headers (a
    client dripping a byte at a time cannot hold a connection longer; all JSON). The
    request head has its own deadline in the protocol (service.http_guard).

    The body is read up to the limit before the app sees it, so a missing or lying
    Content-Length cannot get a larger body through.
    """

    def __init__(self, app, max_bytes: int, read_timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The request's deadline (service.routers.dispatch) counts from here.
        scope.setdefault("state", {})["arrived_s"] = time.monotonic()
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(send, 413, "too_large", f"request body over {self.max_bytes} bytes")
            return
        if not _json_or_bodiless(scope, headers):
            await self._reject(send, 415, "unsupported_media_type",
                               "the request body must be JSON (Content-Type: application/json)",
                               "content-type")
            return
        chunks, size, more = [], 0, True
        deadline = time.monotonic() + self.read_timeout_s  # for the whole body, not per piece
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                await self._reject(send, 408, "timeout", f"request body not received within "
                                   f"{self.read_timeout_s} s")
                return
            if message["type"] != "http.request":
                await self.app(scope, _replay([], message, receive), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                await self._reject(send, 413, "too_large",
                                   f"request body over {self.max_bytes} bytes")
                return
        await self.app(scope, _replay(chunks, None, receive), send)

    @staticmethod
    async def _reject(send, status: int, kind: str, message: str, field: str = "body") -> None:
        reason = "too large" if status == 413 else message
        body = json.dumps({"error": {"status": status, "type": kind, "message": message,
                                     "problems": [{"field": field, "reason": reason}]}}).encode()
        # The body was not read to its end: the connection cannot carry another request.
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _json_or_bodiless(scope, headers: dict) -> bool:
    """True unless this is a /v1 POST/PUT/PATCH whose Content-Type is not JSON."""
    if scope.get("method", "").encode() not in BODY_METHODS or not scope["path"].startswith("/v1/"):
        return True
    kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    return kind == b"application/json" or kind.endswith(b"+json")


def _replay(chunks: list[bytes], pending: dict | None, receive):
    """A receive() that first hands over the buffered body (or message), then the real one."""
    first = pending or {"type": "http.request", "body": b"".join(chunks), "more_body": False}
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return first
        return await receive()

    return replay


def create_app(settings: Settings | None = None) -> FastAPI:
    """A new app for `settings` (default: from the environment, TRAINPLAN_*)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        starting = asyncio.ensure_future(app.state.pool.start())  # /readyz waits for it
        yield
        starting.cancel()
        app.state.pool.close()
        app.state.store.close()

    app = FastAPI(title="trainplan", version="0.1.0", description=DESCRIPTION,
                  docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.settings = settings
    app.state.store = PlanStore(settings.database_url, migrate=settings.migrate_on_start,
                                retention_s=settings.plan_retention_s)
    app.state.pool = WorkerPool(settings.max_concurrent_solves, settings.queue_wait_s,
                                settings.worker_max_rss_bytes)
    install_error_handlers(app)
    install_docs(app)
    for module in (health, presets, plans, layouts, estimate):
        app.include_router(module.router)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes,
                       read_timeout_s=settings.body_read_timeout_s)
    return app
