"""The HTTP routes take a calibrated profile (`profile`, the JSON `trainplan calibrate` writes)."""
from __future__ import annotations

from solver.cost.version import MODEL_VERSION

SEED = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
        "layout": {"tp": 8, "pp": 1, "dp": 64}}
PROFILE = {"schema_version": 1, "model_version": MODEL_VERSION, "framework": None,
           "constants": {"gemm_peak_fraction": 0.5}}


def test_estimate_uses_the_profile_and_carries_bands(client):
    shipped = client.post("/v1/estimate", json=SEED).json()
    slower = client.post("/v1/estimate", json={**SEED, "profile": PROFILE}).json()
    assert slower["step_time_s"] > shipped["step_time_s"]  # GEMMs at 0.5 of peak instead of 0.74
    assert slower["step_time_s_low"] < slower["step_time_s"] < slower["step_time_s_high"]


def test_a_mismatched_profile_is_422_naming_it(client):
    r = client.post("/v1/estimate", json={**SEED, "profile": {**PROFILE, "model_version": "0"}})
    assert r.status_code == 422
    assert "profile" in r.text and "cost model" in r.text
