"""Control-plane throughput on SQLite and PostgreSQL. Run: ``python benchmarks/bench_control.py``.

Writer processes (1 and 4), each on a job of its own, for a fixed time from a common start:

- state changes: ``set_job_state`` with ``expect`` (a compare-and-set, as the CLI and node do),
  toggling running <-> pausing;
- events appended: ``append_event``, the node's reports.

Prints operations per second for each store and PostgreSQL's ratio to SQLite measured in the
same run; then the same through the control-plane service (``portal server`` on 127.0.0.1 over
each store, its client ``HttpControlStore``) and the service's ratio to its store. PostgreSQL is a throwaway server from Debian's package on 127.0.0.1 (``fsync=off``;
SQLite runs WAL with ``synchronous=NORMAL``, which does not sync each commit either), so both
measure the store's own work, not the disk. Needs ``portal-spot[postgres]`` and ``postgresql``; the
service rows need ``portal-server`` (skipped without it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "portal" / "tests"))

from pg_server import postgres_server

from portal.control.store import ControlStore, SqliteControlStore
from portal.core.domain import Event, Job, JobState

WORKLOADS = ("state changes", "events")


def open_store(kind: str, where: str) -> ControlStore:
    if kind == "sqlite":
        return SqliteControlStore(where)
    if kind.startswith("http-"):
        from portal.control.remote import HttpControlStore

        url, _, token = where.partition("#")  # the service's address and a token for it
        return HttpControlStore(url, token=token)
    from portal.control.postgres import PostgresControlStore

    return PostgresControlStore(where)


def _writer(
    kind: str, where: str, workload: str, job_id: str, seconds: float, go: Any, out: Any
) -> None:
    store = open_store(kind, where)
    states = (JobState.RUNNING, JobState.PAUSING)
    go.wait()
    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        if workload == "state changes":
            now = states[done % 2]
            store.set_job_state(job_id, states[(done + 1) % 2], expect=[now])
        else:
            store.append_event(Event(job_id=job_id, at=1.0, kind="tick", message=str(done)))
        done += 1
    store.close()
    out.put(done)


def measure(kind: str, where: str, workload: str, writers: int, seconds: float) -> float:
    """Operations per second, all writers together."""
    store = open_store(kind, where)
    jobs = []
    for _ in range(writers):
        job_id = f"j-{len(store.list_jobs()) + 1:010d}"
        store.create_job(Job(id=job_id, script="s.py", workdir="/w", created_at=time.time()))
        jobs.append(job_id)
    store.close()
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(kind, where, workload, j, seconds, go, out)) for j in jobs
    ]
    for p in procs:
        p.start()
    time.sleep(1.5)  # every writer imported and connected before the common start
    go.set()
    total = sum(out.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join(60)
    return total / seconds


@contextlib.contextmanager
def service(db: str, home: Path) -> Iterator[str]:
    """A `portal server` over ``db``, as ``URL#TOKEN`` for :func:`open_store`."""
    from portal.server.testing import running_server

    with running_server(db, home=home, user="bench") as server:
        yield f"{server.url}#{server.token}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="each measurement's length")
    parser.add_argument("--quick", action="store_true", help="0.5 s a measurement")
    args = parser.parse_args()
    seconds = 0.5 if args.quick else args.seconds
    results: dict[tuple[str, str, int], float] = {}
    with_service = importlib.util.find_spec("portal.server") is not None
    with postgres_server() as pg, tempfile.TemporaryDirectory() as tmp:
        for writers in (1, 4):
            for workload in WORKLOADS:
                sqlite_path = str(Path(tmp) / f"{workload[0]}{writers}.db")
                results["sqlite", workload, writers] = measure(
                    "sqlite", sqlite_path, workload, writers, seconds
                )
                results["postgres", workload, writers] = measure(
                    "postgres", pg.new_database(), workload, writers, seconds
                )
                if not with_service:
                    continue
                home = Path(tmp) / f"service-{workload[0]}{writers}"
                with service(str(home / "portal.db"), home) as where:
                    results["http-sqlite", workload, writers] = measure(
                        "http-sqlite", where, workload, writers, seconds
                    )
                with service(pg.new_database(), home) as where:
                    results["http-postgres", workload, writers] = measure(
                        "http-postgres", where, workload, writers, seconds
                    )
    print(f"control-plane throughput, operations/s ({seconds:g} s each, all writers together)")
    print(f"{'workload':<15} {'writers':>7} {'sqlite':>10} {'postgres':>10} {'pg/sqlite':>10}")
    for writers in (1, 4):
        for workload in WORKLOADS:
            lite, pg_rate = (
                results["sqlite", workload, writers],
                results["postgres", workload, writers],
            )
            print(
                f"{workload:<15} {writers:>7} {lite:>10.0f} {pg_rate:>10.0f} "
                f"{pg_rate / lite:>10.2f}"
            )
    if not with_service:
        print("(the service rows need portal-server: pip install portal-server)")
        return
    print()
    print(
        "through `portal server` (HTTP on 127.0.0.1), operations/s, and ratio to its store direct"
    )
    print(
        f"{'workload':<15} {'writers':>7} {'http+sqlite':>12} {'/sqlite':>8} "
        f"{'http+pg':>10} {'/pg':>8}"
    )
    for writers in (1, 4):
        for workload in WORKLOADS:
            over_lite = results["http-sqlite", workload, writers]
            over_pg = results["http-postgres", workload, writers]
            print(
                f"{workload:<15} {writers:>7} {over_lite:>12.0f} "
                f"{over_lite / results['sqlite', workload, writers]:>8.2f} "
                f"{over_pg:>10.0f} {over_pg / results['postgres', workload, writers]:>8.2f}"
            )


if __name__ == "__main__":
    main()
