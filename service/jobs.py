"""What a solve worker runs: the whole of a request after FastAPI's body check (spec parsing,
admission, topology, tables, search, explanation, exports), plus the worker loop itself.

Everything here runs inside a worker process (service.workers), so the service's event loop
never waits on it. Results are plain JSON values; PlannerErrors travel back as dicts and
are raised again in the server (`rebuild_error`), so the error handlers see what they
always saw. Progress is reported as named stages ("parse", "admit", "search", ...), which
a 504 quotes back to the client.
"""
from __future__ import annotations

import ctypes
import gc
import json
import logging
import os
import signal
import sys
from types import SimpleNamespace
from typing import Any
from collections.abc import Callable

from service.admission import OverCapacity
from topology import errors as _errors

log = logging.getLogger("trainplan.worker")
_report: Callable[[str], None] = lambda name: None  # noqa: E731  (set per job in a worker)


def stage(name: str) -> None:
    """Tell the server this job reached stage `name` (no-op outside a worker)."""
    _report(name)


def _inputs(body: dict[str, Any], settings, plan: bool = False, profile: Any = None) -> tuple:
    """(model, cluster, training, options, limits, the search domains admission computed);
    `plan`: a plan's search options (service.routers.solving.plan_search_options), admitted on
    its table builds too (`profile`: its calibrated profile)."""
    from service.admission import admit_plan, admit_search
    from service.routers.common import search_inputs

    stage("parse")
    fields = SimpleNamespace(**{"options": None, **body})
    model, cluster, training, options, limits = search_inputs(fields, settings, plan)
    stage("admit")
    work, domains = admit_search(model, cluster, training, options, settings)
    if plan:  # a plan's table builds against the deadline (service.admission.admit_plan)
        work = {**work, **admit_plan(model, cluster, training, options, settings,
                                     None if profile is None else profile.options)}
    stage("search")
    return model, cluster, training, options, {**limits, "deadline_s": settings.max_time_limit_s,
                                               "work": work}, domains


def _with_exports(entry: dict[str, Any], model, cluster, training) -> dict[str, Any]:
    from service.launchers import BLOCKS, launchers, rank_placement
    from solver.specs import LayoutSpec

    # Every LayoutSpec field the entry carries: rank_order decides the placement and
    # Megatron's rank mapping, pipeline_layers an uneven split.
    layout = LayoutSpec.model_validate({k: entry[k] for k in LayoutSpec.model_fields if k in entry},
                                       strict=False)
    placement = rank_placement(cluster, layout)
    split = entry.get("pipeline_split")
    exports = launchers(model, training, layout, placement, split)
    # `launch`: the block of the framework the training spec names (a refusal names its rule)
    return {**entry, "launchers": exports,
            "launch": {"framework": training.framework, **exports[BLOCKS[training.framework]]},
            "placement": placement}


