"""One behavioural suite for every control-plane store: the embedded SQLite one, PostgreSQL, and
the control-plane service (``portal server``, over each of them) through ``HttpControlStore``.

PostgreSQL is a real server started from Debian's package on 127.0.0.1 (``pg_server.py``); each
test gets a database of its own. The service is a real ``portal server`` process on 127.0.0.1
(``portal.server.testing``), one per test. Without PostgreSQL (or psycopg, or portal-server)
their part is skipped, except under ``CI=true`` where it fails: CI installs them all.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_server import PostgresServer, postgres_server

from portal.control.plane import ControlPlane
from portal.control.select import open_control_store
from portal.control.store import (
    ControlStore,
    JobNotFoundError,
    JobStateConflictError,
    SqliteControlStore,
)
from portal.core.domain import AttemptState, Event, Job, JobState
from portal.core.errors import InvalidArgumentError, InvalidSettingError, PortalError
from portal.core.settings import Settings

KINDS = ("sqlite", "postgres", "http-sqlite", "http-postgres")


def _unavailable(why: str) -> NoReturn:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI installs it: see .ci/run)")
    pytest.skip(why)


@pytest.fixture(scope="session")
def pg() -> Iterator[PostgresServer]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed: pip install 'portal-spot[postgres]'")
    try:
        server_cm = postgres_server()
        server = server_cm.__enter__()
    except FileNotFoundError as why:
        _unavailable(str(why))
    try:
        yield server
    finally:
        server_cm.__exit__(None, None, None)


def open_store(kind: str, where: str, **kwargs: Any) -> ControlStore:
    """A store of ``kind`` at ``where`` (a file path, a postgresql:// URL, or for the service
    ``URL#TOKEN``)."""
    if kind == "sqlite":
        return SqliteControlStore(where, **kwargs)
    if kind.startswith("http-"):
        from portal.control.remote import HttpControlStore

        url, _, token = where.partition("#")
        return HttpControlStore(url, token=token, **kwargs)
    from portal.control.postgres import PostgresControlStore

    return PostgresControlStore(where, **kwargs)


def _server_testing() -> Any:
    try:
        import portal.server.testing as testing
    except ImportError:
        _unavailable("portal-server is not installed: pip install portal-server")
    return testing


@pytest.fixture(params=KINDS)
def location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """``(kind, where)`` of a fresh, empty store."""
    kind: str = request.param
    if kind.startswith("http-"):
        testing = _server_testing()
        _, db = request.getfixturevalue("location_of_" + kind.removeprefix("http-"))
        running = testing.running_server(db, home=tmp_path / "server")
        server = running.__enter__()
        request.addfinalizer(lambda: running.__exit__(None, None, None))
        return kind, f"{server.url}#{server.token}"
    return request.getfixturevalue("location_of_" + kind)


@pytest.fixture
def location_of_sqlite(tmp_path: Path) -> tuple[str, str]:
    return "sqlite", str(tmp_path / "portal.db")


@pytest.fixture
def location_of_postgres(pg: PostgresServer) -> tuple[str, str]:
    return "postgres", pg.new_database()


@pytest.fixture
def store(location: tuple[str, str]) -> Iterator[ControlStore]:
    db = open_store(*location)
    yield db
    db.close()


def make_job(job_id: str = "j-0000000001", name: str | None = None, at: float = 1.0) -> Job:
    return Job(
        id=job_id,
        name=name,
        script="train.py",
        args=("--lr", "0.1"),
        workdir="/w",
        created_at=at,
        memory_gib=2.5,
        state_gib=1.5,
    )


def event(job_id: str, message: str, at: float = 1.0, **data: Any) -> Event:
    return Event(job_id=job_id, at=at, kind="tick", message=message, data=data)


# --- jobs -------------------------------------------------------------------------------------


def test_jobs_by_id_or_name_and_listed_in_creation_order(store: ControlStore) -> None:
    second = store.create_job(make_job("j-b", name="second", at=2.0))
    first = store.create_job(make_job("j-a", name=None, at=1.0))
    assert store.get_job("j-b") == second
    assert store.get_job("second") == second
    assert store.get_job("j-a") == first
    assert [j.id for j in store.list_jobs()] == ["j-a", "j-b"]
    with pytest.raises(JobNotFoundError, match=r"'nope'.*portal jobs") as err:
        store.get_job("nope")
    assert err.value.details == {"job": "nope"}


def test_an_id_wins_over_a_name_that_spells_it(store: ControlStore) -> None:
    store.create_job(make_job("j-a", name="j-b"))
    store.create_job(make_job("j-b", name="other"))
    assert store.get_job("j-b").id == "j-b"


def test_names_are_unique_but_many_jobs_have_none(store: ControlStore) -> None:
    store.create_job(make_job("j-a", name="train"))
    with pytest.raises(InvalidArgumentError, match=r"'train' already exists.*--name"):
        store.create_job(make_job("j-b", name="train"))
    store.create_job(make_job("j-c"))
    store.create_job(make_job("j-d"))
    assert [j.id for j in store.list_jobs()] == ["j-a", "j-c", "j-d"]


def test_state_changes_compare_and_set(store: ControlStore) -> None:
    store.create_job(make_job("j-a"))
    job = store.set_job_state("j-a", JobState.PAUSING, expect=[JobState.RUNNING])
    assert job.state is JobState.PAUSING
    with pytest.raises(JobStateConflictError, match=r"j-a is pausing, not running or lost") as err:
        store.set_job_state("j-a", JobState.DONE, expect=[JobState.RUNNING, JobState.LOST])
    assert err.value.details == {"job": "j-a", "state": "pausing"}
    assert store.get_job("j-a").state is JobState.PAUSING
    assert store.set_job_state("j-a", JobState.SUSPENDED).state is JobState.SUSPENDED
    with pytest.raises(JobNotFoundError):
        store.set_job_state("j-zz", JobState.DONE)


# --- attempts and liveness --------------------------------------------------------------------


def test_attempts_are_numbered_and_ended(store: ControlStore) -> None:
    store.create_job(make_job("j-a"))
    one = store.start_attempt("j-a", machine="m1", at=10.0)
    assert (one.number, one.machine, one.state) == (1, "m1", AttemptState.RUNNING)
    assert store.last_heard("j-a") == 10.0
    ended = store.end_attempt("j-a", 1, state=AttemptState.SUSPENDED, at=12.0, exit_code=0)
    assert (ended.state, ended.ended_at, ended.exit_code) == (AttemptState.SUSPENDED, 12.0, 0)
    two = store.start_attempt("j-a", machine="m2", at=20.0, resumed_from="ck-1")
    assert (two.number, two.resumed_from) == (2, "ck-1")
    assert [a.number for a in store.attempts("j-a")] == [1, 2]
    assert store.attempts("j-none") == []


def test_attempts_of_unknown_jobs_and_numbers_are_refused_clearly(store: ControlStore) -> None:
    with pytest.raises(JobNotFoundError, match="no job 'j-none'"):
        store.start_attempt("j-none", machine="m", at=1.0)
    store.create_job(make_job("j-a"))
    with pytest.raises(InvalidArgumentError, match="has no attempt 3"):
        store.end_attempt("j-a", 3, state=AttemptState.EXITED, at=2.0, exit_code=0)


def test_heard_keeps_the_latest_time(store: ControlStore) -> None:
    store.create_job(make_job("j-a"))
    assert store.last_heard("j-a") is None
    store.heard("j-a", 5.0)
    store.heard("j-a", 3.0)
    assert store.last_heard("j-a") == 5.0
    store.heard("j-none", 1.0)  # unknown jobs are ignored, as a late report of a removed job
    assert store.last_heard("j-none") is None


# --- events and reclaims ----------------------------------------------------------------------


def test_events_are_ordered_per_job_and_incremental(store: ControlStore) -> None:
    s1 = store.append_event(event("j-a", "a"))
    store.append_event(event("j-b", "other job"))
    s2 = store.append_event(event("j-a", "b", at=2.0, deadline_s=120, why="spot"))
    assert s2 > s1
    assert [(s, e.message) for s, e in store.events("j-a")] == [(s1, "a"), (s2, "b")]
    ((seq, only),) = store.events("j-a", after=s1)
    assert seq == s2
    assert only == event("j-a", "b", at=2.0, deadline_s=120, why="spot")
    assert store.events("j-a", after=s2) == []


def test_a_message_longer_than_a_service_keeps_is_cut_not_refused(
    store: ControlStore, location: tuple[str, str]
) -> None:
    """A 100 kB message (an exception's text) is kept whole by a database, and cut with a mark
    by a service (which caps messages at 16 kB): never refused, which would block the journal
    of the node that sent it."""
    store.append_event(event("j-a", "x" * 100_000))
    ((_, kept),) = store.events("j-a")
    if location[0].startswith("http-"):
        assert len(kept.message) == 16_384
        assert kept.message.endswith(" … (cut: the whole is in the node's log)")
    else:
        assert kept.message == "x" * 100_000


def test_a_report_sent_again_is_recorded_once(store: ControlStore) -> None:
    """A node whose report timed out sends it again (the first one may have arrived): each
    report id is recorded once per job, at its first seq; events without an id are all kept."""
    first = store.append_event(attrs.evolve(event("j-a", "notice"), id="r-1"))
    again = store.append_event(attrs.evolve(event("j-a", "notice", at=9.0), id="r-1"))
    other = store.append_event(attrs.evolve(event("j-a", "notice"), id="r-2"))
    plain = [store.append_event(event("j-a", "no id")) for _ in range(2)]
    elsewhere = store.append_event(attrs.evolve(event("j-b", "notice"), id="r-1"))
    assert again == first and len({first, other, *plain, elsewhere}) == 5
    assert [(s, e.message, e.at) for s, e in store.events("j-a")] == [
        (first, "notice", 1.0),
        (other, "notice", 1.0),
        (plain[0], "no id", 1.0),
        (plain[1], "no id", 1.0),
    ]


def test_a_database_of_an_older_portal_takes_report_ids(tmp_path: Path) -> None:
    """A SQLite file made before reports had ids is upgraded when opened; its events stay."""
    path = tmp_path / "portal.db"
    with contextlib.closing(sqlite3.connect(path)) as old:
        old.executescript(
            "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL,"
            " at REAL NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL, data TEXT NOT NULL);"
            " INSERT INTO events (job_id, at, kind, message, data)"
            " VALUES ('j-a', 1.0, 'tick', 'kept', '{}');"
        )
    store = SqliteControlStore(path)
    try:
        assert [e.message for _, e in store.events("j-a")] == ["kept"]
        seq = store.append_event(attrs.evolve(event("j-a", "new"), id="r-1"))
        assert store.append_event(attrs.evolve(event("j-a", "new"), id="r-1")) == seq
        assert [e.message for _, e in store.events("j-a")] == ["kept", "new"]
    finally:
        store.close()


def test_a_database_of_an_older_portal_takes_state_guesses(tmp_path: Path) -> None:
    """A SQLite file made before --state-gib was apart from --memory: its jobs stay, with no
    guess, and a new job keeps one."""
    path = tmp_path / "portal.db"
    store = SqliteControlStore(path)
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as old:  # as the older Portal left it
        old.executescript(
            "DROP TABLE jobs; CREATE TABLE jobs (id TEXT PRIMARY KEY, name TEXT UNIQUE,"
            " script TEXT NOT NULL, args TEXT NOT NULL, workdir TEXT NOT NULL,"
            " created_at REAL NOT NULL, state TEXT NOT NULL, memory_gib REAL, last_heard REAL);"
            " INSERT INTO jobs (id, script, args, workdir, created_at, state, memory_gib)"
            " VALUES ('j-old', 'train.py', '[]', '/w', 1.0, 'running', 8.0);"
            " PRAGMA user_version = 0;"
        )
    store = SqliteControlStore(path)
    try:
        kept = store.get_job("j-old")
        assert (kept.memory_gib, kept.state_gib) == (8.0, None)
        assert store.get_job(store.create_job(make_job("j-new")).id).state_gib == 1.5
    finally:
        store.close()


def test_a_stalled_service_that_took_a_report_late_records_it_once(
    location_of_sqlite: tuple[str, str], tmp_path: Path
) -> None:
    """The service stops answering (SIGSTOP) while a report is on its way: the client times
    out and sends it again once the service is back, as the node's journal does. The service
    took the first one meanwhile; the second is the same report, and is not recorded again."""
    testing = _server_testing()
    with testing.running_server(location_of_sqlite[1], home=tmp_path / "server") as server:
        client = open_store("http-sqlite", f"{server.url}#{server.token}", timeout=0.5)
        try:
            report = attrs.evolve(event("j-a", "notice from aws"), id="r-stalled")
            client.append_event(event("j-a", "warm"))  # the connection is open
            server.process.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(PortalError):
                    client.append_event(report)  # sent; no answer in time
            finally:
                server.process.send_signal(signal.SIGCONT)
            for _ in range(3):  # the journal's retries
                client.append_event(report)
            messages = [e.message for _, e in client.events("j-a")]
            assert messages == ["warm", "notice from aws"]
        finally:
            client.close()


def test_reclaims_since_oldest_first(store: ControlStore) -> None:
    store.record_reclaim("aws/us-east-1a/m5", 30.0, "i-3")
    store.record_reclaim("gcp/us-central1-a/n2", 10.0, "vm-1")
    store.record_reclaim("aws/us-east-1a/m5", 20.0, "i-2")
    assert store.reclaims(0.0) == [
        ("gcp/us-central1-a/n2", 10.0),
        ("aws/us-east-1a/m5", 20.0),
        ("aws/us-east-1a/m5", 30.0),
    ]
    assert store.reclaims(20.0) == [("aws/us-east-1a/m5", 20.0), ("aws/us-east-1a/m5", 30.0)]


# --- concurrent writers -----------------------------------------------------------------------


def _leave_thread(store: ControlStore) -> None:
    """Called by a thread that is done with ``store``. SqliteControlStore.close() closes only the
    calling thread's connection, so each thread closes its own; PostgresControlStore.close()
    closes them all, and the test does that once at the end."""
    if isinstance(store, SqliteControlStore):
        store.close()


def _in_threads(store: ControlStore, n: int, work: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = work(i)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            _leave_thread(store)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


def test_one_writer_wins_each_compare_and_set(store: ControlStore) -> None:
    jobs = [f"j-{i}" for i in range(10)]
    for job_id in jobs:
        store.create_job(make_job(job_id))

    def pause_all(_: int) -> int:
        won = 0
        for job_id in jobs:
            try:
                store.set_job_state(job_id, JobState.PAUSING, expect=[JobState.RUNNING])
                won += 1
            except JobStateConflictError:
                pass
        return won

    assert sum(_in_threads(store, 4, pause_all)) == len(jobs)


def test_a_reader_following_events_sees_each_once_in_order(store: ControlStore) -> None:
    """Writers append to one job while a reader polls ``events(after=last)``: nothing is skipped
    (an event committed after a later-numbered one would be) and nothing is seen twice."""
    writers, each = 4, 40
    seen: list[int] = []
    done = threading.Event()

    def follow() -> None:
        last = 0
        while True:
            finished = done.is_set()
            for seq, _ in store.events("j-a", after=last):
                seen.append(seq)
                last = seq
            if finished:
                _leave_thread(store)
                return

    reader = threading.Thread(target=follow)
    reader.start()
    try:
        appended = _in_threads(
            store,
            writers,
            lambda w: [store.append_event(event("j-a", f"{w}/{i}")) for i in range(each)],
        )
    finally:
        done.set()
        reader.join(60)
    every = sorted(s for mine in appended for s in mine)
    assert len(set(every)) == writers * each
    assert seen == every
    assert all(mine == sorted(mine) for mine in appended)


def _hammer(kind: str, where: str, job_id: str, n: int, out: Any) -> None:
    store = open_store(kind, where)
    seqs, numbers = [], []
    for i in range(n):
        seqs.append(store.append_event(event(job_id, str(i), at=float(i))))
        numbers.append(store.start_attempt(job_id, machine=f"m{os.getpid()}", at=float(i)).number)
        store.heard(job_id, float(i))
    store.close()
    out.put((seqs, numbers))


def test_concurrent_processes_lose_and_duplicate_nothing(location: tuple[str, str]) -> None:
    store = open_store(*location)
    store.create_job(make_job("j-a"))
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(*location, "j-a", 20, out)) for _ in range(3)]
    for p in procs:
        p.start()
    reports = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    seqs = sorted(s for mine, _ in reports for s in mine)
    assert [s for s, _ in store.events("j-a")] == seqs
    assert len(set(seqs)) == 60
    attempts = store.attempts("j-a")
    assert [a.number for a in attempts] == list(range(1, 61))
    assert sorted(Counter(a.machine for a in attempts).values()) == [20, 20, 20]
    # Each writer got back its own attempt, never another process's.
    assert sorted(n for _, mine in reports for n in mine) == list(range(1, 61))
    store.close()


