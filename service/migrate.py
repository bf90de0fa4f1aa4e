"""Schema migrations of the plan store (Alembic, scripts in service/migrations/versions).

`upgrade(engine)` brings a database to the newest revision under a lock, so replicas that
start together never race: PostgreSQL takes a transaction-scoped advisory lock (released at
commit; DDL is transactional there, so a second replica waits, then finds the schema at head
and does nothing), SQLite an exclusive lock on a file beside the database. Run it once per
deployment with `trainplan db upgrade` (a k8s Job, a compose init service); the server runs
it at start-up only when TRAINPLAN_MIGRATE_ON_START is true (the default, for a one-process
SQLite setup).
"""
from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

SCRIPTS = Path(__file__).resolve().parent / "migrations"
LOCK_ID = 0x7472_706C  # "trpl": the advisory-lock key of trainplan's migrations


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPTS))
    cfg.attributes["connection"] = connection
    return cfg


def head() -> str:
    """The newest revision the scripts define."""
    return ScriptDirectory.from_config(_config()).get_current_head() or ""


def current(engine: Engine) -> str | None:
    """The database's revision (None: never migrated). Raises: SQLAlchemyError."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@contextmanager
def _file_lock(engine: Engine) -> Iterator[None]:
    from service.store import sqlite_file

    path = sqlite_file(engine.url)
    if path is None or engine.url.query.get("mode") == "ro":  # nothing to lock
        yield
        return
    with open(f"{path}.migrate-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def upgrade(engine: Engine) -> str:
    """Migrate to head under the lock; returns the revision now current.

    Raises: SQLAlchemyError when the database is unreachable or refuses the change.
    """
    with _file_lock(engine), engine.begin() as conn:
        if engine.url.get_backend_name() == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_ID})
        command.upgrade(_config(conn), "head")
    return current(engine) or ""
