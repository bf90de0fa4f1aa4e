"""Plan store: one SQLAlchemy table, a SQLite file by default, any SQLAlchemy URL by setting.

A stored plan keeps the request it answered (the resolved specs), the plan JSON and the
chart data of its report, so the report page renders the same after a restart.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

from sqlalchemy import Column, DateTime, MetaData, String, Table, Text, create_engine, select, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import SQLAlchemyError

metadata = MetaData()

plans_table = Table(
    "plans",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("request_json", Text, nullable=False),
    Column("plan_json", Text, nullable=False),
    Column("report_json", Text, nullable=False),
)


@dataclass(frozen=True)
class StoredPlan:
    """One row of the store, decoded."""

    id: str
    created_at: datetime
    request: dict[str, Any]
    plan: dict[str, Any]
    report: dict[str, Any]


class StoreUnavailable(Exception):
    """The database cannot take the request now (down, read-only, locked) -> 503 Retry-After."""


def _reason(exc: SQLAlchemyError) -> str:
    """The driver's first line (no SQL, no parameters) for logs and error bodies."""
    origin = getattr(exc, "orig", None) or exc
    return str(origin).strip().splitlines()[0][:200] if str(origin).strip() else type(exc).__name__


def _engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return create_engine(url, pool_pre_ping=True)


class PlanStore:
    """Plans by id. Thread-safe: every call opens its own connection from the pool."""

    def __init__(self, url: str) -> None:
        self.engine = _engine(url)
        metadata.create_all(self.engine)

    def save(self, request: dict[str, Any], plan: dict[str, Any],
             report: dict[str, Any]) -> StoredPlan:
        """Store a plan (JSON values only); returns it as `get` will, under its new id
        (32 hex digits, unguessable), without reading it back."""
        stored = StoredPlan(uuid.uuid4().hex, datetime.now(UTC), request, plan, report)
        row = {"id": stored.id, "created_at": stored.created_at,
               "request_json": json.dumps(request), "plan_json": json.dumps(plan),
               "report_json": json.dumps(report)}
        with self.engine.begin() as conn:
            conn.execute(plans_table.insert().values(**row))
        return stored

    def get(self, plan_id: str) -> StoredPlan | None:
        """The plan with this id, or None when there is none."""
        with self.engine.connect() as conn:
            row = conn.execute(select(plans_table).where(plans_table.c.id == plan_id)).first()
        if row is None:
            return None
        # SQLite keeps no offset: its naive timestamps are the UTC ones `save` wrote.
        created_at = row.created_at if row.created_at.tzinfo else row.created_at.replace(
            tzinfo=UTC)
        return StoredPlan(row.id, created_at, json.loads(row.request_json),
                          json.loads(row.plan_json), json.loads(row.report_json))

    def ping(self) -> bool:
        """True when the database answers a trivial query."""
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except Exception:  # noqa: BLE001 (any driver error means "not ready"; readiness must not raise)
            return False

    def check_writable(self) -> None:
        """Raises StoreUnavailable unless the plans table takes a write (a delete of no row,
        rolled back: read-only files and read-only PostgreSQL transactions refuse it)."""
        try:
            with self.engine.connect() as conn:
                with conn.begin() as tx:
                    conn.execute(plans_table.delete().where(plans_table.c.id == ""))
                    tx.rollback()
        except SQLAlchemyError as exc:
            raise StoreUnavailable(_reason(exc)) from exc

    def state(self) -> str:
        """'ok', 'read_only' or 'unreachable' (for /readyz; never raises)."""
        try:
            self.check_writable()
            return "ok"
        except StoreUnavailable as exc:
            return "read_only" if "read" in str(exc).lower() and "only" in str(exc).lower() \
                else "unreachable"

    def close(self) -> None:
        self.engine.dispose()