# --- PostgreSQL: migrations, timeouts and errors ------------------------------------------------

_OPEN_AT_ONCE = """
import json, os, sys, time
from portal.control.postgres import PostgresControlStore
open(sys.argv[3], "w").close()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.001)
store = PostgresControlStore(sys.argv[1])
print(json.dumps(store.applied_migrations))
store.close()
"""


def test_migrations_apply_once_when_processes_open_a_fresh_database_together(
    pg: PostgresServer, tmp_path: Path
) -> None:
    from portal.control.postgres import MIGRATIONS, PostgresControlStore

    url, go = pg.new_database(), tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AT_ONCE, url, str(go), str(mark)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mark in ready
    ]
    deadline = time.monotonic() + 120
    while not all(m.exists() for m in ready) and time.monotonic() < deadline:
        time.sleep(0.01)  # every process imported and waits at the line: then all go at once
    go.touch()
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outputs
    applied = sorted(v for stdout, _ in outputs for v in json.loads(stdout))
    assert applied == [v for v, _, _ in MIGRATIONS]
    store = PostgresControlStore(url)
    assert store.applied_migrations == []
    assert store.schema_versions() == applied
    store.close()


def test_a_database_from_a_newer_portal_is_refused(pg: PostgresServer) -> None:
    import psycopg

    from portal.control.postgres import ControlDatabaseError, PostgresControlStore

    url = pg.new_database()
    PostgresControlStore(url).close()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("INSERT INTO schema_migrations (version, name) VALUES (999, 'future')")
    with pytest.raises(ControlDatabaseError, match=r"schema version 999.*upgrade portal"):
        PostgresControlStore(url)


