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
        client = TestClient(create_app(settings), raise_server_exceptions=False)
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.app.state.store.close()


@pytest.fixture
def client(make_client):
    return make_client()


def problems(response) -> dict[str, str]:
    """{field: reason} of an error response (asserts the error shape)."""
    body = response.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert err["status"] == response.status_code
    assert isinstance(err["message"], str) and err["type"]
    return {p["field"]: p["reason"] for p in err["problems"]}
