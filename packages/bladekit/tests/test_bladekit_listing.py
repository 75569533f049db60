"""``bladekit.listing.runs``: every run from its files, half-written ones included."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import bladekit_testapps as apps
import pytest

import bladekit
from bladekit.listing import runs
from bladekit.records import RunStatus, write_status


def test_no_home_no_runs(tmp_path: Path) -> None:
    assert runs(tmp_path / "nowhere") == []


def test_real_runs_done_failed_preempted_out(tmp_path: Path, portal_home: Path) -> None:
    started = time.time()
    assert apps.add.remote(1, 2) == 3
    with pytest.raises(ValueError):
        apps.fail.remote("value")
    counter = apps.Counter("ok", str(tmp_path / "c.pkl"))  # max_interruptions=1
    counter.bump.remote()
    for _ in range(2):
        assert bladekit.run_of(counter).preempt(seconds=5, wait=True)
        with pytest.raises(bladekit.PreemptedError) if _ else _nothing():
            counter.bump.remote()
    counter.close()
    rows = {row.function: row for row in runs(portal_home)}
    assert {name: row.state for name, row in rows.items()} == {
        "add": "done",
        "fail": "failed",
        "Counter": "preempted-out",
    }
    counter_row = rows["Counter"]
    assert (counter_row.attempts, counter_row.interruptions) == (2, 2)
    assert counter_row.app == "bladekit-tests" and counter_row.run_id.startswith("bk-")
    # The callback's save_checkpoint was recorded by the container.
    assert counter_row.checkpoint_bytes and counter_row.checkpoint_at
    assert all(started <= row.submitted_at <= (row.ended_at or 0) for row in rows.values())


def test_portal_jobs_rows_count_resumes_name_the_method_and_say_why_a_run_failed(
    tmp_path: Path, portal_home: Path
) -> None:
    """Through the portal_job_listings hook: recoveries are the attempts that resumed from a
    checkpoint (not the preemptions); a run out of preemptions is Portal's ``failed`` with its
    reason in ``error``; a class's run is named with its method."""
    from bladekit.portal_plugin import portal_job_listings

    counter = apps.Counter("ok", str(tmp_path / "c.pkl"))  # max_interruptions=1
    counter.bump.remote()
    assert bladekit.run_of(counter).preempt(seconds=5, wait=True)
    assert counter.bump.remote()[0] == 2  # attempt 2 loaded attempt 1's checkpoint
    assert bladekit.run_of(counter).preempt(seconds=5, wait=True)
    with pytest.raises(bladekit.PreemptedError):
        counter.bump.remote()
    counter.close()
    assert apps.add.remote(1, 2) == 3

    rows = {row["job"]: row for row in portal_job_listings(str(portal_home))}
    counted = rows[bladekit.run_of(counter).run_id]
    assert (counted["attempts"], counted["recoveries"]) == (2, 1)
    assert counted["state"] == "failed"
    assert counted["error"].startswith("preempted-out: preempted 2 times")
    assert counted["name"] == "bladekit-tests.Counter.bump"
    assert counted["script"] == "bladekit bladekit-tests::Counter.bump"
    (added,) = [row for row in rows.values() if row is not counted]
    assert (added["name"], added["state"], added["recoveries"], added["error"]) == (
        "bladekit-tests.add",
        "done",
        0,
        None,
    )


class _nothing:
    def __enter__(self) -> None: ...
    def __exit__(self, *exc: object) -> None: ...


def test_half_written_and_orphaned_runs(portal_home: Path) -> None:
    root = portal_home / "bladekit" / "runs"
    (root / "bk-creating").mkdir(parents=True)  # no request.json yet: left out
    legacy = root / "bk-legacy"  # an older bladekit: no status.json
    (legacy / "attempts" / "1").mkdir(parents=True)
    (legacy / "attempts" / "2").mkdir(parents=True)
    (legacy / "request.json").write_bytes(b'{"app":"a","function":"f"}')
    torn = root / "bk-torn"
    torn.mkdir()
    (torn / "request.json").write_bytes(b'{"app":"a","function":"g"}')
    (torn / "status.json").write_bytes(b'{"state":"runn')
    (torn / "checkpoint.json").write_bytes(b"{")
    orphan = root / "bk-orphan"
    orphan.mkdir()
    (orphan / "request.json").write_bytes(b'{"app":"a","function":"h"}')
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    write_status(
        orphan,
        RunStatus(
            submitted_at=1.0,
            attempts=1,
            owner_pid=int(dead.stdout),
            owner_host=socket.gethostname(),
        ),
    )
    rows = {row.run_id: row for row in runs(portal_home)}
    assert set(rows) == {"bk-legacy", "bk-torn", "bk-orphan"}
    assert (rows["bk-legacy"].state, rows["bk-legacy"].attempts) == ("running", 2)
    assert rows["bk-torn"].function == "g" and rows["bk-torn"].checkpoint_bytes is None
    assert rows["bk-orphan"].state == "failed"  # its caller is gone without closing it
    assert next(iter(rows)) == "bk-orphan"  # oldest first