def test_a_short_timeout_gives_up_while_another_writer_holds_the_job(pg: PostgresServer) -> None:
    import psycopg

    from portal.control.postgres import PostgresControlStore

    url = pg.new_database()
    store = PostgresControlStore(url, timeout=0.1)
    store.create_job(make_job("j-a"))
    with psycopg.connect(url) as holder:  # a transaction, open until the block ends
        holder.execute("SELECT 1 FROM jobs WHERE id = 'j-a' FOR UPDATE")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            store.set_job_state("j-a", JobState.DONE)
        assert store.get_job("j-a").state is JobState.RUNNING  # readers never wait
    assert store.set_job_state("j-a", JobState.DONE).state is JobState.DONE
    store.close()


def test_an_unreachable_server_is_named_with_the_way_out(pg: PostgresServer) -> None:
    from portal.control.postgres import ControlDatabaseError, PostgresControlStore

    with pytest.raises(
        ControlDatabaseError,
        match=r"cannot reach .*portal:\*\*\*@127\.0\.0\.1:9/"
        r"x.*PORTAL_CONTROL_DB",
    ) as err:
        PostgresControlStore("postgresql://portal:secret@127.0.0.1:9/x", timeout=2)
    assert "secret" not in str(err.value)
    assert err.value.code == "CONTROL_DB_UNAVAILABLE"


