"""The plan store on PostgreSQL: migrations, replicas starting together, database down ->
503 -> recovery (skipped without TRAINPLAN_TEST_POSTGRES_URL, failed without it in CI)."""
from __future__ import annotations

import threading

import pytest
from sqlalchemy import inspect
from sqlalchemy.engine import make_url

from service import migrate
from service.store import PlanStore
from tests.service.pg import FreshDatabase, Proxy, server_url

SEED = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
        "options": {"top_k": 1}}


@pytest.fixture
def pg_db():
    with FreshDatabase(server_url()) as db:
        yield db


def test_migrations_create_the_schema(pg_db):
    store = PlanStore(pg_db.url)
    assert migrate.current(store.engine) == migrate.head() == "0002"
    names = {ix["name"] for ix in inspect(store.engine).get_indexes("plans")}
    assert "ix_plans_created_at" in names
    saved = store.save({"m": 1}, {"layouts": []}, {})
    assert store.get(saved.id) == saved and store.delete(saved.id) and store.get(saved.id) is None
    store.close()


def test_two_replicas_starting_together_10_of_10(pg_db):
    """Two stores migrating an empty database at the same instant, 10 times (a fresh database
    each round): both start every time (no UniqueViolation on alembic_version or plans)."""
    for round_ in range(10):
        with FreshDatabase(server_url()) as db:
            barrier, errors, stores = threading.Barrier(2), [], []

            def start(barrier=barrier, stores=stores, errors=errors):  # this round's
                try:
                    barrier.wait()
                    stores.append(PlanStore(db.url))
                    stores[-1].check_writable()
                except Exception as exc:  # noqa: BLE001 - any failure to start, collected: the assertion names it
                    errors.append(exc)

            threads = [threading.Thread(target=start) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            assert not errors and len(stores) == 2, (round_, errors)
            assert migrate.current(stores[0].engine) == migrate.head()
            for s in stores:
                s.close()


def test_database_down_is_503_then_recovers(pg_db, make_client):
    """Through a proxy that drops the database away: reads and plan creation answer 503
    store_unavailable with Retry-After (the plan before any solve), /readyz says unreachable;
    with the database back, the same requests succeed."""
    url = make_url(pg_db.url)
    proxy = Proxy(url.host or "127.0.0.1", url.port or 5432)
    proxy.start()
    client = make_client(database_url=url.set(host="127.0.0.1", port=proxy.port)
                         .render_as_string(hide_password=False))
    created = client.post("/v1/plans", json=SEED)
    assert created.status_code == 201, created.text
    plan_id = created.json()["id"]
    proxy.stop()
    try:
        got = client.get(f"/v1/plans/{plan_id}")
        assert got.status_code == 503 and got.json()["error"]["type"] == "store_unavailable"
        assert got.headers["retry-after"] == "5"
        post = client.post("/v1/plans", json=SEED)
        assert post.status_code == 503 and post.json()["error"]["type"] == "store_unavailable"
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["store"] == "unreachable"
    finally:
        proxy.start()
    assert client.get(f"/v1/plans/{plan_id}").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.post("/v1/plans", json=SEED).status_code == 201
