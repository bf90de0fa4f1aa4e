"""Forkserver preload for the solve workers (service.workers): imports the solver and warms
its caches on the seed problem once, so every worker forked afterwards starts warm.

Imported only by the forkserver process; a failure here only costs warmth (logged).
"""
from __future__ import annotations

import logging

from service import jobs


def _warm() -> None:
    from service.settings import Settings

    settings = Settings(database_url="sqlite://")
    body = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
            "options": {"top_k": 3}}
    jobs.layouts_job(body, settings)


try:
    _warm()
except Exception:  # never let the forkserver die of a warm-up problem
    logging.getLogger("trainplan.worker").exception("worker warm-up failed")
