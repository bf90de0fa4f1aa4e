"""Plan store: one SQLAlchemy table, a SQLite file by default, any SQLAlchemy URL by setting.

A stored plan keeps the request it answered (the resolved specs), the plan JSON and the
chart data of its report, so the report page renders the same after a restart.
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Column, DateTime, MetaData, String, Table, Text, create_engine, select, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger("trainplan.store")
metadata = MetaData()  # mirrors the migrations (service/migrations/versions), which create it

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


def sqlite_file(url) -> Path | None:
    """The database file of an SQLite URL (also of a `file:...?uri=true` one); None for
    other databases and in-memory ones."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if database.startswith("file:"):
        database = database[len("file:"):].split("?", 1)[0]
    return Path(database).expanduser()


def _engine(url: str) -> Engine:
    parsed = make_url(url)
    path = sqlite_file(parsed)
    if path is not None and parsed.query.get("mode") != "ro":
        path.parent.mkdir(parents=True, exist_ok=True)
    # A database that is down must fail fast (a 503 now), not hang a request.
    connect_args = {"connect_timeout": 3} if parsed.get_backend_name() == "postgresql" else {}
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args)


class PlanStore:
    """Plans by id. Thread-safe: every call opens its own connection from the pool.

    The schema comes from the migrations (service.migrate): run at construction when
    `migrate` is true, else only checked. A database down at start-up is retried on use;
    until its schema is at head every call raises StoreUnavailable (-> 503, /readyz not ready).
    Plans older than `retention_s` (None: kept forever) read as absent and are purged.
    """

    PURGE_EVERY_S = 60.0  # at most one purge of expired plans per minute, on save

    def __init__(self, url: str, migrate: bool = True, retention_s: float | None = None) -> None:
        self.engine = _engine(url)
        self.migrate = migrate
        self.retention_s = retention_s
        self._schema_ok = False
        self._last_purge = 0.0
        try:
            self._ensure_schema()
        except StoreUnavailable as exc:
            log.warning("plan store not ready at start-up: %s", exc)

    def _ensure_schema(self) -> None:
        """Raises StoreUnavailable unless the schema is (or has just been brought) at head."""
        if self._schema_ok:
            return
        from service import migrate

        try:
            revision = migrate.upgrade(self.engine) if self.migrate else migrate.current(self.engine)
        except SQLAlchemyError as exc:
            raise StoreUnavailable(_reason(exc)) from exc
        if revision != migrate.head():
            raise StoreUnavailable(f"schema at revision {revision or 'none'}, the server needs "
                                   f"{migrate.head()}: run `trainplan db upgrade`")
        self._schema_ok = True

    def save(self, request: dict[str, Any], plan: dict[str, Any],
             report: dict[str, Any]) -> StoredPlan:
        """Store a plan (JSON values only); returns it as `get` will, under its new id
        (32 hex digits, unguessable), without reading it back."""
        stored = StoredPlan(uuid.uuid4().hex, datetime.now(UTC), request, plan, report)
        row = {"id": stored.id, "created_at": stored.created_at,
               "request_json": json.dumps(request), "plan_json": json.dumps(plan),
               "report_json": json.dumps(report)}
        self._ensure_schema()
        with self.engine.begin() as conn:
            conn.execute(plans_table.insert().values(**row))
        self._purge_expired()
        return stored

    def _cutoff(self) -> datetime | None:
        if self.retention_s is None:
            return None
        return datetime.now(UTC) - timedelta(seconds=self.retention_s)

    def _purge_expired(self) -> None:
        cutoff = self._cutoff()
        if cutoff is None or time.monotonic() - self._last_purge < self.PURGE_EVERY_S:
            return
        self._last_purge = time.monotonic()
        with self.engine.begin() as conn:
            gone = conn.execute(plans_table.delete().where(plans_table.c.created_at < cutoff))
        if gone.rowcount:
            log.info("purged %d plans older than %s s", gone.rowcount, self.retention_s)

    def delete(self, plan_id: str) -> bool:
        """Delete one plan; False when there was none."""
        self._ensure_schema()
        with self.engine.begin() as conn:
            gone = conn.execute(plans_table.delete().where(plans_table.c.id == plan_id))
        return bool(gone.rowcount)

    def get(self, plan_id: str) -> StoredPlan | None:
        """The plan with this id, or None when there is none (or it expired)."""
        self._ensure_schema()
        with self.engine.connect() as conn:
            row = conn.execute(select(plans_table).where(plans_table.c.id == plan_id)).first()
        if row is None:
            return None
        # SQLite keeps no offset: its naive timestamps are the UTC ones `save` wrote.
        created_at = row.created_at if row.created_at.tzinfo else row.created_at.replace(
            tzinfo=UTC)
        cutoff = self._cutoff()
        if cutoff is not None and created_at < cutoff:
            return None
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
        self._ensure_schema()
        try:
            with self.engine.connect() as conn:
                with conn.begin() as tx:
                    conn.execute(plans_table.delete().where(plans_table.c.id == ""))
                    tx.rollback()
        except SQLAlchemyError as exc:
            raise StoreUnavailable(_reason(exc)) from exc

    def state(self) -> str:
        """'ok', 'read_only', 'schema_outdated' or 'unreachable' (for /readyz; never raises)."""
        try:
            self.check_writable()
            return "ok"
        except StoreUnavailable as exc:
            text_ = str(exc).lower()
            if "read-only" in text_ or "readonly" in text_ or "read only" in text_:
                return "read_only"
            return "schema_outdated" if "trainplan db upgrade" in text_ else "unreachable"

    def close(self) -> None:
        self.engine.dispose()
