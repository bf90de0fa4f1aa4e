"""Plans survive a restart: a second app instance on the same SQLite file serves them."""
from __future__ import annotations

from service.store import PlanStore

SEED = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"}


def test_plan_and_report_survive_restart(make_client):
    first = make_client()
    created = first.post("/v1/plans", json=SEED)
    assert created.status_code == 201, created.text
    plan_id = created.json()["id"]
    report_before = first.get(f"/v1/plans/{plan_id}/report").text
    first.app.state.store.close()

    second = make_client()  # a new app, a new engine, the same file
    assert second.app is not first.app
    again = second.get(f"/v1/plans/{plan_id}")
    assert again.status_code == 200
    assert again.json()["parameters"] == created.json()["parameters"]
    assert again.json()["created_at"] == created.json()["created_at"]
    assert second.get(f"/v1/plans/{plan_id}/report").text == report_before


def test_store_round_trip_keeps_request(tmp_path):
    store = PlanStore(f"sqlite:///{tmp_path / 'deep' / 'dir' / 'p.db'}")  # parent dirs created
    saved = store.save({"model": {"name": "m"}}, {"layouts": []}, {"layouts": []})
    plan_id = saved.id
    got = store.get(plan_id)
    assert got.request == {"model": {"name": "m"}} and got.plan == {"layouts": []}
    assert got == saved  # what save returns is what get reads back (created_at in UTC too)
    assert len(plan_id) == 32 and store.get("f" * 32) is None
    assert store.ping()
    store.close()


def test_delete_plan_route(client):
    created = client.post("/v1/plans", json={**SEED, "options": {"top_k": 1}})
    plan_id = created.json()["id"]
    assert client.delete(f"/v1/plans/{plan_id}").status_code == 204
    assert client.get(f"/v1/plans/{plan_id}").status_code == 404
    assert client.delete(f"/v1/plans/{plan_id}").status_code == 404


def test_retention_hides_and_purges_old_plans(tmp_path):
    import time

    from sqlalchemy import func, select

    from service.store import plans_table

    store = PlanStore(f"sqlite:///{tmp_path / 'p.db'}", retention_s=2.0)
    old = store.save({}, {}, {})
    assert store.get(old.id) == old
    time.sleep(2.1)
    assert store.get(old.id) is None  # expired: reads as absent at once
    store._last_purge = 0.0
    new = store.save({}, {}, {})  # the save purges what expired
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(plans_table)).scalar() == 1
    assert store.get(new.id) == new
    store.close()


def test_migrations_adopt_a_pre_migration_store(tmp_path):
    """A store made by the old metadata.create_all keeps its plans through the upgrade."""
    from sqlalchemy import create_engine

    from service import migrate
    from service.store import metadata

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    metadata.create_all(engine)
    engine.dispose()
    old = PlanStore(url, migrate=False)
    assert old.state() == "schema_outdated"
    store = PlanStore(url)  # migrates
    saved = store.save({"a": 1}, {}, {})
    assert migrate.current(store.engine) == migrate.head()
    assert PlanStore(url, migrate=False).get(saved.id) == saved


def test_read_only_store_is_reported_and_refuses_before_solving(tmp_path, make_client):
    """A read-only database: /readyz 503 'read_only'; POST /v1/plans 503 store_unavailable
    with Retry-After, refused before the solve: no job reaches the solve workers (a spy on
    the pool), and the refusal costs about what the /readyz store check costs (within 1 s
    plus 10x that check, timed just before: a solve of the seed takes seconds); reads still
    work."""
    import time

    path = tmp_path / "ro.db"
    first = make_client(database_url=f"sqlite:///{path}")
    plan_id = first.post("/v1/plans", json={**SEED, "options": {"top_k": 1}}).json()["id"]
    ro = make_client(database_url=f"sqlite:///file:{path}?mode=ro&uri=true")
    jobs: list[str] = []
    pool_run = ro.app.state.pool.run

    async def spy(kind, *args, **kw):
        jobs.append(kind)
        return await pool_run(kind, *args, **kw)

    ro.app.state.pool.run = spy
    t0 = time.monotonic()
    ready = ro.get("/readyz")
    check_s = time.monotonic() - t0
    assert ready.status_code == 503 and ready.json()["store"] == "read_only"
    t0 = time.monotonic()
    r = ro.post("/v1/plans", json=SEED)
    refuse_s = time.monotonic() - t0
    assert r.status_code == 503 and r.json()["error"]["type"] == "store_unavailable", r.text
    assert r.headers["retry-after"] == "5" and jobs == []
    assert refuse_s < 1.0 + 10 * check_s, (refuse_s, check_s)
    assert ro.get(f"/v1/plans/{plan_id}").status_code == 200


def test_db_upgrade_command(tmp_path, capsys):
    from service.cli import main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["db", "current", "--url", url]) == 0
    assert "revision none" in capsys.readouterr().out
    assert main(["db", "upgrade", "--url", url]) == 0
    assert "revision 0002" in capsys.readouterr().out
    assert main(["db", "upgrade", "--url", "postgresql+psycopg://u:p@127.0.0.1:1/x"]) == 2
    assert capsys.readouterr().err.startswith("error: database: ")