def test_a_missing_driver_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from portal.control.postgres import PostgresControlStore\n"
        "PostgresControlStore('postgresql://u@127.0.0.1:9/x')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "pip install 'portal-spot[postgres]'" in done.stderr


# --- choosing the store -----------------------------------------------------------------------


def test_control_db_setting_is_validated(tmp_path: Path) -> None:
    env = {"PORTAL_HOME": str(tmp_path)}
    assert Settings.load(environ=env).control_db == "sqlite"
    with pytest.raises(InvalidSettingError, match=r"PORTAL_CONTROL_DB.*postgresql:// URL"):
        Settings.load(environ={**env, "PORTAL_CONTROL_DB": "mysql://h/db"})
    url = "postgresql://u@127.0.0.1:5432/portal"
    assert Settings.load({"control_db": url}, environ=env).control_db == url


def test_the_default_is_the_embedded_file(tmp_path: Path) -> None:
    store = open_control_store(Settings.load(environ={"PORTAL_HOME": str(tmp_path)}))
    assert isinstance(store, SqliteControlStore)
    assert store.path == tmp_path / "portal.db"
    store.close()


def test_the_control_plane_runs_on_postgres(pg: PostgresServer, tmp_path: Path) -> None:
    from portal.control.postgres import PostgresControlStore

    url = pg.new_database()
    env = {"PORTAL_HOME": str(tmp_path), "PORTAL_CONTROL_DB": url}
    plane = ControlPlane(Settings.load(environ=env))
    assert isinstance(plane.store, PostgresControlStore)
    job = plane.create_job(script="train.py", workdir=tmp_path, name="train")
    again = ControlPlane(Settings.load(environ=env))  # another process would see the same
    assert again.job("train") == job
    assert [e.kind for _, e in again.store.events(job.id)] == ["created"]
    assert not (tmp_path / "portal.db").exists()
    plane.store.close()
    again.store.close()


