"""The control plane's store: jobs, attempts and the append-only event log.

One interface (:class:`ControlStore`) so that the embedded default (SQLite under ``PORTAL_HOME``)
and the service beyond one machine (PostgreSQL) are interchangeable. The SQLite store is safe
under concurrent CLI calls and node processes: WAL journal, a busy timeout, and every
read-modify-write in one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Protocol

from portal.core.domain import Attempt, AttemptState, Event, Job, JobState
from portal.core.errors import InvalidArgumentError, PortalError

__all__ = [
    "ControlDatabaseDamagedError",
    "ControlStore",
    "JobNotFoundError",
    "JobStateConflictError",
    "SqliteControlStore",
    "new_job_id",
]


class JobNotFoundError(PortalError):
    code: ClassVar[str] = "JOB_NOT_FOUND"


class JobStateConflictError(PortalError):
    code: ClassVar[str] = "JOB_STATE_CONFLICT"


class ControlDatabaseDamagedError(PortalError):
    code: ClassVar[str] = "CONTROL_DATABASE_DAMAGED"


def new_job_id() -> str:
    """Short, unique, typeable: ``j-`` and 10 hex digits."""
    return f"j-{uuid.uuid4().hex[:10]}"


# The refusals both stores give, in one place so the SQLite and PostgreSQL stores cannot drift.


def name_taken(name: str | None) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"a job named {name!r} already exists: choose another --name, or refer to that job by "
        "its name",
        details={"name": name},
    )


def no_job_ref(ref: str) -> JobNotFoundError:
    return JobNotFoundError(
        f"no job {ref!r}: give a job id (j-...) or a job's name; `portal jobs` lists them",
        details={"job": ref},
    )


def no_job(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job {job_id!r}", details={"job": job_id})


def state_conflict(
    job_id: str, current: JobState, expect: Sequence[JobState]
) -> JobStateConflictError:
    return JobStateConflictError(
        f"job {job_id} is {current}, not {' or '.join(map(str, expect))}",
        details={"job": job_id, "state": str(current)},
    )


def no_attempt(job_id: str, number: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"job {job_id!r} has no attempt {number}: `portal status {job_id}` lists its attempts",
        details={"job": job_id, "attempt": number},
    )


class ControlStore(Protocol):
    def create_job(self, job: Job) -> Job: ...
    def get_job(self, ref: str) -> Job: ...
    def list_jobs(self) -> list[Job]: ...
    def set_job_state(
        self, job_id: str, state: JobState, *, expect: Sequence[JobState] | None = None
    ) -> Job: ...
    def start_attempt(
        self, job_id: str, *, machine: str, at: float, resumed_from: str | None = None
    ) -> Attempt: ...
    def end_attempt(
        self, job_id: str, number: int, *, state: AttemptState, at: float, exit_code: int | None
    ) -> Attempt: ...
    def attempts(self, job_id: str) -> list[Attempt]: ...
    def heard(self, job_id: str, at: float) -> None: ...
    def last_heard(self, job_id: str) -> float | None: ...
    def append_event(self, event: Event) -> int: ...
    def events(self, job_id: str, *, after: int = 0) -> list[tuple[int, Event]]: ...
    def record_reclaim(self, pool: str, at: float, machine: str) -> None: ...
    def reclaims(self, since: float) -> list[tuple[str, float]]: ...
    def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT UNIQUE,
    script TEXT NOT NULL,
    args TEXT NOT NULL,
    workdir TEXT NOT NULL,
    created_at REAL NOT NULL,
    state TEXT NOT NULL,
    memory_gib REAL,
    state_gib REAL,
    nproc_per_node INTEGER,
    last_heard REAL
);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    number INTEGER NOT NULL,
    machine TEXT NOT NULL,
    started_at REAL NOT NULL,
    state TEXT NOT NULL,
    ended_at REAL,
    exit_code INTEGER,
    resumed_from TEXT,
    PRIMARY KEY (job_id, number)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL,
    data TEXT NOT NULL,
    report_id TEXT
);
CREATE INDEX IF NOT EXISTS events_by_job ON events(job_id, seq);
CREATE TABLE IF NOT EXISTS reclaims (
    pool TEXT NOT NULL,
    at REAL NOT NULL,
    machine TEXT NOT NULL
);
"""
#: What a database in place has: with all of these, opening it writes nothing.
_SCHEMA_NAMES = frozenset(
    {"jobs", "attempts", "events", "events_by_job", "reclaims", "events_by_report"}
)
#: ``PRAGMA user_version`` of a database made or upgraded by this Portal (1: jobs.state_gib;
#: 2: jobs.nproc_per_node).
_SCHEMA_VERSION = 2


