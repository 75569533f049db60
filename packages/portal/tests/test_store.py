"""The SQLite control store, including concurrent writers in separate processes."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.control.store import (
    JobNotFoundError,
    JobStateConflictError,
    SqliteControlStore,
    new_job_id,
)
from portal.core.domain import AttemptState, Event, Job, JobState
from portal.core.errors import InvalidArgumentError


def make_job(name: str | None = None) -> Job:
    return Job(
        id=new_job_id(),
        name=name,
        script="train.py",
        args=("--lr", "0.1"),
        workdir="/w",
        created_at=10.0,
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteControlStore]:
    db = SqliteControlStore(tmp_path / "portal.db")
    yield db
    db.close()


def test_jobs_by_id_or_name(store: SqliteControlStore) -> None:
    job = store.create_job(make_job("train"))
    assert store.get_job(job.id) == job
    assert store.get_job("train") == job
    assert store.list_jobs() == [job]
    with pytest.raises(JobNotFoundError, match="portal jobs"):
        store.get_job("nope")
    with pytest.raises(InvalidArgumentError, match="already exists"):
        store.create_job(make_job("train"))


def test_state_compare_and_set(store: SqliteControlStore) -> None:
    job = store.create_job(make_job())
    assert (
        store.set_job_state(job.id, JobState.PAUSING, expect=[JobState.RUNNING]).state == "pausing"
    )
    with pytest.raises(JobStateConflictError, match="is pausing, not running"):
        store.set_job_state(job.id, JobState.SUSPENDED, expect=[JobState.RUNNING])


def test_attempts_and_heartbeat(store: SqliteControlStore) -> None:
    job = store.create_job(make_job())
    a1 = store.start_attempt(job.id, machine="local", at=20.0)
    assert a1.number == 1 and store.last_heard(job.id) == 20.0
    store.heard(job.id, 25.0)
    store.heard(job.id, 22.0)  # a late report never moves last_heard back
    assert store.last_heard(job.id) == 25.0
    store.end_attempt(job.id, 1, state=AttemptState.SUSPENDED, at=30.0, exit_code=75)
    a2 = store.start_attempt(job.id, machine="local", at=40.0, resumed_from="c1")
    assert [a.number for a in store.attempts(job.id)] == [1, 2]
    assert store.attempts(job.id)[0].exit_code == 75 and a2.resumed_from == "c1"


def test_events_are_ordered_and_incremental(store: SqliteControlStore) -> None:
    job = store.create_job(make_job())
    s1 = store.append_event(Event(job_id=job.id, at=1, kind="created", message="a"))
    store.append_event(Event(job_id=job.id, at=2, kind="notice", message="b", data={"s": 120}))
    assert [e.message for _, e in store.events(job.id)] == ["a", "b"]
    ((_, only),) = store.events(job.id, after=s1)
    assert only.data == {"s": 120}


def _hammer(path: str, job_id: str, n: int) -> None:
    store = SqliteControlStore(path)
    for i in range(n):
        store.append_event(Event(job_id=job_id, at=float(i), kind="tick", message=str(i)))
        store.start_attempt(job_id, machine="m", at=float(i))
    store.close()


def test_concurrent_processes(tmp_path: Path) -> None:
    path = tmp_path / "portal.db"
    store = SqliteControlStore(path)
    job = store.create_job(make_job())
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(str(path), job.id, 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(store.events(job.id)) == 100
    assert [a.number for a in store.attempts(job.id)] == list(range(1, 101))
    store.close()


def test_a_short_busy_timeout_gives_up_while_another_writer_holds_the_lock(tmp_path: Path) -> None:
    """The node's store waits briefly, then raises: its journal keeps the report instead of a
    notice waiting on a stuck control plane. Readers are never blocked (WAL)."""
    import sqlite3

    path = tmp_path / "portal.db"
    store = SqliteControlStore(path, timeout=0.1)
    job = make_job()
    store.create_job(job)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            store.append_event(Event(job_id=job.id, at=1.0, kind="k", message="m", data={}))
        assert store.get_job(job.id).id == job.id
        holder.execute("ROLLBACK")
        store.append_event(Event(job_id=job.id, at=1.0, kind="k", message="m", data={}))
        assert [e.kind for _, e in store.events(job.id)] == ["k"]
    finally:
        holder.close()
        store.close()
