"""Who created each job: the server's own record, beside its tokens file.

Kept apart from the control-plane store on purpose: the store's answers (its event sequence
numbers included) stay exactly those of the embedded store, and no client can write or read the
record. A small SQLite file (``server-owners.db`` next to the tokens file), one row a job.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

__all__ = ["Owners"]


class Owners:
    """``job id -> user`` as the server recorded it when the job was created."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        os.chmod(self.path, 0o600)
        self._db.execute("PRAGMA busy_timeout = 5000")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS owners (job TEXT PRIMARY KEY, user TEXT NOT NULL, at REAL)"
        )
        self._cache: dict[str, str | None] = {}

    def owner_of(self, job_id: str) -> str | None:
        """Who created the job; None for a job made before owners were recorded."""
        with self._lock:
            if job_id not in self._cache:
                row = self._db.execute(
                    "SELECT user FROM owners WHERE job = ?", (job_id,)
                ).fetchone()
                self._cache[job_id] = None if row is None else str(row[0])
            return self._cache[job_id]

    def record(self, job_id: str, user: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO owners (job, user, at) VALUES (?, ?, ?)",
                (job_id, user, time.time()),
            )
            self._cache.pop(job_id, None)

    def close(self) -> None:
        with self._lock:
            self._db.close()
