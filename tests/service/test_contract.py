"""HTTP contract details: 415 for non-JSON bodies, 408 for a stalled body, start-up errors
as one line per bad setting, the warning for a tokenless non-loopback server."""
from __future__ import annotations

import argparse

from service.commands import serve

SEED = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"}


def test_non_json_body_is_415(client):
    for kind in ("text/plain", "application/x-www-form-urlencoded", ""):
        r = client.post("/v1/layouts", content=b'{"model": "seed-70b"}',
                        headers={"content-type": kind} if kind else {})
        assert r.status_code == 415, (kind, r.text)
        assert r.json()["error"]["type"] == "unsupported_media_type"
        assert r.json()["error"]["problems"][0]["field"] == "content-type"
    ok = client.post("/v1/estimate", content=b"{}",
                     headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code == 422  # JSON gets through to validation


def test_stalled_body_is_408(live_server_factory):
    """A client that sends headers and part of its body, then stalls: 408 after the read
    timeout (over a real socket: the test client would buffer the body first)."""
    import socket
    from urllib.parse import urlsplit

    base = urlsplit(live_server_factory(body_read_timeout_s=0.3))
    with socket.create_connection((base.hostname, base.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/estimate HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\"")
        reply = ""
        while '"problems"' not in reply and (chunk := sock.recv(65536).decode()):
            reply += chunk
    assert reply.startswith("HTTP/1.1 408") and '"type": "timeout"' in reply, reply


def _args(host: str) -> argparse.Namespace:
    return argparse.Namespace(host=host, port=1, log_level="warning")


def test_bad_settings_are_one_line_each(monkeypatch, capsys):
    monkeypatch.setenv("TRAINPLAN_MAX_BODY_BYTES", "ten")
    monkeypatch.setenv("TRAINPLAN_MAX_TOP_K", "0")
    assert serve.run(_args("127.0.0.1")) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in "".join(lines)
    assert lines[0].startswith("error: TRAINPLAN_MAX_BODY_BYTES: ")
    assert lines[1].startswith("error: TRAINPLAN_MAX_TOP_K: ")


def test_warns_without_token_on_a_public_address(monkeypatch, capsys):
    import uvicorn

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))
    monkeypatch.setenv("TRAINPLAN_DATABASE_URL", "sqlite://")
    monkeypatch.delenv("TRAINPLAN_API_TOKEN", raising=False)
    assert serve.run(_args("0.0.0.0")) == 0
    assert "without TRAINPLAN_API_TOKEN" in capsys.readouterr().err
    assert serve.run(_args("127.0.0.1")) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TRAINPLAN_API_TOKEN", "t")
    assert serve.run(_args("0.0.0.0")) == 0 and capsys.readouterr().err == ""
    assert len(calls) == 3


def test_docs_are_self_hosted(client):
    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        assert "/docs-assets/" in html and "cdn" not in html.lower() and "googleapis" not in html
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
        r = client.get(f"/docs-assets/{asset}")
        assert r.status_code == 200 and len(r.content) > 10_000


def test_openapi_types_the_spec_fields(client):
    """Request spec fields are the server's own models, presets as enums; success bodies
    typed; error bodies JSON (also on the HTML report route)."""
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    model = schemas["LayoutsIn"]["properties"]["model"]["anyOf"]
    assert "seed-70b" in model[0]["enum"] and model[1] == {"$ref": "#/components/schemas/ModelSpec"}
    assert schemas["ModelSpec"]["properties"]["layers"]["type"] == "integer"
    gpu = schemas["ClusterSpec"]["properties"]["gpu"]["anyOf"]
    assert "h100-sxm-80gb" in gpu[0]["enum"]
    assert schemas["EstimateIn"]["properties"]["layout"] == {
        "$ref": "#/components/schemas/LayoutSpec", "description": "The layout (Megatron-LM terms)."}
    post = doc["paths"]["/v1/layouts"]["post"]["responses"]
    assert post["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/LayoutsOut")
    report = doc["paths"]["/v1/plans/{plan_id}/report"]["get"]["responses"]["404"]["content"]
    assert list(report) == ["application/json"]


def test_security_declared_only_with_a_token(make_client):
    open_doc = make_client().get("/openapi.json").json()
    assert "securitySchemes" not in open_doc["components"]
    assert not any("security" in op for p in open_doc["paths"].values() for op in p.values())
    closed = make_client(api_token="t").get("/openapi.json").json()
    assert "HTTPBearer" in closed["components"]["securitySchemes"]
    assert closed["paths"]["/v1/layouts"]["post"]["security"] == [{"HTTPBearer": []}]
