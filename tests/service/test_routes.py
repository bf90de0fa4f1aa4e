"""Every route's success path and its service-level error paths (404, 401, 413, 503)."""
from __future__ import annotations

import pytest

from service.routers.schemas import SEED_CLUSTER, SEED_LAYOUT, SEED_MODEL, SEED_TRAINING
from service.settings import Settings
from tests.service.conftest import post_admitted, problems

SEED = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"}


def test_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_reports_each_check(client):
    r = client.get("/readyz")
    body = r.json()
    assert body["checks"]["store"] is True
    assert r.status_code == (200 if all(body["checks"].values()) else 503)


def test_readyz_is_503_when_store_is_down(client, monkeypatch):
    monkeypatch.setattr(client.app.state.store, "state", lambda: "unreachable")
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["checks"]["store"] is False
    assert r.json()["store"] == "unreachable"


def test_presets_lists_every_kind(client):
    body = client.get("/v1/presets").json()
    assert "seed-70b" in body["models"] and "seed-512" in body["clusters"]
    assert "seed-300b" in body["training"] and "seed-gpu" in body["gpus"]


def test_estimate_seed_layout(client):
    """Seed plan, "Choose a first layout": TP8 + ZeRO-1 model state about 36.1 GB per GPU
    (17.5 + 17.5 + 1.1 GB with the exact 69.5B parameters: 35.84 GB), 0.77 s grad-sync bound.
    A 503 `saturated` is retried after its Retry-After (post_admitted): backpressure is
    test_saturated_is_503's subject, the figures are this test's."""
    r = post_admitted(client, "/v1/estimate", json={**SEED, "layout": SEED_LAYOUT})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["accounting"]["memory_per_gpu_bytes"]["total"] == pytest.approx(35.84e9, rel=0.01)
    # The per-layout figure is Megatron-Core's: N/8 params x (6 + 12/64) bytes (distributed optimizer).
    assert body["memory_per_gpu_bytes"]["model_state"] == 8_687_617_024 * (6 + 12 / 64)
    assert body["framework"] == "megatron-core"
    assert body["memory_recipe"]["mode"] == "--use-distributed-optimizer"
    assert body["communication"]["dp_grad_sync_lower_bound_s"] == pytest.approx(0.77, rel=0.02)
    assert body["batch"]["tokens_per_step"] == 4_194_304


def test_estimate_inline_objects_equal_presets(client):
    inline = client.post("/v1/estimate", json={"model": SEED_MODEL, "cluster": SEED_CLUSTER,
                                               "training": SEED_TRAINING, "layout": SEED_LAYOUT})
    preset = client.post("/v1/estimate", json={**SEED, "layout": SEED_LAYOUT})
    assert inline.status_code == preset.status_code == 200
    assert inline.json()["memory_per_gpu_bytes"] == preset.json()["memory_per_gpu_bytes"]


def test_cluster_gpu_may_name_a_gpu_preset(client):
    cluster = {**SEED_CLUSTER, "gpu": "seed-gpu", "unavailable_nodes": [0, 5]}
    r = client.post("/v1/estimate", json={**SEED, "cluster": cluster,
                                          "layout": {**SEED_LAYOUT, "dp": 62}})
    assert r.status_code == 200, r.text


def test_plan_create_get_and_report(client):
    r = client.post("/v1/plans", json=SEED)
    assert r.status_code == 201, r.text
    plan = r.json()
    assert r.headers["location"] == f"/v1/plans/{plan['id']}"
    for key in ("parameters", "memory", "flops", "time", "batch", "layouts", "communication"):
        assert key in plan
    again = client.get(f"/v1/plans/{plan['id']}")
    assert again.status_code == 200
    assert {k: v for k, v in again.json().items() if k != "limits"} == \
        {k: v for k, v in plan.items() if k != "limits"}
    page = client.get(plan["links"]["report"])
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    assert "<svg" in page.text


