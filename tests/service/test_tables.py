"""The solve workers' cost-table cache (service.tables): a repeated problem is answered from
its tables with the same result, inputs the tables do not read share an entry, and the cache
is bounded and cleared with the worker's other caches."""
from __future__ import annotations

from service.jobs import trim_caches
from service.routers.solving import run_search
from service.tables import TABLES, TableCache
from solver.presets import load_model, load_training
from solver.search import search_layouts
from solver.search.options import SearchOptions
from topology.catalog import load_cluster

MODEL, CLUSTER, TRAINING = load_model("seed-70b"), load_cluster("seed-512"), load_training("seed-300b")


def _ranked(result: dict) -> list[tuple]:
    return [(e["tp"], e["pp"], e["dp"], e["micro_batch"], e["step_time_s"]) for e in result["layouts"]]


def test_repeated_problem_answers_from_its_tables_with_the_same_layouts():
    TABLES.cache_clear()
    options = SearchOptions(top_k=3, time_limit_s=5)
    first = run_search(MODEL, CLUSTER, TRAINING, options)
    before = TABLES.cache_info()
    again = run_search(MODEL, CLUSTER, TRAINING, options.model_copy(update={"time_limit_s": 4}))
    after = TABLES.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (1, 0)
    uncached = search_layouts(MODEL, CLUSTER, TRAINING, options).as_dict()
    assert _ranked(again) == _ranked(first) == _ranked(uncached)
    # top_k prunes the tables: another top_k is another entry
    run_search(MODEL, CLUSTER, TRAINING, options.model_copy(update={"top_k": 2}))
    assert TABLES.cache_info().misses == after.misses + 1


def test_cache_is_bounded_and_cleared_with_the_worker_caches(monkeypatch):
    import solver.search.api as api

    built: list = []
    monkeypatch.setattr(api, "default_rows", lambda *a, **k: lambda lm: built.append(lm) or len(built))

    class LM:  # the fields the key reads
        def __init__(self, seq_len: int) -> None:
            self.spec, self.cluster, self.explain = MODEL, CLUSTER, False
            self.training = TRAINING.model_copy(update={"seq_len": seq_len})
            self.options = SearchOptions()

    cache = TableCache(max_entries=2)
    rows = cache.builder()
    assert [rows(LM(s)) for s in (1024, 2048, 1024, 4096, 1024)] == [1, 2, 1, 3, 1]
    assert cache.cache_info().currsize == 2 and len(built) == 3
    rows(LM(2048))  # evicted when 4096 came in (the least recently used)
    assert len(built) == 4
    TABLES._rows[("x",)] = object()
    trim_caches()
    assert TABLES.cache_info().currsize == 0


def test_layouts_job_computes_the_search_domains_once(monkeypatch):
    """Admission's domains are handed to the search (service.admission.admit_search), not
    computed again by solver.search.cpsat.LayoutModel; the answer is the same either way."""
    import json

    import solver.search.cpsat as cpsat
    import solver.search.space as space
    from service import jobs
    from service.settings import Settings

    calls: list = []
    real = space.domains

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(space, "domains", counted)
    monkeypatch.setattr(cpsat, "domains", counted)
    TABLES.cache_clear()
    body = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
            "options": {"top_k": 2, "time_limit_s": 5}}
    settings = Settings.from_env({})
    jobs.layouts_job(dict(body), settings)
    out = json.loads(jobs.encoded(jobs.layouts_job(dict(body), settings)))
    assert len(calls) == 2  # one per job (the second job answered from the table cache)
    uncached = search_layouts(MODEL, CLUSTER, TRAINING, SearchOptions(top_k=2, time_limit_s=5)).as_dict()
    assert _ranked(out) == _ranked(uncached)