@pytest.mark.one_python
def test_notice_suspend_and_resume_through_the_cli_on_postgres(
    pg: PostgresServer, portal: Any
) -> None:
    """The whole local loop (CLI, node, runtime) with its records on the PostgreSQL server."""
    from portal.control.postgres import PostgresControlStore

    url = pg.new_database()
    portal.env["PORTAL_CONTROL_DB"] = url
    expected = portal.plain("count.py", "7")
    run = portal.start("run", "--name", "count", "count.py", "7")
    portal.wait_for_output("count", "step 5 ")
    assert portal("notice", "count", "--seconds", "120").returncode == 0
    out, err = run.communicate(timeout=60)
    assert run.returncode == 75, err
    resumed = portal("resume", "count")
    assert resumed.returncode == 0, resumed.stderr
    assert out + resumed.stdout == expected
    assert not (portal.home / "portal.db").exists()
    store = PostgresControlStore(url)
    job = store.get_job("count")
    assert job.state is JobState.DONE
    assert [a.state for a in store.attempts(job.id)] == [
        AttemptState.SUSPENDED,
        AttemptState.EXITED,
    ]
    store.close()


# --- both stores answer every sequence of operations alike ------------------------------------

_NAMES = st.sampled_from([None, "a", "b", "j-1"])
_TIMES = st.sampled_from([0.0, 1.0, 1.5, 2.0, 1e9 + 0.25])
_STATES = st.sampled_from(list(JobState))
_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=8)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("create"), _NAMES, _TIMES),
        st.tuples(st.just("get"), st.sampled_from(["j-1", "j-2", "a", "b", "zz"])),
        st.tuples(
            st.just("set"),
            st.integers(0, 3),
            _STATES,
            st.none() | st.lists(_STATES, min_size=1, max_size=2),
        ),
        st.tuples(st.just("start"), st.integers(0, 3), _TIMES, st.none() | st.just("ck")),
        st.tuples(
            st.just("end"),
            st.integers(0, 3),
            st.sampled_from(list(AttemptState)),
            _TIMES,
            st.none() | st.integers(-9, 9),
        ),
        st.tuples(st.just("heard"), st.integers(0, 3), _TIMES),
        st.tuples(st.just("event"), st.integers(0, 3), _TIMES, _TEXT, _TEXT),
        st.tuples(st.just("events"), st.integers(0, 3), st.integers(0, 6)),
        st.tuples(st.just("reclaim"), st.sampled_from(["p1", "p2"]), _TIMES),
        st.tuples(st.just("reclaims"), _TIMES),
    ),
    max_size=25,
)


