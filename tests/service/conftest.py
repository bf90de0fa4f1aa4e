"""Fixtures for the HTTP service tests: an app on a temporary SQLite file and its client."""
from __future__ import annotations

import warnings

import pytest

from service.app import create_app
from service.settings import Settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'plans.db'}"


@pytest.fixture
def make_client(db_url):
    """Build a client for an app with the given settings overrides (same DB file by default)."""
    clients = []

    def make(**overrides) -> TestClient:
        settings = Settings(**{"database_url": db_url, "max_time_limit_s": 5.0, **overrides})
        app = create_app(settings)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()  # lifespan: the solve workers start (warm) before the first request
        assert client.portal is not None  # set by __enter__
        client.portal.call(app.state.pool.start)
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)  # lifespan end: workers killed, store closed


def start_live_server(**settings) -> tuple[str, object]:
    """uvicorn serving create_app(Settings(**settings)) on 127.0.0.1:<ephemeral>, its solve
    workers up; returns (base URL, stop())."""
    import asyncio
    import socket
    import threading
    import time

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    from service.http_guard import head_deadline_protocol

    app = create_app(Settings(**settings))
    server = uvicorn.Server(uvicorn.Config(  # as `trainplan serve` runs it
        app, log_level="warning", lifespan="on", timeout_keep_alive=5,
        http=head_deadline_protocol(app.state.settings.header_read_timeout_s)))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])),
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not (server.started and app.state.pool.healthy()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started and app.state.pool.healthy(), "uvicorn or its workers did not start"

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

    return f"http://127.0.0.1:{sock.getsockname()[1]}", stop


@pytest.fixture
def live_server_factory(db_url):
    """Start uvicorn serving create_app(Settings(**overrides)) on 127.0.0.1:<ephemeral>;
    returns its base URL. Every server started is stopped (and its workers killed) at the end."""
    stops = []

    def start(**overrides) -> str:
        base, stop = start_live_server(**{"database_url": db_url, **overrides})
        stops.append(stop)
        return base

    yield start
    for stop in stops:
        stop()


@pytest.fixture
def client(make_client):
    return make_client()


def post_admitted(client, url: str, tries: int = 5, **kw):
    """client.post(url, **kw), sent again after the server's Retry-After while it answers
    503 `saturated` (every solve worker busy: the documented backpressure, which a test's
    single request meets only when a loaded machine delays its workers); at most `tries`
    times, then that 503 is returned for the test to fail on. Any other answer is returned."""
    import time

    for _ in range(tries - 1):
        r = client.post(url, **kw)
        if r.status_code != 503 or r.json()["error"]["type"] != "saturated":
            return r
        time.sleep(float(r.headers["retry-after"]))
    return client.post(url, **kw)


def problems(response) -> dict[str, str]:
    """{field: reason} of an error response (asserts the error shape)."""
    body = response.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert err["status"] == response.status_code
    assert isinstance(err["message"], str) and err["type"]
    return {p["field"]: p["reason"] for p in err["problems"]}


@pytest.fixture(scope="session")
def seed_plan_page(seed_model, seed_cluster, seed_training) -> tuple[dict, str]:
    """The seed plan as JSON-ready data and its report page (`trainplan plan --format html`),
    built once for the session."""
    import json

    from service.commands.plan import plan_html
    from service.routers.errors import jsonable
    from solver.plan import build_plan

    plan = build_plan(seed_model, seed_cluster, seed_training)
    return json.loads(json.dumps(jsonable(plan))), plan_html(plan, seed_model, seed_cluster)
