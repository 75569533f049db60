"""Which control-plane store a process opens: the one place that reads ``control_db`` and
``control_plane``.

A control-plane service (``PORTAL_CONTROL_PLANE``, or ``control_plane`` in
``PORTAL_HOME/config.toml``) wins: its records live in ``portal server``, reached over HTTP.
Otherwise ``sqlite`` (the default) is the embedded file ``PORTAL_HOME/portal.db``, and a
``postgresql://`` URL a PostgreSQL server shared by many machines (the optional extra
``portal-spot[postgres]``).
"""

from __future__ import annotations

from portal.control.config import remote_control
from portal.control.store import ControlStore, SqliteControlStore
from portal.core.settings import Settings

__all__ = ["open_control_store", "open_database_store"]


def open_control_store(settings: Settings, *, busy_timeout_s: float = 30.0) -> ControlStore:
    """The store ``settings`` name, opened (and, for PostgreSQL, migrated).

    ``busy_timeout_s`` bounds how long a write waits for another writer (SQLite's busy timeout,
    PostgreSQL's lock and connect timeouts, the service's connect and answer timeout).
    """
    remote = remote_control(settings)
    if remote is not None:
        from portal.control.remote import HttpControlStore

        return HttpControlStore(
            remote.url, token=remote.token, timeout=busy_timeout_s, ca_file=remote.ca_file
        )
    return open_database_store(settings.control_db, settings, busy_timeout_s=busy_timeout_s)


def open_database_store(
    control_db: str, settings: Settings, *, busy_timeout_s: float = 30.0
) -> ControlStore:
    """A store on a database: ``sqlite`` (``PORTAL_HOME/portal.db``), a SQLite file's path, or a
    ``postgresql://`` URL. What ``portal server --db`` serves."""
    if control_db.startswith(("postgresql://", "postgres://")):
        from portal.control.postgres import PostgresControlStore  # psycopg only when asked for

        return PostgresControlStore(control_db, timeout=busy_timeout_s)
    if control_db == "sqlite":
        return SqliteControlStore(settings.home / "portal.db", timeout=busy_timeout_s)
    return SqliteControlStore(control_db, timeout=busy_timeout_s)
