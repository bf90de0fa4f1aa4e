"""What searching like `trainplan plan` costs POST /v1/plans: the plan a solve worker builds
(solver.plan.build_plan, as service.jobs.plan_job runs it, in-process: no pool, no transport),
timed with the options the HTTP plan used to search with (service.routers.solving.search_options:
one rank order, the server's 2 s /v1/layouts default) and with its options now
(plan_search_options: the CLI's, both rank orders on an explicit fabric, 10 s), under the default
server settings. Prints JSON: per problem and options, wall seconds of each repeat (the first
one cold), the main search's seconds and rank 1.

    .venv/bin/python -m benchmarks.plan_latency [--repeats 2]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from benchmarks.audit_rank1 import Problem

PROBLEMS = [Problem("llama3-70b", "dgx-a100-superpod-rail-optimized", 20, 4096, 512),
            Problem("llama3-70b", "dgx-h100-superpod-rail-optimized", 32, 8192, 512),
            Problem("hf:mixtral-8x7b", "dgx-h100-superpod-rail-optimized", 32, 4096, 512),
            Problem("llama3-70b", "gb200-nvl72-superpod", 36, 8192, 512, fp8=True),
            Problem("llama3-70b", "dgx-h100-superpod", 32, 8192, 512)]  # flat: the options do not differ


def _options(which: str, cluster: Any) -> Any:
    from service.routers.solving import plan_search_options, search_options
    from service.settings import Settings

    if which == "before":
        return search_options(None, Settings())[0]
    return plan_search_options(None, cluster, Settings())[0]


def measure(p: Problem, which: str, repeats: int) -> dict[str, Any]:
    """Wall seconds of build_plan for `p` under the HTTP plan's options `which` (before / now)."""
    from benchmarks.audit_rank1 import _spec
    from solver.plan import build_plan, layout_fields

    model, cluster, training = _spec(p, "megatron-core")
    options = _options(which, cluster)
    walls, plan = [], {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        plan = build_plan(model, cluster, training, search_options=options)
        walls.append(round(time.perf_counter() - t0, 2))
    return {"problem": p.label, "options": which, "rank_orders": list(options.rank_orders),
            "time_limit_s": options.time_limit_s, "plan_s": walls,
            "search_s": round(plan["search"]["seconds"], 2), "status": plan["search"]["status"],
            "rank1": layout_fields(plan["layouts"][0])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    rows = [measure(p, which, args.repeats) for p in PROBLEMS for which in ("before", "now")]
    print(json.dumps({"load_average": os.getloadavg(), "rows": rows}, indent=1, default=list))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
