"""HTTP: a mixture-of-experts config.json the readers do not understand, or one the step-time
model does not cover yet, is a 4xx naming the field, never a dense plan; a MoE model the
step-time model covers is estimated."""
from __future__ import annotations

import json
from pathlib import Path

from tests.service.conftest import problems

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def test_moe_configs_are_refused_by_field(client):
    cfg = json.loads((HF / "mixtral-8x7b" / "config.json").read_text())
    r = client.post("/v1/plans", json={"model": {**cfg, "moe_capacity": 1.0}, "cluster": "seed-512",
                                       "training": "seed-300b"})
    assert r.status_code == 422 and "model.moe_capacity" in problems(r)
    # MoE layers are in the step-time model: an estimate with expert parallelism.
    r = client.post("/v1/estimate", json={"model": cfg, "cluster": "seed-512", "training": "seed-300b",
                                          "layout": {"tp": 8, "dp": 64, "ep": 8, "sequence_parallel": True}})
    assert r.status_code == 200 and r.json()["moe"]["ep"] == 8 and r.json()["layout"]["ep"] == 8
    # DeepSeek-V3 (MLA, MTP, shared experts): estimated too, its EP group named.
    ds = json.loads((HF / "deepseek-v3" / "config.json").read_text())
    r = client.post("/v1/estimate", json={"model": ds, "cluster": "seed-512", "training": "seed-300b",
                                          "layout": {"tp": 1, "pp": 16, "dp": 32, "ep": 32}})
    assert r.status_code == 200 and r.json()["moe"]["ep_group"]["size"] == 32
