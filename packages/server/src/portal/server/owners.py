"""Who created each job, and the name they gave it: the server's own record, beside its tokens.

Kept apart from the control-plane store on purpose: the store's answers (its event sequence
numbers included) stay exactly those of the embedded store, and no client can write or read the
record. A small SQLite file (``server-owners.db`` next to the tokens file), one row a job.

Job names live here too, not in the store: a name is unique among one user's jobs only (alice's
``train`` and bob's ``train`` are two jobs), and who owns a job is this record's to say. The store
keeps one namespace of names, which is right for the embedded plane (one user) and stays as it
is: the server gives it its jobs without a name (see :mod:`portal.server.app`). Jobs named before
names moved here keep theirs in the store, and the server reads it from there.

One server process uses a record: it caches what it read, and the server keeps a user's names
unique under its own lock (the unique index below is the backstop).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import attrs

__all__ = ["OWNERS_NAME", "NameTakenError", "Owned", "Owners", "recorded_named", "recorded_owner"]

#: The owners' record, beside the tokens file.
OWNERS_NAME = "server-owners.db"

_TABLE = "CREATE TABLE IF NOT EXISTS owners (job TEXT PRIMARY KEY, user TEXT NOT NULL, at REAL)"
#: A record from before names were the server's has no name column: it gains one (NULL for every
#: job it holds: their names, if any, are still the store's).
_NAME_COLUMN = "ALTER TABLE owners ADD COLUMN name TEXT"
#: By name first: a job reference is looked up by name alone (an admin's), or with its user.
_NAME_INDEX = "CREATE UNIQUE INDEX IF NOT EXISTS owners_by_name ON owners(name, user)"


class NameTakenError(Exception):
    """Another row of the same user already has the name (a second server process won a race
    the first one's lock could not see)."""


@attrs.frozen
class Owned:
    """One row: the job's creator, and the name they gave it (None: none, or the store's)."""

    user: str
    name: str | None = None


class Owners:
    """``job id -> (user, name)`` as the server recorded it when the job was created."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        os.chmod(self.path, 0o600)
        self._db.execute("PRAGMA busy_timeout = 5000")
        self._ensure_schema()
        self._cache: dict[str, Owned | None] = {}

    def _ensure_schema(self) -> None:
        """Make the table, or bring a record an older server made up to date (idempotent)."""
        self._db.execute(_TABLE)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(owners)").fetchall()}
        if "name" not in columns:
            try:
                self._db.execute(_NAME_COLUMN)
            except sqlite3.OperationalError as why:  # another process added it just now
                if "duplicate column" not in str(why):
                    raise
        self._db.execute(_NAME_INDEX)

    def entry_of(self, job_id: str) -> Owned | None:
        """The job's row; None for a job made before owners were recorded."""
        with self._lock:
            if job_id not in self._cache:
                row = self._db.execute(
                    "SELECT user, name FROM owners WHERE job = ?", (job_id,)
                ).fetchone()
                self._cache[job_id] = None if row is None else Owned(str(row[0]), row[1])
            return self._cache[job_id]

    def owner_of(self, job_id: str) -> str | None:
        """Who created the job; None for a job made before owners were recorded."""
        entry = self.entry_of(job_id)
        return None if entry is None else entry.user

    def entries(self) -> dict[str, Owned]:
        """Every row, by job id: what a listing of many jobs reads at once."""
        with self._lock:
            rows = self._db.execute("SELECT job, user, name FROM owners").fetchall()
        return {str(job): Owned(str(user), name) for job, user, name in rows}

    def named(self, name: str, user: str | None = None) -> list[tuple[str, str]]:
        """``(job id, user)`` of each row named ``name`` (of ``user`` only, when given)."""
        query, args = "SELECT job, user FROM owners WHERE name = ?", [name]
        if user is not None:
            query, args = query + " AND user = ?", [name, user]
        with self._lock:
            rows = self._db.execute(query + " ORDER BY at, job", args).fetchall()
        return [(str(job), str(owner)) for job, owner in rows]

    def record(self, job_id: str, user: str, name: str | None = None) -> None:
        """``user`` created ``job_id`` (named ``name``). The store has just taken the id as a
        new job's, so a row already here for it is stale (left by jobs of a store that was
        emptied since) and is replaced. Raises :class:`NameTakenError` when another row of
        ``user`` has the name."""
        with self._lock:
            try:
                # An upsert on the job alone: a clash of (user, name) still raises (OR REPLACE
                # would quietly delete the other job's row).
                self._db.execute(
                    "INSERT INTO owners (job, user, at, name) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (job) DO UPDATE SET "
                    "user = excluded.user, at = excluded.at, name = excluded.name",
                    (job_id, user, time.time(), name),
                )
            except sqlite3.IntegrityError:
                raise NameTakenError(name) from None
            finally:
                self._cache.pop(job_id, None)

    def forget(self, job_id: str) -> None:
        """Drop the row of a job the store no longer has (its name is free again)."""
        with self._lock:
            self._db.execute("DELETE FROM owners WHERE job = ?", (job_id,))
            self._cache.pop(job_id, None)

    def close(self) -> None:
        with self._lock:
            self._db.close()


def recorded_owner(path: str | os.PathLike[str], job_id: str) -> str | None:
    """Who created ``job_id`` by the record at ``path``; None when none is recorded. Only
    looks: a server that never ran has no record, and none is made for the asking."""
    if not Path(path).exists():
        return None
    owners = Owners(path)
    try:
        return owners.owner_of(job_id)
    finally:
        owners.close()


def recorded_named(path: str | os.PathLike[str], name: str, user: str) -> list[str]:
    """The ids of ``user``'s jobs named ``name`` by the record at ``path`` (only looks)."""
    if not Path(path).exists():
        return []
    owners = Owners(path)
    try:
        return [job for job, _ in owners.named(name, user)]
    finally:
        owners.close()
