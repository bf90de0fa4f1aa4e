"""Bad input gets a 4xx JSON error naming the field; nothing user-caused reaches a 500."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.routers.schemas import SEED_CLUSTER, SEED_LAYOUT, SEED_MODEL
from tests.service.conftest import problems

ROUTES = ("/v1/plans", "/v1/layouts", "/v1/estimate")


def _post_raw(client, path: str, raw: bytes):
    return client.post(path, content=raw, headers={"content-type": "application/json"})


@pytest.mark.parametrize("path", ROUTES)
def test_malformed_json_is_422_on_body(client, path):
    r = _post_raw(client, path, b'{"model": "seed-70b", "cluster": ')
    assert r.status_code == 422
    fields = problems(r)
    assert "body" in fields and "malformed JSON" in fields["body"]


@pytest.mark.parametrize("path", ROUTES)
def test_missing_fields_are_named(client, path):
    r = client.post(path, json={"options": {}} if path != "/v1/estimate" else {})
    assert r.status_code == 422
    fields = problems(r)
    for name in ("model", "cluster", "training"):
        assert fields[name] == "required field is missing"


def test_all_spec_problems_reported_together(client):
    bad_model = {**SEED_MODEL, "layers": -1}
    r = client.post("/v1/estimate", json={"model": bad_model, "cluster": "nope", "training": "seed-300b",
                                          "layout": {**SEED_LAYOUT, "zero_stage": 7}})
    assert r.status_code == 422
    fields = problems(r)
    assert "model.layers" in fields
    assert "unknown preset" in fields["cluster"]
    assert "layout.zero_stage" in fields


@pytest.mark.parametrize("body, field", [
    ({"model": {**SEED_MODEL, "hidden": 0}, "cluster": "seed-512"}, "model.hidden"),
    ({"model": "seed-70b", "cluster": "seed-512", "training": None}, "training"),
    ({"model": {**SEED_MODEL, "layers": 10**12}, "cluster": "seed-512"}, "model.layers"),
    ({"model": {**SEED_MODEL, "heads": "64"}, "cluster": "seed-512"}, "model.heads"),
    ({"model": {**SEED_MODEL, "layers": 80.5}, "cluster": "seed-512"}, "model.layers"),
    ({"model": "seed-70b", "cluster": {**SEED_CLUSTER, "nodes": -3}}, "cluster.nodes"),
    ({"model": "seed-70b", "cluster": {**SEED_CLUSTER, "nodes": 10**9}}, "cluster.nodes"),
    ({"model": "seed-70b", "cluster": {**SEED_CLUSTER, "gpu": {"name": "g", "memory_gb": -80,
                                       "peak_tflops": 1000, "hbm_gb_s": 3000}}}, "cluster.gpu.memory_gb"),
    ({"model": "seed-70b", "cluster": {**SEED_CLUSTER, "surprise": 1}}, "cluster.surprise"),
    ({"model": "seed-70b", "cluster": "seed-512", "training": {"seq_len": 8192}},
     "training.global_batch_tokens"),
    ({"model": "seed-70b", "cluster": "seed-512", "training": {"seq_len": -1, "global_batch_tokens": 1}},
     "training.seq_len"),
    ({"model": 42, "cluster": "seed-512"}, "model"),
    ({"model": ["seed-70b"], "cluster": "seed-512"}, "model"),
    ({"model": "../../etc/passwd", "cluster": "seed-512"}, "model"),
    ({"model": "seed-70b", "cluster": {**SEED_CLUSTER, "gpu": "../seed-gpu"}}, "cluster.gpu"),
    ({"model": "seed-70b", "cluster": "seed-512", "options": {"time_limit_s": -1}},
     "options.time_limit_s"),
    ({"model": "seed-70b", "cluster": "seed-512", "options": {"top_k": 1000}}, "options.top_k"),
    ({"model": "seed-70b", "cluster": "seed-512", "options": {"bogus": True}}, "options.bogus"),
    ({"model": "seed-70b", "cluster": "seed-512", "options": "fast"}, "options"),
    ({"model": "seed-70b", "cluster": "seed-512", "extra": 1}, "extra"),
])
@pytest.mark.parametrize("path", ("/v1/plans", "/v1/layouts"))
def test_bad_values_name_their_field(client, path, body, field):
    r = client.post(path, json={"training": "seed-300b", **body})
    assert r.status_code == 422, r.text
    assert field in problems(r), r.text


@pytest.mark.parametrize("layout, field", [
    ({**SEED_LAYOUT, "tp": 3}, "layout.tp"),                 # 3 does not divide 64 heads
    ({**SEED_LAYOUT, "dp": 65}, "layout"),                   # 520 GPUs > 512
    ({**SEED_LAYOUT, "micro_batch": 0}, "layout.micro_batch"),
    ({**SEED_LAYOUT, "recompute": "sometimes"}, "layout.recompute"),
    ("tp8", "layout"),
])
def test_estimate_bad_layouts(client, layout, field):
    r = client.post("/v1/estimate", json={"model": "seed-70b", "cluster": "seed-512",
                                          "training": "seed-300b", "layout": layout})
    assert r.status_code == 422, r.text
    assert field in problems(r)


def test_nan_and_infinity_literals_are_rejected(client):
    raw = json.dumps({"model": "seed-70b", "cluster": "seed-512",
                      "training": {"seq_len": 8192, "global_batch_tokens": 4194304}})
    raw = raw.replace("4194304", "NaN").encode()
    r = _post_raw(client, "/v1/plans", raw)
    assert 400 <= r.status_code < 500 and problems(r)
    r = client.post("/v1/layouts", content=b'{"model": "seed-70b", "cluster": "seed-512", "training": '
                    b'"seed-300b", "options": {"time_limit_s": Infinity}}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 422 and "options.time_limit_s" in problems(r)


@pytest.mark.parametrize("raw", [b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe", b"null", b"1e400",
                                 b'"seed-70b"', b'{"model": ' + b"[" * 5000 + b"]" * 5000 + b"}"])
def test_odd_bodies_are_422_on_body(client, raw):
    r = _post_raw(client, "/v1/estimate", raw)
    assert r.status_code == 422 and "body" in problems(r), r.text


def test_unknown_route_and_method_are_json(client):
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and problems(r) == {}
    r = client.get("/v1/layouts")
    assert r.status_code == 405 and r.json()["error"]["type"] == "method_not_allowed"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8)
FIELDS = st.sampled_from(["model", "cluster", "training", "options", "layout"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(ROUTES), field=FIELDS, value=JSON_VALUES)
def test_fuzzed_field_values_never_500(client, path, field, value):
    """Random JSON in one field of an otherwise valid body: a 2xx or a 4xx JSON error."""
    body = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
            "options": {"top_k": 1, "time_limit_s": 0.5}}
    if path == "/v1/estimate":
        body = {k: v for k, v in body.items() if k != "options"} | {"layout": SEED_LAYOUT}
    body[field] = value
    r = client.post(path, json=body)
    assert r.status_code < 500 or r.json()["error"]["type"] in ("saturated", "solver_timeout"), r.text
    if r.status_code >= 400:
        problems(r)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=64))
def test_fuzzed_raw_bodies_never_500(client, raw):
    r = _post_raw(client, "/v1/estimate", raw)
    assert 400 <= r.status_code < 500, r.text
    problems(r)


@pytest.mark.parametrize("path", ROUTES)
def test_cluster_over_server_cap_is_422(make_client, path):
    client = make_client(max_cluster_gpus=256)
    body = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"}
    if path == "/v1/estimate":
        body["layout"] = SEED_LAYOUT
    r = client.post(path, json=body)
    assert r.status_code == 422 and "cluster.nodes" in problems(r)
