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