def _play(store: ControlStore, ops: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``ops`` on ``store``; what each returned or the code of what it raised."""
    ids: list[str] = []  # the jobs created so far
    created = 0
    seen: list[Any] = []

    def job_at(i: int) -> str:
        return ids[i % len(ids)] if ids else "j-none"

    for op in ops:
        try:
            match op:
                case ("create", name, at):
                    created += 1
                    result: Any = store.create_job(make_job(f"j-{created}", name=name, at=at))
                    ids.append(result.id)
                case ("get", ref):
                    result = store.get_job(ref)
                case ("set", i, state, expect):
                    result = store.set_job_state(job_at(i), state, expect=expect)
                case ("start", i, at, resumed_from):
                    if not ids:  # an attempt of an unknown job is a caller's bug on both stores
                        continue
                    result = store.start_attempt(
                        job_at(i), machine="m", at=at, resumed_from=resumed_from
                    )
                case ("end", i, state, at, code):
                    numbers = [a.number for a in store.attempts(job_at(i))]
                    if not numbers:
                        continue
                    result = store.end_attempt(
                        job_at(i), numbers[-1], state=state, at=at, exit_code=code
                    )
                case ("heard", i, at):
                    store.heard(job_at(i), at)
                    result = store.last_heard(job_at(i))
                case ("event", i, at, message, value):
                    result = store.append_event(
                        Event(job_id=job_at(i), at=at, kind="k", message=message, data={"v": value})
                    )
                case ("events", i, after):
                    result = store.events(job_at(i), after=after)
                case ("reclaim", pool, at):
                    result = store.record_reclaim(pool, at, "m")
                case ("reclaims", since):
                    result = store.reclaims(since)
                case _:
                    raise AssertionError(op)
        except PortalError as exc:
            result = ("error", exc.code, exc.details)
        seen.append(result)
    seen.append(store.list_jobs())
    seen.append([store.attempts(j) for j in ids])
    return seen


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS)
def test_both_stores_answer_alike(pg_database: str, ops: list[tuple[Any, ...]]) -> None:
    import psycopg

    from portal.control.postgres import PostgresControlStore

    with psycopg.connect(pg_database, autocommit=True) as db:
        db.execute("TRUNCATE jobs, attempts, events, reclaims RESTART IDENTITY")
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SqliteControlStore(Path(tmp) / "portal.db")
        postgres = PostgresControlStore(pg_database)
        try:
            assert _play(postgres, ops) == _play(sqlite, ops)
        finally:
            sqlite.close()
            postgres.close()


@pytest.fixture(scope="module")
def pg_database(pg: PostgresServer) -> str:
    """One migrated database for the property test; each example empties it first."""
    from portal.control.postgres import PostgresControlStore

    url = pg.new_database()
    PostgresControlStore(url).close()
    return url


@pytest.fixture(scope="module")
def pg_service(pg_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `portal server` over :func:`pg_database`, as ``URL#TOKEN`` (see :func:`open_store`)."""
    testing = _server_testing()
    with testing.running_server(pg_database, home=tmp_path_factory.mktemp("service")) as server:
        yield f"{server.url}#{server.token}"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS)
