"""The real server: uvicorn on a loopback ephemeral port, spoken to over HTTP with httpx."""
from __future__ import annotations

import socket
import time

import httpx
import pytest


@pytest.fixture
def live_server(live_server_factory):
    """(base_url, None): a uvicorn with a 4 kB body limit and 2 solve workers."""
    return live_server_factory(max_body_bytes=4096, max_concurrent_solves=2), None


def test_real_http_round_trip(live_server):
    base, _ = live_server
    with httpx.Client(base_url=base, timeout=30, trust_env=False) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        created = http.post("/v1/plans", json={"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"})
        assert created.status_code == 201, created.text
        plan_id = created.json()["id"]
        assert http.get(f"/v1/plans/{plan_id}").json()["id"] == plan_id
        page = http.get(f"/v1/plans/{plan_id}/report")
        assert page.headers["content-type"].startswith("text/html") and "<svg" in page.text
        bad = http.post("/v1/estimate", content=b"{nope", headers={"content-type": "application/json"})
        assert bad.status_code == 422 and bad.json()["error"]["problems"][0]["field"] == "body"
        big = http.post("/v1/estimate", content=b"x" * 10_000, headers={"content-type": "application/json"})
        assert big.status_code == 413
        assert http.get("/v1/plans/" + "0" * 32).status_code == 404


def test_concurrent_requests_queue_for_slots(live_server_factory):
    """4 plans at once through 2 solve slots: all stored, distinct ids. (The queue wait is
    60 s: a plan takes 1-5 s of a loaded 2-core machine, and the last two wait for two.)"""
    from concurrent.futures import ThreadPoolExecutor

    base = live_server_factory(max_concurrent_solves=2, queue_wait_s=60)
    body = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
            "options": {"top_k": 2}}

    def post(_):
        with httpx.Client(base_url=base, timeout=60, trust_env=False) as http:
            return http.post("/v1/plans", json=body)

    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(post, range(4)))
    assert [r.status_code for r in replies] == [201] * 4
    ids = {r.json()["id"] for r in replies}
    assert len(ids) == 4
    with httpx.Client(base_url=base, timeout=30, trust_env=False) as http:
        assert all(http.get(f"/v1/plans/{i}").status_code == 200 for i in ids)


def test_trainplan_serve_command(tmp_path):
    """`trainplan serve --host 127.0.0.1 --port P` answers /healthz; settings from TRAINPLAN_*."""
    import os
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "TRAINPLAN_DATABASE_URL": f"sqlite:///{tmp_path / 'plans.db'}",
           "TRAINPLAN_API_TOKEN": "tok"}
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, ok = time.monotonic() + 30, False
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2, trust_env=False) as http:
            while time.monotonic() < deadline and not ok:
                try:
                    ok = http.get("/healthz").status_code == 200
                except httpx.TransportError:
                    time.sleep(0.2)
            assert ok, "server did not come up"
            assert http.get("/v1/presets").status_code == 401  # token taken from the environment
            assert http.get("/v1/presets", headers={"Authorization": "Bearer tok"}).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
