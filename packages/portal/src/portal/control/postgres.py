"""The control-plane store on PostgreSQL: one database shared by many machines.

Same interface and behaviour as :class:`~portal.control.store.SqliteControlStore` (the behavioural
suite in ``tests/test_control_store.py`` runs against both). How concurrent writers stay safe, at
PostgreSQL's default READ COMMITTED isolation, with row locks rather than SERIALIZABLE retries
(no retry loop to tune, no wasted work under contention):

- a state change is one ``UPDATE ... WHERE state = ANY(expect)``: the row lock makes it a
  compare-and-set, since a writer that waited re-checks the condition on the row it then sees;
- a new attempt first locks its job's row (``SELECT ... FOR UPDATE``), so two starters of one
  job take numbers one after the other (the primary key would refuse a duplicate anyway);
- event sequence numbers come from one identity column (unique, increasing); appends to one job
  are serialized by a transaction-level advisory lock on the job, so a job's events become
  visible in sequence order and ``events(job, after=n)`` never skips one committed late;
- every transaction takes at most one lock, so writers cannot deadlock;
- single statements run as their own transaction (autocommit): one round trip each.

The schema is created by numbered migrations (:data:`MIGRATIONS`) recorded in
``schema_migrations``; opening the store applies the missing ones under an advisory lock, so
processes opening a fresh database at the same moment apply each step exactly once.

psycopg (3) is imported lazily: it is the optional extra ``portal-spot[postgres]``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

from portal.control.store import (
    name_taken,
    no_attempt,
    no_job,
    no_job_ref,
    state_conflict,
)
from portal.core.domain import Attempt, AttemptState, Event, Job, JobState
from portal.core.errors import PortalError

if TYPE_CHECKING:
    import psycopg  # type: ignore[import-not-found, unused-ignore]  # optional extra

__all__ = ["MIGRATIONS", "ControlDatabaseError", "PostgresControlStore", "redact_url"]

#: ``pg_advisory_xact_lock`` keys. Migrations take one 64-bit key; event appends take the
#: two-key form (namespace, hash of the job id), a key space that cannot meet the first.
_MIGRATION_LOCK = 0x706F7274616C  # "portal"
_EVENTS_LOCK_NAMESPACE = 0x7065  # "pe"

#: Numbered schema steps, applied in order and once each. Never edit or reorder a released step:
#: add a new one. Text columns use the "C" collation so that ordering (``list_jobs``) is by
#: code point, as in SQLite, whatever the server's locale.
MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (
        1,
        "jobs, attempts and the event log",
        """
        CREATE TABLE jobs (
            id TEXT COLLATE "C" PRIMARY KEY,
            name TEXT COLLATE "C" UNIQUE,
            script TEXT NOT NULL,
            args TEXT NOT NULL,
            workdir TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            state TEXT NOT NULL,
            memory_gib DOUBLE PRECISION,
            last_heard DOUBLE PRECISION
        );
        CREATE TABLE attempts (
            job_id TEXT COLLATE "C" NOT NULL REFERENCES jobs(id),
            number INTEGER NOT NULL,
            machine TEXT NOT NULL,
            started_at DOUBLE PRECISION NOT NULL,
            state TEXT NOT NULL,
            ended_at DOUBLE PRECISION,
            exit_code INTEGER,
            resumed_from TEXT,
            PRIMARY KEY (job_id, number)
        );
        CREATE TABLE events (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            job_id TEXT COLLATE "C" NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            kind TEXT NOT NULL,
            message TEXT NOT NULL,
            data TEXT NOT NULL
        );
        CREATE INDEX events_by_job ON events (job_id, seq);
        """,
    ),
    (
        2,
        "reclaims (pools left out of new placements)",
        """
        CREATE TABLE reclaims (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            pool TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            machine TEXT NOT NULL
        );
        CREATE INDEX reclaims_by_time ON reclaims (at, id);
        """,
    ),
    (
        3,
        "report ids: a report sent again is recorded once",
        """
        ALTER TABLE events ADD COLUMN report_id TEXT COLLATE "C";
        CREATE UNIQUE INDEX events_by_report ON events (job_id, report_id);
        """,
    ),
    (
        4,
        "state_gib: the state-size guess apart from the machine memory asked for",
        "ALTER TABLE jobs ADD COLUMN state_gib DOUBLE PRECISION;",
    ),
    (
        5,
        "nproc_per_node: the ranks of a multi-process job",
        "ALTER TABLE jobs ADD COLUMN nproc_per_node INTEGER;",
    ),
)

_JOB_COLUMNS = (
    "id, name, script, args, workdir, created_at, state, memory_gib, state_gib, nproc_per_node"
)
_ATTEMPT_COLUMNS = "job_id, number, machine, started_at, state, ended_at, exit_code, resumed_from"


class ControlDatabaseError(PortalError):
    """The control-plane database cannot be used (unreachable, driver missing, too new)."""

    code: ClassVar[str] = "CONTROL_DB_UNAVAILABLE"


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, fit for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _import_psycopg() -> Any:
    try:
        import psycopg  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise ControlDatabaseError(
            "PORTAL_CONTROL_DB names a PostgreSQL server, but the PostgreSQL driver (psycopg) is "
            "not installed: pip install 'portal-spot[postgres]', or set PORTAL_CONTROL_DB=sqlite for "
            "the embedded store",
            details={"package": "psycopg"},
        ) from None
    return psycopg


class PostgresControlStore:
    """Jobs, attempts, events and reclaims in a PostgreSQL database; one connection per thread."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        """``timeout``: seconds to wait for the server to answer a connection, and for another
        writer's lock (PostgreSQL's ``lock_timeout``), like SQLite's busy timeout."""
        self.url = url
        self.timeout = timeout
        self._psycopg = _import_psycopg()
        self._local = threading.local()
        self._all: list[psycopg.Connection[Any]] = []
        self._all_lock = threading.Lock()
        #: Versions this process applied when it opened the store (empty when already current).
        try:
            self.applied_migrations: list[int] = self._migrate()
        except BaseException:
            self.close()  # a refused store leaves no connection behind
            raise

    # --- connections and transactions ---------------------------------------------------------

    def _conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            try:
                conn = self._psycopg.connect(
                    self.url,
                    autocommit=True,
                    connect_timeout=max(1, round(self.timeout)),
                    application_name="portal",
                )
            except self._psycopg.Error as why:
                detail = " ".join(str(why).split())  # libpq's message spans lines
                raise ControlDatabaseError(
                    f"cannot reach the control-plane database {redact_url(self.url)} ({detail}): "
                    f"start the server, or fix PORTAL_CONTROL_DB (a postgresql:// URL, or sqlite "
                    f"for the embedded store)",
                    details={"url": redact_url(self.url)},
                ) from None
            assert conn is not None
            # Not as a connect option: that would replace any ``options`` the URL carries.
            conn.execute(f"SET lock_timeout = {max(1, round(self.timeout * 1000))}")
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        """Close every connection this store opened, in any thread."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[Any]]:
        conn = self._conn()
        with conn.transaction():
            yield conn

    def _migrate(self) -> list[int]:
        applied: list[int] = []
        with self._tx() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (_MIGRATION_LOCK,))
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            done = {v for (v,) in db.execute("SELECT version FROM schema_migrations").fetchall()}
            known = max(v for v, _, _ in MIGRATIONS)
            if done and max(done) > known:
                raise ControlDatabaseError(
                    f"the control-plane database {redact_url(self.url)} has schema version "
                    f"{max(done)}, newer than this Portal knows ({known}): upgrade portal on "
                    f"this machine",
                    details={"url": redact_url(self.url), "version": max(done)},
                )
            for version, name, sql in MIGRATIONS:
                if version in done:
                    continue
                db.execute(sql)
                db.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                    (version, name),
                )
                applied.append(version)
        return applied

    def schema_versions(self) -> list[int]:
        """The migration steps recorded in the database, in order."""
        rows = self._conn().execute("SELECT version FROM schema_migrations ORDER BY version")
        return [v for (v,) in rows.fetchall()]

    # --- jobs ---------------------------------------------------------------------------------

    @staticmethod
    def _job(row: Sequence[Any]) -> Job:
        id_, name, script, args, workdir, created_at, state, memory_gib, state_gib, nproc = row
        return Job(
            id=id_,
            name=name,
            script=script,
            args=json.loads(args),
            workdir=workdir,
            created_at=created_at,
            state=state,
            memory_gib=memory_gib,
            state_gib=state_gib,
            nproc_per_node=nproc,
        )

    def create_job(self, job: Job) -> Job:
        try:
            self._conn().execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
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
        except self._psycopg.errors.UniqueViolation:
            raise name_taken(job.name) from None
        return job

    def get_job(self, ref: str) -> Job:
        row = (
            self._conn()
            .execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = %s OR name = %s "
                f"ORDER BY id = %s DESC LIMIT 1",
                (ref, ref, ref),
            )
            .fetchone()
        )
        if row is None:
            raise no_job_ref(ref)
        return self._job(row)

    def list_jobs(self) -> list[Job]:
        rows = self._conn().execute(f"SELECT {_JOB_COLUMNS} FROM jobs ORDER BY created_at, id")
        return [self._job(r) for r in rows.fetchall()]

    def _lock_job(self, db: psycopg.Connection[Any], job_id: str) -> JobState:
        row = db.execute("SELECT state FROM jobs WHERE id = %s FOR UPDATE", (job_id,)).fetchone()
        if row is None:
            raise no_job(job_id)
        return JobState(row[0])

    def set_job_state(
        self, job_id: str, state: JobState, *, expect: Sequence[JobState] | None = None
    ) -> Job:
        """One statement on the common path, a compare-and-set: a writer that waited for the
        row's lock re-checks ``state`` on the row as the other writer left it (READ COMMITTED)."""
        db = self._conn()
        allowed = None if expect is None else [str(s) for s in expect]
        while True:
            row = db.execute(
                f"UPDATE jobs SET state = %s WHERE id = %s "
                f"AND (%s::text[] IS NULL OR state = ANY(%s::text[])) RETURNING {_JOB_COLUMNS}",
                (str(state), job_id, allowed, allowed),
            ).fetchone()
            if row is not None:
                return self._job(row)  # the job as this change left it, not as a later one did
            found = db.execute("SELECT state FROM jobs WHERE id = %s", (job_id,)).fetchone()
            if found is None:
                raise no_job(job_id)
            current = JobState(found[0])
            if expect is not None and current not in expect:
                raise state_conflict(job_id, current, expect)
            # Another writer moved the job back to an expected state in between: try again.

    def heard(self, job_id: str, at: float) -> None:
        self._conn().execute(
            "UPDATE jobs SET last_heard = greatest(coalesce(last_heard, 0), %s) WHERE id = %s",
            (at, job_id),
        )

    def last_heard(self, job_id: str) -> float | None:
        row = (
            self._conn().execute("SELECT last_heard FROM jobs WHERE id = %s", (job_id,)).fetchone()
        )
        return None if row is None else row[0]

    # --- attempts -----------------------------------------------------------------------------

    @staticmethod
    def _attempt(row: Sequence[Any]) -> Attempt:
        job_id, number, machine, started_at, state, ended_at, exit_code, resumed_from = row
        return Attempt(
            job_id=job_id,
            number=number,
            machine=machine,
            started_at=started_at,
            state=state,
            ended_at=ended_at,
            exit_code=exit_code,
            resumed_from=resumed_from,
        )

    def start_attempt(
        self, job_id: str, *, machine: str, at: float, resumed_from: str | None = None
    ) -> Attempt:
        with self._tx() as db:
            self._lock_job(db, job_id)  # two starters of one job take numbers one after another
            row = db.execute(
                "SELECT coalesce(max(number), 0) FROM attempts WHERE job_id = %s", (job_id,)
            ).fetchone()
            assert row is not None
            attempt = db.execute(
                f"INSERT INTO attempts ({_ATTEMPT_COLUMNS}) "
                f"VALUES (%s, %s, %s, %s, %s, NULL, NULL, %s) RETURNING {_ATTEMPT_COLUMNS}",
                (job_id, row[0] + 1, machine, at, str(AttemptState.RUNNING), resumed_from),
            ).fetchone()
            db.execute("UPDATE jobs SET last_heard = %s WHERE id = %s", (at, job_id))
        assert attempt is not None
        # This attempt, not the job's last one: another machine may have started one since.
        return self._attempt(attempt)

    def end_attempt(
        self, job_id: str, number: int, *, state: AttemptState, at: float, exit_code: int | None
    ) -> Attempt:
        row = (
            self._conn()
            .execute(
                "UPDATE attempts SET state = %s, ended_at = %s, exit_code = %s "
                f"WHERE job_id = %s AND number = %s RETURNING {_ATTEMPT_COLUMNS}",
                (str(state), at, exit_code, job_id, number),
            )
            .fetchone()
        )
        if row is not None:
            return self._attempt(row)
        raise no_attempt(job_id, number)

    def attempts(self, job_id: str) -> list[Attempt]:
        rows = self._conn().execute(
            f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE job_id = %s ORDER BY number",
            (job_id,),
        )
        return [self._attempt(r) for r in rows.fetchall()]

    # --- events -------------------------------------------------------------------------------

    def append_event(self, event: Event) -> int:
        # One statement, its own transaction: the row comes out of the materialized lock step,
        # so the job's lock is held before the sequence number is drawn, until the commit. A
        # report sent again (its id recorded already) inserts nothing: the first one's seq.
        row = (
            self._conn()
            .execute(
                "WITH locked AS MATERIALIZED ("
                " SELECT pg_advisory_xact_lock(%s::integer, hashtext(%s))),"
                " inserted AS ("
                " INSERT INTO events (job_id, at, kind, message, data, report_id)"
                " SELECT %s, %s, %s, %s, %s, %s FROM locked"
                " ON CONFLICT (job_id, report_id) DO NOTHING RETURNING seq)"
                " SELECT seq FROM inserted UNION ALL"
                " SELECT seq FROM events WHERE job_id = %s AND report_id = %s"
                " AND NOT EXISTS (SELECT 1 FROM inserted)",
                (
                    _EVENTS_LOCK_NAMESPACE,
                    event.job_id,
                    event.job_id,
                    event.at,
                    event.kind,
                    event.message,
                    _dumps(event.data),
                    event.id,
                    event.job_id,
                    event.id,
                ),
            )
            .fetchone()
        )
        assert row is not None
        seq: int = row[0]
        return seq

    def events(self, job_id: str, *, after: int = 0) -> list[tuple[int, Event]]:
        rows = self._conn().execute(
            "SELECT seq, job_id, at, kind, message, data FROM events "
            "WHERE job_id = %s AND seq > %s ORDER BY seq",
            (job_id, after),
        )
        return [
            (seq, Event(job_id=job, at=at, kind=kind, message=message, data=json.loads(data)))
            for seq, job, at, kind, message, data in rows.fetchall()
        ]

    # --- reclaims (pools left out of new placements) ------------------------------------------

    def record_reclaim(self, pool: str, at: float, machine: str) -> None:
        """A machine of ``pool`` was reclaimed at ``at``: placements leave the pool out a while."""
        self._conn().execute(
            "INSERT INTO reclaims (pool, at, machine) VALUES (%s, %s, %s)", (pool, at, machine)
        )

    def reclaims(self, since: float) -> list[tuple[str, float]]:
        """Every ``(pool, at)`` reclaimed at or after ``since``, oldest first."""
        rows = self._conn().execute(
            "SELECT pool, at FROM reclaims WHERE at >= %s ORDER BY at, id", (since,)
        )
        return [(pool, at) for pool, at in rows.fetchall()]


def _dumps(data: Any) -> str:
    # The same text as the SQLite store writes, so both stores return identical event data.
    return json.dumps(dict(data), default=str, sort_keys=True)