def test_the_service_answers_as_the_embedded_store(
    pg_database: str, pg_service: str, ops: list[tuple[Any, ...]]
) -> None:
    """Through HTTP (wire types, errors, URLs) every answer is the embedded store's."""
    import psycopg

    with psycopg.connect(pg_database, autocommit=True) as db:
        db.execute("TRUNCATE jobs, attempts, events, reclaims RESTART IDENTITY")
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SqliteControlStore(Path(tmp) / "portal.db")
        service = open_store("http-postgres", pg_service)
        try:
            assert _play(service, ops) == _play(sqlite, ops)
        finally:
            sqlite.close()
            service.close()


def test_a_control_plane_service_is_chosen_by_environment_or_config_file(tmp_path: Path) -> None:
    """Opening the client connects to nothing: no server is needed to choose it."""
    from portal.control.remote import HttpControlStore

    env = {"PORTAL_HOME": str(tmp_path), "PORTAL_CONTROL_PLANE": "http://127.0.0.1:9/"}
    store = open_control_store(
        Settings.load(environ={**env, "PORTAL_TOKEN": "t1"}), busy_timeout_s=2
    )
    assert isinstance(store, HttpControlStore)
    assert (store.url, store.timeout) == ("http://127.0.0.1:9", 2)
    (tmp_path / "config.toml").write_text(
        'control_plane = "https://control.example:8471"\ncontrol_token = "t2"\n'
    )
    from_file = open_control_store(Settings.load(environ={"PORTAL_HOME": str(tmp_path)}))
    assert isinstance(from_file, HttpControlStore) and from_file.url.startswith("https://control")
    assert from_file._headers["Authorization"] == "Bearer t2"
    env_wins = open_control_store(Settings.load(environ=env))
    assert isinstance(env_wins, HttpControlStore) and env_wins.url == "http://127.0.0.1:9"
    assert env_wins._headers["Authorization"] == "Bearer t2"  # the file's token, env's server
    (tmp_path / "config.toml").write_text('control_token = "t3"\n')
    store = open_control_store(Settings.load(environ={"PORTAL_HOME": str(tmp_path)}))
    assert isinstance(store, SqliteControlStore)  # a token alone names no server
    store.close()
