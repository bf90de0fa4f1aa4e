"""Alembic environment: runs on the connection service.store.upgrade passes in (already
inside its transaction and holding the migration lock), never on a URL of its own."""
from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
