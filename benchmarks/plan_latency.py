"""What searching like `trainplan plan` costs POST /v1/plans: the plan a solve worker builds
(service.routers.solving.launched_plan, as service.jobs.plan_job runs it, in-process: no pool,
no transport) and its report (service.routers.solving.report_data, the HTML page and the
Markdown of `trainplan plan`), under the default server settings, timed phase by phase.

Options: `now` (default) the plan's (plan_search_options: the CLI's, both rank orders on an
explicit fabric, 10 s); `before` the options the HTTP plan used to search with
(service.routers.solving.search_options: one rank order, the server's 2 s /v1/layouts default).

Prints JSON: the load average before and after, per problem and options the wall and CPU
seconds (this process's, time.process_time: on a loaded machine the wall time is the CPU time
stretched by the other processes) of each repeat (the first one cold) and, for the last repeat,
its phases: the main search (wall, and per rank order its tables / optimize / window seconds
and rows), the seed ladder's ranking (solver.layouts.ladder_versus_best: an estimate and
solver.search.api.layout_rank), each scaling-grid row's search (solver.plan_stages._grid_point,
by GPUs), the launch export, the report data and its rendering; `other_s` is the rest of the
plan (accounting, risk, stages).

    .venv/bin/python -m benchmarks.plan_latency [--repeats 2] [--only qwen3] [--options now before]
    .venv/bin/python -m benchmarks.plan_latency --only qwen3 --profile /tmp/plan.prof  # cProfile
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.audit_rank1 import Problem

PROBLEMS = [Problem("llama3-70b", "dgx-a100-superpod-rail-optimized", 20, 4096, 512),
            Problem("llama3-70b", "dgx-h100-superpod-rail-optimized", 32, 8192, 512),
            Problem("hf:mixtral-8x7b", "dgx-h100-superpod-rail-optimized", 32, 4096, 512),
            Problem("hf:qwen3-30b-a3b", "dgx-h100-superpod-rail-optimized", 32, 4096, 512),
            Problem("llama3-70b", "gb200-nvl72-superpod", 36, 8192, 512, fp8=True),
            Problem("llama3-70b", "dgx-h100-superpod", 32, 8192, 512)]  # flat: the options do not differ


def _options(which: str, cluster: Any) -> Any:
    from service.routers.solving import plan_search_options, search_options
    from service.settings import Settings

    if which == "before":
        return search_options(None, Settings())[0]
    return plan_search_options(None, cluster, Settings())[0]


@contextlib.contextmanager
def _timed(module: Any, name: str, record: Callable[[tuple, dict, Any, float], None]) -> Iterator[None]:
    """module.name wrapped for the block: each call's (args, kwargs, result, seconds) recorded."""
    fn = getattr(module, name)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        record(args, kwargs, out, time.perf_counter() - t0)
        return out

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, fn)


@contextlib.contextmanager
def phase_probes(phases: dict[str, Any]) -> Iterator[None]:
    """Fill `phases` with the seconds of the plan's parts while the block runs (see module doc)."""
    import service.launchers as launchers
    import solver.layouts as layouts
    import solver.plan_stages as stages

    phases.update(main_search_s=0.0, ladder_rank_s=0.0, grid=[], launch_s=0.0)

    def main(args, kwargs, out, s):
        phases["main_search_s"] += s
        phases["main_orders"] = out[0].get("phases")

    def grid(args, kwargs, out, s):
        phases["grid"].append({"gpus": args[4], "s": round(s, 3), "reused": args[4] == args[3].get("gpus")
                               and "time_breakdown_s" in args[3]})

    def add(key):
        return lambda args, kwargs, out, s: phases.__setitem__(key, phases[key] + s)

    with contextlib.ExitStack() as stack:
        stack.enter_context(_timed(layouts, "searched_layouts", main))
        stack.enter_context(_timed(layouts, "ladder_versus_best", add("ladder_rank_s")))
        stack.enter_context(_timed(stages, "_grid_point", grid))
        stack.enter_context(_timed(launchers, "plan_launch", add("launch_s")))
        yield


def one_plan(model: Any, cluster: Any, training: Any, options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(plan, phases) of one plan and its report, as a solve worker makes them."""
    from service.render_md import render_plan
    from service.report_html import render_report
    from service.routers.errors import jsonable
    from service.routers.solving import launched_plan, report_data

    phases: dict[str, Any] = {}
    t0 = time.perf_counter()
    with phase_probes(phases):
        plan = jsonable(launched_plan(model, cluster, training, options))
    phases["plan_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    report = jsonable(report_data(plan, model, cluster))
    phases["report_data_s"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    render_report(plan, report, "benchmark")
    render_plan(plan)
    phases["render_s"] = time.perf_counter() - t2
    grid_s = sum(g["s"] for g in phases["grid"])
    phases["other_s"] = phases["plan_s"] - phases["main_search_s"] - phases["ladder_rank_s"] - grid_s \
        - phases["launch_s"]
    return plan, phases


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def measure(p: Problem, which: str, repeats: int, profile: str | None = None) -> dict[str, Any]:
    """Wall seconds of the plan and report of `p` under the HTTP plan's options `which`
    (before / now), each repeat; the last repeat's phases (cProfiled into `profile` if given)."""
    from benchmarks.audit_rank1 import _spec
    from solver.plan import layout_fields

    model, cluster, training = _spec(p, "megatron-core")
    options = _options(which, cluster)
    walls: list[float] = []
    cpus: list[float] = []
    plan: dict[str, Any] = {}
    phases: dict[str, Any] = {}
    for i in range(repeats):
        prof = None
        if profile is not None and i == repeats - 1:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        t0, c0 = time.perf_counter(), time.process_time()
        plan, phases = one_plan(model, cluster, training, options)
        walls.append(round(time.perf_counter() - t0, 2))
        cpus.append(round(time.process_time() - c0, 2))
        if prof is not None and profile is not None:
            prof.disable()
            prof.dump_stats(profile)
    return {"problem": p.label, "options": which, "rank_orders": list(options.rank_orders),
            "time_limit_s": options.time_limit_s, "wall_s": walls, "cpu_s": cpus, "phases": _rounded(phases),
            "search_s": round(plan["search"]["seconds"], 2), "status": plan["search"]["status"],
            "rank1": layout_fields(plan["layouts"][0])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", default=None, help="problems whose label contains this text")
    ap.add_argument("--options", nargs="+", choices=("now", "before"), default=["now"])
    ap.add_argument("--profile", default=None, help="cProfile the last repeat into this file "
                                                    "(with --only naming one problem)")
    args = ap.parse_args(argv)
    problems = [p for p in PROBLEMS if args.only is None or args.only in p.label]
    if args.profile and len(problems) * len(args.options) != 1:
        ap.error("--profile needs exactly one problem (--only) and one --options")
    load = os.getloadavg()
    rows = []
    for p in problems:
        for which in args.options:
            rows.append(measure(p, which, args.repeats, args.profile))
            print(f"{p.label} {which}: wall {rows[-1]['wall_s']} s, CPU {rows[-1]['cpu_s']} s", file=sys.stderr)
    print(json.dumps({"load_average_before": load, "load_average_after": os.getloadavg(),
                      "cpus": os.cpu_count(), "rows": rows}, indent=1, default=list))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