class SqliteControlStore:
    """The embedded default: one SQLite file, one connection per thread."""

    def __init__(self, path: str | Path, *, timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        try:
            self._ensure_schema()
        except sqlite3.DatabaseError as why:
            self.close()
            raise ControlDatabaseDamagedError(
                f"the control plane's database {self.path} cannot be used ({why}): it is "
                "damaged, or another file took its name. Move it aside and Portal starts a new "
                "one (the jobs it held are then unknown here; their checkpoints stay in the store)",
                details={"file": str(self.path)},
            ) from None

    def _ensure_schema(self) -> None:
        """Make the tables when they are not all there, and bring an older database up to
        date. Reads first: the common case (a database in place) takes no write lock, so many
        commands opening it at once (a run and the `logs` following it) never wait on each
        other's schema statements. Two processes making a new database at once retry while the
        other holds it, up to the busy timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                db = self._conn()
                names = {r[0] for r in db.execute("SELECT name FROM sqlite_master").fetchall()}
                (version,) = db.execute("PRAGMA user_version").fetchone()
                if not names >= _SCHEMA_NAMES or version < _SCHEMA_VERSION:
                    db.executescript(_SCHEMA)  # idempotent; executescript commits on its own
                    self._upgrade()
                return
            except sqlite3.OperationalError as why:
                busy = "locked" in str(why) or "busy" in str(why)
                if not busy or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def _upgrade(self) -> None:
        """Bring a database an older Portal made up to this schema (each step idempotent)."""
        db = self._conn()
        job_columns = {r["name"] for r in db.execute("PRAGMA table_info(jobs)").fetchall()}
        if "state_gib" not in job_columns:  # before --state-gib was apart from --memory
            db.execute("ALTER TABLE jobs ADD COLUMN state_gib REAL")
        if "nproc_per_node" not in job_columns:  # before multi-process jobs
            db.execute("ALTER TABLE jobs ADD COLUMN nproc_per_node INTEGER")
        columns = {r["name"] for r in db.execute("PRAGMA table_info(events)").fetchall()}
        if "report_id" not in columns:  # before reports had ids (issue: duplicated events)
            db.execute("ALTER TABLE events ADD COLUMN report_id TEXT")
        db.execute(
            "CREATE UNIQUE INDEX IF NOT EXISTS events_by_report ON events(job_id, report_id)"
        )
        db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # --- jobs -------------------------------------------------------------------------------

    @staticmethod
    def _job(row: sqlite3.Row) -> Job:
        return Job(
            id=row["id"],
            name=row["name"],
            script=row["script"],
            args=json.loads(row["args"]),
            workdir=row["workdir"],
            created_at=row["created_at"],
            state=row["state"],
            memory_gib=row["memory_gib"],
            state_gib=row["state_gib"],
            nproc_per_node=row["nproc_per_node"],
        )

    def create_job(self, job: Job) -> Job:
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO jobs (id, name, script, args, workdir, created_at, state, "
                    "memory_gib, state_gib, nproc_per_node) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        job.id,
                        job.name,
                        job.script,
                        json.dumps(list(job.args)),
                        job.workdir,
                        job.created_at,
                        str(job.state),
                        job.memory_gib,
                        job.state_gib,
                        job.nproc_per_node,
                    ),
                )
        except sqlite3.IntegrityError:
            raise name_taken(job.name) from None
        return job

    def get_job(self, ref: str) -> Job:
        row = (
            self._conn()
            .execute(
                "SELECT * FROM jobs WHERE id = ? OR name = ? ORDER BY id = ? DESC LIMIT 1",
                (ref, ref, ref),
            )
            .fetchone()
        )
        if row is None:
            raise no_job_ref(ref)
        return self._job(row)

    def list_jobs(self) -> list[Job]:
        rows = self._conn().execute("SELECT * FROM jobs ORDER BY created_at, id").fetchall()
        return [self._job(r) for r in rows]

    def set_job_state(
        self, job_id: str, state: JobState, *, expect: Sequence[JobState] | None = None
    ) -> Job:
        with self._tx() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise no_job(job_id)
            current = JobState(row["state"])
            if expect is not None and current not in expect:
                raise state_conflict(job_id, current, expect)
            db.execute("UPDATE jobs SET state = ? WHERE id = ?", (str(state), job_id))
        return self.get_job(job_id)

    def heard(self, job_id: str, at: float) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET last_heard = max(coalesce(last_heard, 0), ?) WHERE id = ?",
                (at, job_id),
            )

    def last_heard(self, job_id: str) -> float | None:
        row = self._conn().execute("SELECT last_heard FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else row["last_heard"]

    # --- attempts -----------------------------------------------------------------------------

    @staticmethod
    def _attempt(row: sqlite3.Row) -> Attempt:
        return Attempt(
            job_id=row["job_id"],
            number=row["number"],
            machine=row["machine"],
            started_at=row["started_at"],
            state=row["state"],
            ended_at=row["ended_at"],
            exit_code=row["exit_code"],
            resumed_from=row["resumed_from"],
        )

    def start_attempt(
        self, job_id: str, *, machine: str, at: float, resumed_from: str | None = None
    ) -> Attempt:
        with self._tx() as db:
            if db.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is None:
                raise no_job(job_id)
            (last,) = db.execute(
                "SELECT coalesce(max(number), 0) FROM attempts WHERE job_id = ?", (job_id,)
            ).fetchone()
            db.execute(
                "INSERT INTO attempts (job_id, number, machine, started_at, state, resumed_from)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, last + 1, machine, at, str(AttemptState.RUNNING), resumed_from),
            )
            db.execute("UPDATE jobs SET last_heard = ? WHERE id = ?", (at, job_id))
            # This attempt, not the job's last one: another process may have started one since.
            row = db.execute(
                "SELECT * FROM attempts WHERE job_id = ? AND number = ?", (job_id, last + 1)
            ).fetchone()
        return self._attempt(row)

    def end_attempt(
        self, job_id: str, number: int, *, state: AttemptState, at: float, exit_code: int | None
    ) -> Attempt:
        with self._tx() as db:
            db.execute(
                "UPDATE attempts SET state = ?, ended_at = ?, exit_code = ? "
                "WHERE job_id = ? AND number = ?",
                (str(state), at, exit_code, job_id, number),
            )
            row = db.execute(
                "SELECT * FROM attempts WHERE job_id = ? AND number = ?", (job_id, number)
            ).fetchone()
        if row is None:
            raise no_attempt(job_id, number)
        return self._attempt(row)

    def attempts(self, job_id: str) -> list[Attempt]:
        rows = (
            self._conn()
            .execute("SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (job_id,))
            .fetchall()
        )
        return [self._attempt(r) for r in rows]

    # --- events -------------------------------------------------------------------------------

    def append_event(self, event: Event) -> int:
        with self._tx() as db:
            if event.id is not None:  # a report sent again: the first one stands
                row = db.execute(
                    "SELECT seq FROM events WHERE job_id = ? AND report_id = ?",
                    (event.job_id, event.id),
                ).fetchone()
                if row is not None:
                    return int(row["seq"])
            cur = db.execute(
                "INSERT INTO events (job_id, at, kind, message, data, report_id) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (event.job_id, event.at, event.kind, event.message, _dumps(event.data), event.id),
            )
            seq = cur.lastrowid
        assert seq is not None
        return seq

    def events(self, job_id: str, *, after: int = 0) -> list[tuple[int, Event]]:
        rows = (
            self._conn()
            .execute(
                "SELECT * FROM events WHERE job_id = ? AND seq > ? ORDER BY seq", (job_id, after)
            )
            .fetchall()
        )
        return [
            (
                r["seq"],
                Event(
                    job_id=r["job_id"],
                    at=r["at"],
                    kind=r["kind"],
                    message=r["message"],
                    data=json.loads(r["data"]),
                ),
            )
            for r in rows
        ]

    # --- reclaims (pools left out of new placements) ----------------------------------------

    def record_reclaim(self, pool: str, at: float, machine: str) -> None:
        """A machine of ``pool`` was reclaimed at ``at``: placements leave the pool out a while."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO reclaims (pool, at, machine) VALUES (?, ?, ?)", (pool, at, machine)
            )

    def reclaims(self, since: float) -> list[tuple[str, float]]:
        """Every ``(pool, at)`` reclaimed at or after ``since``, oldest first."""
        rows = (
            self._conn()
            .execute("SELECT pool, at FROM reclaims WHERE at >= ? ORDER BY at", (since,))
            .fetchall()
        )
        return [(r["pool"], r["at"]) for r in rows]


def _dumps(data: Any) -> str:
    return json.dumps(dict(data), default=str, sort_keys=True)