def _profile(body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(body without `profile`, the parsed profile or None). Raises: SpecError (422)."""
    from solver.cost.profile import parse_profile

    rest = {k: v for k, v in body.items() if k != "profile"}
    raw = body.get("profile")
    return rest, None if raw is None else parse_profile(raw, "profile")


def _checked(profile: Any, training: Any) -> Any:
    from solver.cost.profile import check_framework

    return check_framework(profile, training.framework)


def layouts_job(body: dict[str, Any], settings) -> dict[str, Any]:
    """POST /v1/layouts: ranked layouts with launcher exports and placement (values that
    `encoded` turns into the body)."""
    from service.routers import solving

    body, profile = _profile(body)
    model, cluster, training, options, limits, domains = _inputs(body, settings)
    result = solving.run_search(model, cluster, training, options, _checked(profile, training),
                                domains)
    stage("exports")
    result["layouts"] = [_with_exports(e, model, cluster, training)
                         for e in result.get("layouts", [])]
    return {**result, "limits": limits}


def plan_job(body: dict[str, Any], settings) -> dict[str, Any]:
    """POST /v1/plans: {asked, plan, report, limits} (the server stores them)."""
    from service.routers import solving
    from service.routers.errors import jsonable

    body, profile = _profile(body)
    model, cluster, training, options, limits, _domains = _inputs(body, settings, plan=True, profile=profile)
    plan = jsonable(solving.run_plan(model, cluster, training, options, _checked(profile, training)))
    stage("report")
    report = jsonable(solving.report_data(plan, model, cluster))
    asked = {"model": model.model_dump(mode="json"), "cluster": cluster.model_dump(mode="json"),
             "training": training.model_dump(mode="json"),
             "options": options.model_dump(mode="json")}
    return {"asked": asked, "plan": plan, "report": report, "limits": limits}


def estimate_job(body: dict[str, Any], settings) -> dict[str, Any]:
    """POST /v1/estimate: accounting and prediction for one layout (values that `encoded`
    turns into the body)."""
    from service.admission import admit
    from service.routers import solving
    from service.routers.common import problem_specs

    from solver.presets import priced_training

    stage("parse")
    body, profile = _profile(body)
    price = {k: body.pop(k, None) for k in ("price_per_gpu_hour", "currency")}
    specs = problem_specs(settings, **body)
    specs["training"] = priced_training(specs["training"], **price)
    stage("admit")
    admit(specs["model"], specs["cluster"], specs["training"], None, settings)
    stage("estimate")
    return solving.run_estimate(specs["model"], specs["cluster"], specs["training"],
                                specs["layout"], _checked(profile, specs["training"]))


def encoded(value: Any) -> bytes:
    """`service.routers.errors.jsonable(value)` as the bytes Starlette's JSONResponse would
    send (compact separators, UTF-8), made in the worker: the server only copies them to the
    socket, and the pipe carries one bytes object instead of a pickled tree of dicts.

    json.dumps walks `value` once, converting what JSON lacks as jsonable does (_plain); only
    when it meets a non-finite float (JSON has none: jsonable writes null) or a key it cannot
    write is the tree copied by jsonable first. Result keys are strings: the bytes are
    jsonable's (a /v1/layouts body: about 1 ms instead of 5)."""
    try:
        return _dumps(value, default=_plain)
    except (ValueError, TypeError):
        from service.routers.errors import jsonable

        return _dumps(jsonable(value))


def _dumps(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=None,
                      separators=(",", ":"), default=default).encode("utf-8")


def _plain(obj: Any) -> Any:
    """What jsonable makes of a value json.dumps cannot write (sets, numpy scalars, objects
    with as_dict or model_dump, else its str)."""
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    return str(obj)


# layouts and estimate answer the encoded body (bytes); plans answers values the server stores
JOBS: dict[str, Callable[..., Any]] = {
    "layouts": lambda **kw: encoded(layouts_job(**kw)), "plans": plan_job,
    "estimate": lambda **kw: encoded(estimate_job(**kw))}


# ---- errors across the pipe -----------------------------------------------------------------
_ERROR_CLASSES = {cls.__name__: cls for cls in (
    _errors.PlannerError, _errors.SpecError, _errors.UnknownPresetError,
    _errors.InfeasibleError, _errors.SolverTimeoutError, OverCapacity)}


def error_dict(exc: _errors.PlannerError) -> dict[str, Any]:
    """A PlannerError as plain values (its class by name; subclasses by their nearest base)."""
    cls = next(c for c in type(exc).__mro__ if c.__name__ in _ERROR_CLASSES)
    return {"class": cls.__name__, "message": exc.message,
            "problems": [p.as_dict() for p in exc.problems],
            "explanation": getattr(exc, "explanation", None)}


def rebuild_error(data: dict[str, Any]) -> Exception:
    """The exception `error_dict` described (RuntimeError for a worker's internal error)."""
    if data.get("class") not in _ERROR_CLASSES:
        return RuntimeError(data.get("message", "internal error in a solve worker"))
    problems = [_errors.Problem(p["field"], p["reason"]) for p in data["problems"]]
    if data["class"] == "InfeasibleError":
        exc = _errors.InfeasibleError(data["message"], data["explanation"])
        exc.problems = problems
        return exc
    cls: Any = _ERROR_CLASSES[data["class"]]  # PlannerError(message, problems) and subclasses
    return cls(data["message"], problems)


# ---- the worker process ---------------------------------------------------------------------
def trim_caches() -> int:
    """Clear every cache of the topology/solver/service modules (functools caches: graphs,
    fabrics, placements, cost terms; service.tables' cost tables) and hand freed heap back
    to the OS; returns caches cleared."""
    cleared = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith(("topology", "solver", "service")) or module is None:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type):  # a cache's class, not a cache (service.tables)
                continue
            if callable(getattr(value, "cache_clear", None)) and hasattr(value, "cache_info"):
                value.cache_clear()
                cleared += 1
    gc.collect()
    try:  # glibc: return freed arenas to the OS, so RSS reflects the clear
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return cleared


def _run_one(kind: str, payload: dict[str, Any]) -> tuple:
    try:
        return ("done", JOBS[kind](**payload))
    except _errors.PlannerError as exc:
        return ("error", error_dict(exc))
    except Exception:  # a bug: logged here with its traceback, a 500 in the server
        log.exception("solve worker: unexpected error in job %s", kind)
        return ("error", {"class": "internal", "message": "internal error in a solve worker"})


def batch_priority() -> bool:
    """Mark this process SCHED_BATCH (Linux): it keeps its full fair share of the CPU, but
    the scheduler treats it as CPU-bound and gives it a small penalty when it wakes up, so
    the event loop (probes, replies) is not made to wait behind a solve (sched(7),
    SCHED_BATCH; any process may choose it for itself, no privilege needed). `nice 5`, used
    before, cost the workers two thirds of their share against every nice-0 process on the
    machine: nice 5 weighs 335 against nice 0's 1024 (kernel/sched/core.c,
    sched_prio_to_weight). Returns False where the policy is not available."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        return False
    return True


def worker_main(conn, max_rss_bytes: int) -> None:
    """Serve jobs from `conn` until it closes. Above 3/4 of `max_rss_bytes` after a job the
    caches are trimmed (the server replaces a worker still above the budget)."""
    from service.workers import rss_bytes

    global _report
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops workers itself
    batch_priority()
    _report = lambda name: conn.send(("stage", name))  # noqa: E731
    conn.send(("ready",))  # imports done: the pool may hand this worker a job
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        outcome = _run_one(kind, payload)
        if rss_bytes(os.getpid()) > 0.75 * max_rss_bytes:
            trim_caches()
        conn.send(outcome)
