"""Alembic migrations of the plan store (`trainplan db upgrade`; service.store.upgrade)."""
