"""Which control-plane store a process opens: the one place that reads ``control_db``.

``sqlite`` (the default) is the embedded file ``PORTAL_HOME/portal.db``; a ``postgresql://`` URL
is a PostgreSQL server shared by many machines (the optional extra ``portal[postgres]``).
"""

from __future__ import annotations

from portal.control.store import ControlStore, SqliteControlStore
from portal.core.settings import Settings

__all__ = ["open_control_store"]


def open_control_store(settings: Settings, *, busy_timeout_s: float = 30.0) -> ControlStore:
    """The store ``settings.control_db`` names, opened (and, for PostgreSQL, migrated).

    ``busy_timeout_s`` bounds how long a write waits for another writer (SQLite's busy timeout,
    PostgreSQL's lock and connect timeouts).
    """
    if settings.control_db == "sqlite":
        return SqliteControlStore(settings.home / "portal.db", timeout=busy_timeout_s)
    from portal.control.postgres import PostgresControlStore  # psycopg only when asked for

    return PostgresControlStore(settings.control_db, timeout=busy_timeout_s)
