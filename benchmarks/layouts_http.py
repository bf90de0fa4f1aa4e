"""Latency of POST /v1/layouts for the seed problem, in-process over TestClient.

Prints JSON: median / p90 / min seconds over repeats (first call reported apart: it pays
imports and cache warm-up). Target: median < 1 s on 2 cores (issue 6, "Done when").
Run: python -m benchmarks.layouts_http [--repeats N] [--top-k K]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--top-k", type=int, default=10)
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    body = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
            "options": {"top_k": args.top_k}}
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(database_url=f"sqlite:///{tmp}/plans.db"))
        with TestClient(app) as client:
            seconds, status, n_layouts = [], None, 0
            for _ in range(args.repeats + 1):
                t0 = time.perf_counter()
                r = client.post("/v1/layouts", json=body)
                seconds.append(time.perf_counter() - t0)
                status, n_layouts = r.status_code, len(r.json().get("layouts", []))
        app.state.store.close()
    warm = sorted(seconds[1:])
    print(json.dumps({
        "benchmark": "POST /v1/layouts seed-70b on seed-512 (TestClient, in-process)",
        "status": status, "layouts": n_layouts, "top_k": args.top_k, "repeats": len(warm),
        "first_call_s": round(seconds[0], 4), "median_s": round(statistics.median(warm), 4),
        "p90_s": round(warm[int(0.9 * (len(warm) - 1))], 4), "min_s": round(warm[0], 4),
        "target_s": 1.0, "meets_target": statistics.median(warm) < 1.0 and status == 200,
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
