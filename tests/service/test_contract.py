"""HTTP contract details: 415 for non-JSON bodies, 408 for a stalled or dripped body and for
slow headers (slowloris), start-up errors
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


def _drip(base: str, head: bytes, rest: bytes, every_s: float, limit_s: float) -> tuple[str, float]:
    """Send `head` at once, then `rest` a byte every `every_s` (never a pause the server
    could call idle) until the server answers or closes; (reply, seconds until it did)."""
    import socket
    import time
    from urllib.parse import urlsplit

    url = urlsplit(base)
    t0 = time.monotonic()  # before connecting: the server's deadline may start at its accept
    with socket.create_connection((url.hostname, url.port), timeout=limit_s) as sock:
        sock.sendall(head)
        sock.settimeout(every_s)
        reply = b""
        for i in range(int(limit_s / every_s)):
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                chunk = None
            except ConnectionResetError:  # closed with our dripped bytes unread
                break
            if chunk == b"":
                break
            reply += chunk or b""
            try:
                sock.sendall(rest[i % len(rest):i % len(rest) + 1])
            except OSError:  # closed by the server
                break
        return reply.decode(errors="replace"), time.monotonic() - t0


def test_slow_headers_are_cut_off(live_server_factory):
    """Slowloris: headers a byte every 50 ms (without the head deadline this holds the
    connection as long as the client likes). With a 0.5 s deadline: 408 and closed, after
    at least 0.5 s and well inside the 5 s keep-alive; a silent connection is closed too;
    a kept-alive connection idle longer than the deadline still serves its next request."""
    import socket
    import time
    from urllib.parse import urlsplit

    base = live_server_factory(header_read_timeout_s=0.5)
    reply, seconds = _drip(base, b"GET /healthz HTTP/1.1\r\n", b"X-Slow: aaaaaaaa\r\n", 0.05, 20)
    assert reply.startswith("HTTP/1.1 408") and '"field": "headers"' in reply, reply
    assert 0.5 <= seconds < 4.0, seconds
    url = urlsplit(base)
    t0 = time.monotonic()  # before connecting: under load the server may accept (and start
    # its deadline) before this thread runs again after the handshake (0.497 s seen once)
    with socket.create_connection((url.hostname, url.port), timeout=20) as sock:
        assert sock.recv(65536).startswith(b"HTTP/1.1 408")  # sent nothing at all
        assert 0.5 <= time.monotonic() - t0 < 4.0
        assert sock.recv(65536) == b""  # and closed
    with socket.create_connection((url.hostname, url.port), timeout=20) as sock:
        for _ in range(2):  # keep-alive: the idle second is uvicorn's (5 s), not the head's
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while not reply.endswith(b'{"status":"ok"}'):
                chunk = sock.recv(65536)
                assert chunk, f"closed after {reply!r}"
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 200")
            time.sleep(1.0)


def test_dripped_body_is_408_within_the_body_deadline(live_server_factory):
    """A body sent a byte every 50 ms (each piece in time) is cut off once the whole body
    has taken longer than body_read_timeout_s (0.5 s): 408."""
    base = live_server_factory(body_read_timeout_s=0.5)
    head = (b"POST /v1/estimate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\n\r\n")
    reply, seconds = _drip(base, head, b" ", 0.05, 20)
    assert reply.startswith("HTTP/1.1 408") and '"type": "timeout"' in reply, reply
    assert 0.5 <= seconds < 4.0, seconds


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
