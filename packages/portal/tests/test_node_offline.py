"""A node that loses contact with the control plane during a notice saves the checkpoint on its
own and reports later (the spec's "What happens on a notice").

The control plane is made unreachable for real: the test holds SQLite's write lock on
``portal.db`` (readers go on, as with a control plane that answers reads but takes no reports),
so every report of the node times out and goes to its journal, ``backlog.jsonl``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import PortalCli


@contextmanager
def control_plane_unreachable(portal: PortalCli) -> Iterator[None]:
    db = sqlite3.connect(portal.home / "portal.db", isolation_level=None, timeout=30)
    db.execute("BEGIN IMMEDIATE")  # nobody else may write until we let go
    try:
        yield
    finally:
        db.execute("ROLLBACK")
        db.close()


def _store(portal: PortalCli) -> Any:
    from portal.storage import CheckpointStore, resolve_key_store

    return CheckpointStore((portal.home / "store").as_uri(), resolve_key_store(str(portal.home)))


def _backlog(portal: PortalCli, job: str, attempt: int = 1) -> list[dict[str, Any]]:
    path = portal.home / "jobs" / job / "attempts" / str(attempt) / "backlog.jsonl"
    try:
        return [json.loads(line) for line in path.read_text().splitlines()]
    except FileNotFoundError:
        return []


def _until(what: str, predicate: Any, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout:g} s")


def _offline_notice(portal: PortalCli, name: str) -> tuple[str, float]:
    """Run count.py, then deliver a notice while the control plane takes no reports; returns
    the job id and when the notice went out. Leaves the node's whole report in its journal."""
    job = portal("run", "--detach", "--name", name, "count.py", "7").stdout.strip()
    portal.wait_for_output(job, "step 5 ")
    return job, time.time()


@pytest.mark.one_python
def test_the_node_saves_on_its_own_and_reports_later(portal: PortalCli) -> None:
    expected = portal.plain("count.py", "7")
    job, _ = _offline_notice(portal, "off")
    store = _store(portal)
    with control_plane_unreachable(portal):
        sent = time.time()
        assert portal("notice", job, "--seconds", "60").returncode == 0
        # The checkpoint is saved although no report goes through.
        _until("the checkpoint's upload", lambda: store.latest_complete(job) is not None)
        _until("the end of the attempt in the journal", lambda: _ends(_backlog(portal, job)))
        kinds = [e.get("kind") for e in _backlog(portal, job) if e["op"] == "event"]
        assert kinds.index("notice") < kinds.index("paused") < kinds.index("suspended")
        assert portal.state(job) == "running"  # nothing reported yet: the job keeps its state
        released = time.time()
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    _until("the journal's delivery", lambda: not _backlog(portal, job))
    events = _events(portal, job)
    kinds = [e["kind"] for e in events]
    assert kinds.index("notice") < kinds.index("paused") < kinds.index("suspended")
    assert kinds.index("suspended") < kinds.index("reported-late")
    notice = next(e for e in events if e["kind"] == "notice")
    assert sent - 1 <= notice["at"] < released  # recorded with the time it happened
    late = next(e for e in events if e["kind"] == "reported-late")
    assert "could not be reached" in late["message"] and late["data"]["kept"] >= 3
    assert "reported-late: the control plane could not be reached" in portal("explain", job).stdout
    resumed = portal("resume", job)
    assert resumed.returncode == 0, resumed.stderr
    assert portal("logs", job).stdout == expected


@pytest.mark.one_python
def test_a_backlog_left_by_a_killed_node_is_replayed(portal: PortalCli) -> None:
    expected = portal.plain("count.py", "7")
    job, _ = _offline_notice(portal, "off9")
    with control_plane_unreachable(portal):
        assert portal("notice", job, "--seconds", "60").returncode == 0
        _until("the end of the attempt in the journal", lambda: _ends(_backlog(portal, job)))
        pid = int((portal.home / "jobs" / job / "attempts" / "1" / "node.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        _until("the node's death", lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid))
    status = json.loads(portal("status", job, "--json").stdout)
    assert status["state"] == "suspended"
    assert [a["state"] for a in status["attempts"]] == ["suspended"]  # as the node said
    assert not _backlog(portal, job)
    kinds = [e["kind"] for e in _events(portal, job)]
    assert "suspended" in kinds and "reported-late" in kinds and "node-died" not in kinds
    assert portal("resume", job).returncode == 0
    assert portal("logs", job).stdout == expected


def _ends(backlog: list[dict[str, Any]]) -> bool:
    return any(e["op"] == "end" for e in backlog)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except OSError:
        return True


def _events(portal: PortalCli, job: str) -> list[dict[str, Any]]:
    db = sqlite3.connect(portal.home / "portal.db")
    try:
        rows = db.execute(
            "SELECT at, kind, message, data FROM events WHERE job_id = ? ORDER BY seq", (job,)
        ).fetchall()
    finally:
        db.close()
    return [{"at": r[0], "kind": r[1], "message": r[2], "data": json.loads(r[3])} for r in rows]
