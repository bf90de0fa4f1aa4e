"""Availability (issue 11): one deadline per request, admission refusals, abandoned requests
freeing their workers, probes answering while workers solve, worker memory budget."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from service.routers.schemas import SEED_CLUSTER
from tests.search.test_explain_budget import HUGE

SEED = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"}
# A 52.8T-parameter model (tests/search/test_explain_budget.py) cannot fit the seed's 512 x 80 GB;
# its explanation runs to its 20 s budget (about 23 s in all on 2 cores). (405B on one node
# answered in about 2-4 s once the explanation's memory questions were narrowed, too close
# to the 2 s deadline these tests need it to pass.)
INFEASIBLE = {"model": HUGE, "cluster": "seed-512", "training": "seed-300b",
              "options": {"time_limit_s": 1}}


def test_deadline_covers_the_whole_request(make_client):
    """With a 2 s cap the infeasible request answers 504 within cap + 1 s, naming the stages
    done; the killed worker is replaced and the next request is served."""
    client = make_client(max_time_limit_s=2.0, max_concurrent_solves=1)
    assert client.post("/v1/estimate", json={**SEED, "layout": {"tp": 8, "dp": 64}}).status_code == 200
    t0 = time.monotonic()
    r = client.post("/v1/layouts", json=INFEASIBLE)
    assert time.monotonic() - t0 < 3.0
    assert r.status_code == 504, r.text
    err = r.json()["error"]
    assert err["type"] == "deadline_exceeded" and err["progress"]["deadline_s"] == 2.0
    assert err["progress"]["stages_done"] == ["parse", "admit"]
    assert err["progress"]["stopped_in"] == "search"
    assert client.app.state.pool.replaced == 1
    assert client.post("/v1/layouts", json={**SEED, "options": {"top_k": 1}}).status_code == 200


def test_admission_refuses_a_graph_too_large_to_build(make_client):
    """nodes_per_leaf 4096 on 4,096 nodes of 8 GPUs: 32,768 GPUs + 4,096 NVSwitches +
    32,768 NICs + 1 leaf + 4 spines = 69,637 vertices; (32,768 NVLink + 32,768 PCIe + 32,768
    NIC-leaf) links x 2 = 196,608 edges: 266,245 elements, over a 200,000 cap. Refused before
    anything is built (fast), naming the field and both numbers."""
    client = make_client(max_graph_elements=200_000)
    cluster = {**SEED_CLUSTER, "nodes": 4096, "topology": {
        "kind": "fat_tree", "nodes_per_leaf": 4096, "nics_per_node": 8, "nic_gb_s": 45}}
    t0 = time.monotonic()
    r = client.post("/v1/layouts", json={**SEED, "cluster": cluster})
    assert r.status_code == 422 and r.json()["error"]["type"] == "over_capacity", r.text
    assert time.monotonic() - t0 < 2.0
    (problem,) = r.json()["error"]["problems"]
    assert problem["field"] == "cluster.topology"
    assert "266245" in problem["reason"] and "200000" in problem["reason"]


def test_worker_over_memory_budget_is_replaced(make_client):
    """A worker above worker_max_rss_bytes is stopped mid-job: 503 memory_exceeded."""
    client = make_client(worker_max_rss_bytes=50_000_000, max_concurrent_solves=1)
    r = client.post("/v1/layouts", json=INFEASIBLE)
    assert r.status_code == 503 and r.json()["error"]["type"] == "memory_exceeded", r.text
    assert client.app.state.pool.replaced >= 1


def test_abandoned_requests_free_their_workers(live_server_factory):
    """Two infeasible requests whose clients leave after 1 s do not cause a single 503 for
    the feasible request that follows (2 workers, 2 s queue wait)."""
    base = live_server_factory(max_concurrent_solves=2, queue_wait_s=2.0, max_time_limit_s=30)

    def abandon(_):
        try:
            with httpx.Client(base_url=base, timeout=1.0, trust_env=False) as http:
                http.post("/v1/layouts", json=INFEASIBLE)
        except httpx.TimeoutException:
            return "left"
        return "answered"

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(abandon, range(2))) == ["left", "left"]
    with httpx.Client(base_url=base, timeout=30, trust_env=False) as http:
        r = http.post("/v1/layouts", json={**SEED, "options": {"top_k": 1}})
        assert r.status_code == 200, r.text


def _healthz_seconds(base: str, n: int, until=lambda: False) -> list[float]:
    """Seconds of up to `n` GET /healthz, one connection, 20 ms apart (stops when `until()`)."""
    seconds: list[float] = []
    with httpx.Client(base_url=base, timeout=5, trust_env=False) as http:
        while len(seconds) < n and not until():
            t0 = time.perf_counter()
            assert http.get("/healthz").status_code == 200
            seconds.append(time.perf_counter() - t0)
            time.sleep(0.02)
    return seconds


def test_healthz_fast_while_workers_solve(live_server_factory):
    """8 expensive requests at once (2 workers busy, 6 queued): /healthz p99 < 100 ms.

    On a shared machine other work adds its own delays, so the bound is 100 ms plus twice
    the p90 of 40 probes with nothing solving, taken just before and again just after the
    solves (the larger: other work on the machine may rise or fall meanwhile), and 3% of
    the probes sent while both workers solve (at least 20; one of fewer than 34) may exceed
    it (a p97). The solves run 5 s (their deadline) so that under load (each probe ~0.1 s at
    load 12-16 on 2 cores) there are still about 50 probes: at 3 s and ~32 probes, one
    scheduler delay of 0.4-0.5 s beside the one allowed failed it. A probe that waited on
    a solve would take seconds (the threaded server before issue 11: p50 ~0.1 s, p99 1-2 s
    with 8 solves, benchmarks.load), so this still fails when probes share anything with
    the solves."""
    base = live_server_factory(max_concurrent_solves=2, queue_wait_s=10.0, max_time_limit_s=5.0)
    before = sorted(_healthz_seconds(base, 40))

    def expensive(_):
        with httpx.Client(base_url=base, timeout=30, trust_env=False) as http:
            return http.post("/v1/layouts", json=INFEASIBLE).status_code

    with ThreadPoolExecutor(8) as pool:
        busy = [pool.submit(expensive, i) for i in range(8)]
        time.sleep(0.3)
        # probed while at least 2 requests (the two workers' share) are still running
        seconds = _healthz_seconds(base, 200, until=lambda: sum(not f.done() for f in busy) < 2)
        codes = [f.result() for f in busy]
    after = sorted(_healthz_seconds(base, 40))
    bound_s = 0.1 + 2 * max(before[int(0.9 * len(before))], after[int(0.9 * len(after))])
    over = sorted(s for s in seconds if s > bound_s)
    assert len(seconds) >= 20, f"only {len(seconds)} probes while the workers solved"
    assert len(over) <= max(1, 0.03 * len(seconds)), (bound_s, len(seconds), over)
    assert set(codes) <= {503, 504} and 504 in codes  # over the deadline or saturated, never 500
