"""`trainplan db upgrade|current`: the plan store's schema (Alembic migrations)."""
from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "db", help="plan store schema: upgrade to the newest migration, or show the current one",
        description="Migrate the plan store at TRAINPLAN_DATABASE_URL (or --url). Run "
                    "`upgrade` once per deployment, before the servers start (safe to repeat "
                    "and to run from several places at once: it takes a lock).")
    parser.add_argument("action", choices=("upgrade", "current"))
    parser.add_argument("--url", help="SQLAlchemy URL (default: TRAINPLAN_DATABASE_URL)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from sqlalchemy.exc import SQLAlchemyError

    from service import migrate
    from service.settings import SettingsFileError, get_settings
    from service.store import _engine, _reason

    try:
        url = args.url or get_settings().database_url
    except (ValueError, SettingsFileError) as exc:  # pydantic's ValidationError is a ValueError
        print(f"error: settings: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    engine = _engine(url)
    try:
        if args.action == "upgrade":
            revision = migrate.upgrade(engine)
        else:
            revision = migrate.current(engine) or "none"
    except SQLAlchemyError as exc:
        print(f"error: database: {_reason(exc)}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()
    print(f"plan store at revision {revision} (newest: {migrate.head()})")
    return 0