def test_plan_time_limit_is_capped(client):
    r = client.post("/v1/plans", json={**SEED, "options": {"time_limit_s": 999, "top_k": 2, "workers": 16}})
    assert r.status_code == 201, r.text
    limits = r.json()["limits"]
    # seed-512 flat graph: 512 GPUs + 64 NVSwitches + 512 NICs + 1 core = 1,089 vertices;
    # 512 x 3 links (GPU-NVSwitch, GPU-NIC, NIC-core) x 2 directions = 3,072 edges.
    assert limits.pop("work")["graph_elements"] == 1089 + 3072
    assert limits == {"time_limit_s": 5.0, "time_limit_cap_s": 5.0, "time_limit_capped": True,
                      "workers": 2, "deadline_s": 5.0}


@pytest.mark.parametrize("path", ("/v1/plans/0123456789abcdef0123456789abcdef",
                                  "/v1/plans/not-an-id/report", "/v1/plans/%2e%2e"))
def test_unknown_plan_id_is_404(client, path):
    r = client.get(path)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"


def test_bearer_token(make_client):
    client = make_client(api_token="s3cret")
    assert client.get("/healthz").status_code == 200          # probes stay open
    r = client.get("/v1/presets")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert client.get("/v1/presets", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = client.get("/v1/presets", headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200


def test_body_size_limit(make_client):
    client = make_client(max_body_bytes=2048)
    big = {**SEED, "model": {**SEED_MODEL, "name": "x" * 4000}}
    r = client.post("/v1/estimate", json={**big, "layout": SEED_LAYOUT})
    assert r.status_code == 413 and problems(r) == {"body": "too large"}


def test_body_size_limit_without_content_length(make_client):
    client = make_client(max_body_bytes=2048)

    def chunks():
        yield b'{"model": "' + b"x" * 1500
        yield b"y" * 1500 + b'"}'

    r = client.post("/v1/estimate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_saturated_is_503(make_client):
    """With every solve worker busy, a request waits queue_wait_s and then gets a 503."""

    client = make_client(max_concurrent_solves=1, queue_wait_s=0.05)
    pool = client.app.state.pool
    assert client.post("/v1/estimate", json={**SEED, "layout": SEED_LAYOUT}).status_code == 200
    held = client.portal.call(pool._idle.get)  # the one worker, taken out of the queue
    r = client.post("/v1/estimate", json={**SEED, "layout": SEED_LAYOUT})
    client.portal.call(pool._idle.put, held)
    assert r.status_code == 503 and r.json()["error"]["type"] == "saturated"
    assert r.headers["retry-after"] == "1"
    assert client.post("/v1/estimate", json={**SEED, "layout": SEED_LAYOUT}).status_code == 200


def test_an_idle_worker_is_taken_with_no_time_left(make_client):
    """A request that reaches the pool after its deadline while a worker is idle is not
    refused as saturated: Python 3.11's asyncio.wait_for(timeout=0) gives up before even a
    ready queue get() runs (service.workers.WorkerPool._take takes an idle worker at once).
    It either finishes or stops on its deadline, never 'busy'."""
    import time

    from service.workers import JobStopped

    client = make_client(max_concurrent_solves=1)
    pool, settings = client.app.state.pool, client.app.state.settings

    async def never() -> bool:
        return False

    async def late() -> str:
        try:
            await pool.run("estimate", {"body": {**SEED, "layout": SEED_LAYOUT}, "settings": settings},
                           time.monotonic() - 1.0, never)
        except JobStopped as exc:
            return exc.reason
        return "done"

    assert client.portal.call(late) in ("done", "deadline")
    assert client.post("/v1/estimate", json={**SEED, "layout": SEED_LAYOUT}).status_code == 200


def test_openapi_docs_and_examples(client):
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    for path in ("/v1/plans", "/v1/plans/{plan_id}", "/v1/plans/{plan_id}/report", "/v1/layouts",
                 "/v1/estimate", "/v1/presets", "/healthz", "/readyz"):
        assert path in spec["paths"], path
    schemas = spec["components"]["schemas"]
    assert schemas["PlanIn"]["examples"][0]["model"] == "seed-70b"
    assert schemas["EstimateIn"]["examples"][0]["layout"] == SEED_LAYOUT


def test_settings_from_env():
    s = Settings.from_env({"TRAINPLAN_API_TOKEN": "t", "TRAINPLAN_MAX_TIME_LIMIT_S": "7.5",
                           "TRAINPLAN_DATABASE_URL": "sqlite:///x.db", "UNRELATED": "1"})
    assert (s.api_token, s.max_time_limit_s, s.database_url) == ("t", 7.5, "sqlite:///x.db")
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="max_body_bytes"):
        Settings.from_env({"TRAINPLAN_MAX_BODY_BYTES": "ten"})


def test_serve_command_parses():
    from service.cli import build_parser

    args = build_parser().parse_args(["serve", "--host", "0.0.0.0", "--port", "9000"])
    assert (args.host, args.port) == ("0.0.0.0", 9000) and callable(args.run)


def test_only_probes_and_worker_routes_are_async():
    """Async endpoints are the probes (nothing slow) and the routes that hand their work to
    the solve workers; the store reads stay plain def (the threadpool)."""
    import inspect

    from fastapi.routing import APIRoute

    from service.routers import estimate, health, layouts, plans, presets

    api = [r for m in (estimate, health, layouts, plans, presets) for r in m.router.routes
           if isinstance(r, APIRoute)]
    assert len(api) == 9
    assert {(next(iter(r.methods)), r.path) for r in api if inspect.iscoroutinefunction(r.endpoint)} == {
        ("GET", "/healthz"), ("GET", "/readyz"), ("POST", "/v1/layouts"), ("POST", "/v1/plans"),
        ("POST", "/v1/estimate")}


@pytest.mark.parametrize("exc, status, kind", [
    ("infeasible", 422, "infeasible"), ("timeout", 503, "solver_timeout"), ("bug", 500, "internal"),
])
def test_solver_outcomes_map_to_http(client, monkeypatch, exc, status, kind):
    """The one handler's mapping, with the worker made to report each outcome (through the
    same error_dict/rebuild_error round trip a real worker's errors take)."""
    from service.jobs import error_dict, rebuild_error
    from topology.errors import InfeasibleError, SolverTimeoutError

    errors = {"infeasible": InfeasibleError("no layout fits", {"fixes": [{"gpus": 1024}], "inf": float("inf")}),
              "timeout": SolverTimeoutError("no layout found within 0.1 s"),
              "bug": RuntimeError("secret internals")}

    async def boom(*args, **kwargs):
        err = errors[exc]
        raise rebuild_error(error_dict(err) if exc != "bug" else {"class": "internal"})

    monkeypatch.setattr(client.app.state.pool, "run", boom)
    r = client.post("/v1/layouts", json=SEED)
    assert r.status_code == status and r.json()["error"]["type"] == kind
    if exc == "infeasible":  # non-finite numbers become null: the body stays valid JSON
        assert r.json()["error"]["explanation"] == {"fixes": [{"gpus": 1024}], "inf": None}
    if exc == "bug":
        assert "secret" not in r.text


def test_plan_nothing_fits_is_422_and_not_stored(make_client):
    client = make_client(max_time_limit_s=60)  # the explanation takes ~10-20 s (fix_more_gpus)
    cluster = {**SEED_CLUSTER, "nodes": 1}
    r = client.post("/v1/plans", json={**SEED, "model": "llama3-405b", "cluster": cluster,
                                       "options": {"time_limit_s": 5}})
    assert r.status_code == 422 and r.json()["error"]["type"] == "infeasible", r.text
    assert "location" not in r.headers


def test_estimate_equals_cli(client, capsys):
    """POST /v1/estimate returns what `trainplan estimate --format json` prints."""
    import json

    from service.cli import main

    assert main(["estimate", "--model", "seed-70b", "--cluster", "seed-512", "--training",
                 "seed-300b", "--layout", json.dumps(SEED_LAYOUT), "--format", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    http = client.post("/v1/estimate", json={**SEED, "layout": SEED_LAYOUT}).json()
    assert http == json.loads(json.dumps(cli))


def test_plan_layouts_equal_cli(make_client, capsys, tmp_path):
    """POST /v1/plans ranks the same layouts as `trainplan plan` (timings aside), also on an
    explicit fabric, where the CLI searches both rank orders (solver.layouts.default_plan_options)
    and the HTTP plan used to search one under the server's capped options: Llama 3 70B on 20
    nodes of the rail-optimized A100 SuperPOD, where tp-cp-pp-dp is rank 1 (TP4 PP5 CP2 DP4,
    32.504 s against 32.506 s in tp-cp-dp-pp, the old HTTP rank 1). No time limit is stated:
    each route's own default applies."""
    import json

    from service.cli import main
    from solver.plan import LAYOUT_FIELDS
    from topology.catalog import DATA

    preset = json.loads((DATA / "clusters" / "dgx-a100-superpod-rail-optimized.json").read_text())
    job = {"model": "llama3-70b", "cluster": {**{k: v for k, v in preset.items() if not k.startswith("_")},
                                              "nodes": 20},
           "training": {"tokens": 1e11, "seq_len": 4096, "global_batch_tokens": 4096 * 512}}
    for name in ("cluster", "training"):
        (tmp_path / f"{name}.json").write_text(json.dumps(job[name]))
    assert main(["plan", "--model", "llama3-70b", "--cluster", str(tmp_path / "cluster.json"), "--training",
                 str(tmp_path / "training.json"), "--format", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    client = make_client(max_time_limit_s=60)  # a loaded machine: the whole plan in 5 s is too tight
    http = client.post("/v1/plans", json=job).json()
    key = lambda plan: [tuple(e[k] for k in LAYOUT_FIELDS) for e in plan["layouts"]]  # noqa: E731
    assert key(http) == key(cli)
    assert http["layouts"][0]["rank_order"] == "tp-cp-pp-dp"
    for section in ("parameters", "memory", "flops", "time", "batch", "communication", "launch"):
        assert http[section] == cli[section], section
    # the launch both return is rank 1's: Megatron-LM's TP-PP-DP rank mapping for tp-cp-pp-dp
    assert http["launch"]["framework"] == "megatron-core" and "--use-tp-pp-dp-mapping" in http["launch"]["args"]
    assert http["launch"]["placement"]["order"] == "tp-cp-pp-dp"


def test_openapi_documents_the_error_body(client):
    spec = client.get("/openapi.json").json()
    post = spec["paths"]["/v1/layouts"]["post"]["responses"]
    assert post["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
    assert {"401", "413", "503"} <= set(post)


def test_small_max_top_k_keeps_default_requests_working(make_client):
    """TRAINPLAN_MAX_TOP_K 3 (below SearchOptions' default top_k 10): a request without
    top_k gets 3 layouts; one asking for 5 is a 422 naming options.top_k."""
    client = make_client(max_top_k=3)
    r = client.post("/v1/layouts", json=SEED)
    assert r.status_code == 200, r.text
    assert len(r.json()["layouts"]) == 3
    asked = client.post("/v1/layouts", json={**SEED, "options": {"top_k": 5}})
    assert asked.status_code == 422 and "options.top_k" in problems(asked)


def test_layouts_priced_over_http(client):
    """price_per_gpu_hour and currency in the body replace the training's and come back on
    every row's run (days, GPU-hours and cost with failures); a bad code is a 422 naming it."""
    r = client.post("/v1/layouts", json={**SEED, "price_per_gpu_hour": 3.0, "currency": "GBP",
                                         "options": {"top_k": 2}})
    assert r.status_code == 200, r.text
    for row in r.json()["layouts"]:
        assert row["run"]["currency"] == "GBP"
        assert row["run"]["cost"] == pytest.approx(3.0 * row["run"]["gpu_hours"])
    bad = client.post("/v1/layouts", json={**SEED, "currency": "pounds"})
    assert bad.status_code == 422 and "training.currency" in bad.text
