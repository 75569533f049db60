"""The views every reader shares (portal.control.views): logs read as they grow, and the
console's Overview line and banner for each state of the checkpoint check."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.console.overview import banner, overview
from portal.control.carry import carry_state
from portal.control.plane import ControlPlane
from portal.control.views import JobViews, checkpoint_check_line
from portal.core.domain import Event
from portal.core.errors import InvalidArgumentError

PROBLEM = {
    "name": "digest",
    "type_name": "_hashlib.HASH",
    "reason": "TypeError: cannot pickle '_hashlib.HASH' object",
    "where": "train.py:42 in train",
}


@pytest.fixture
def views(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobViews]:
    monkeypatch.setenv("PORTAL_HOME", str(tmp_path / "home"))
    plane = ControlPlane()
    yield JobViews(plane)
    plane.store.close()  # Python 3.13 warns about a SQLite connection left to the collector


def event(kind: str, at: float, message: str = "", **data: object) -> Event:
    return Event(job_id="j-0", at=at, kind=kind, message=message, data=data)


def test_a_growing_log_is_read_whole_characters_at_a_time(views: JobViews) -> None:
    job = views.plane.create_job(script="train.py", workdir=".")
    views.plane.store.start_attempt(job.id, machine="local", at=1.0)
    out = views.plane.paths(job.id).stdout(1)
    out.parent.mkdir(parents=True)
    text = "loss 0.5 → 0.25 ✓\n"
    data = text.encode()
    arrow = data.index("→".encode())
    out.write_bytes(data[: arrow + 1])  # half of the arrow written so far
    first, offset = views.read_log(job, 1, "stdout")
    assert (first, offset) == ("loss 0.5 ", arrow)
    out.write_bytes(data)
    rest, offset = views.read_log(job, 1, "stdout", offset=offset)
    assert first + rest == text and offset == len(data)
    assert views.read_log(job, 1, "stdout", offset=offset) == ("", offset)
    assert views.read_log(job, 1, "stderr") == ("", 0)  # not written yet
    logs = views.logs(job, max_bytes=4)
    assert logs == [
        {
            "attempt": 1,
            "state": "running",
            "stdout": "✓\n",  # its last 4 bytes
            "stdout_truncated": True,
            "stderr": "",
            "stderr_truncated": False,
        }
    ]


def test_bad_log_requests_name_the_way_out(views: JobViews) -> None:
    job = views.plane.create_job(script="train.py", workdir=".")
    with pytest.raises(InvalidArgumentError, match="has no attempt 1: it has 0"):
        views.read_log(job, 1, "stdout")
    views.plane.store.start_attempt(job.id, machine="local", at=1.0)
    with pytest.raises(InvalidArgumentError, match="ask for stdout or stderr"):
        views.read_log(job, 1, "node.log")
    with pytest.raises(InvalidArgumentError, match="offset of 0 or more"):
        views.read_log(job, 1, "stdout", offset=-1)


def test_the_overview_line_says_when_the_check_last_passed() -> None:
    assert checkpoint_check_line(carry_state([]), now=100.0) == "not checked yet"
    passed = carry_state([event("carry-ok", 1000.0)])
    assert checkpoint_check_line(passed, now=1030.0) == "passed less than a minute ago"
    assert checkpoint_check_line(passed, now=1000.0 + 60) == "passed 1 minute ago"
    assert checkpoint_check_line(passed, now=1000.0 + 25 * 60 + 5) == "passed 25 minutes ago"
    assert checkpoint_check_line(passed, now=1000.0 + 3 * 3600) == "passed 3 hours ago"


def test_problems_make_a_banner_in_the_specs_words_until_a_check_passes() -> None:
    warning = "A checkpoint of this job cannot carry digest (...)"
    warned = [event("carry-warning", 10.0, warning, problem=PROBLEM)]
    carry = carry_state(warned)
    status = {"state": "running", "attempts": [], "last_checkpoint": None, "carry": carry}
    assert banner(status) == {"kind": "warning", "text": warning, "problems": 1}
    rows = dict(overview(status, now=20.0))
    assert rows["Checkpoint check"] == (
        "1 problem: cannot carry digest (_hashlib.HASH) (see the banner)"
    )
    assert rows["Machine"] == "none yet" and rows["Last checkpoint"] == "none complete"

    blocked = "This job passed no pause point for 30 s (...)"
    status["carry"] = carry_state([*warned, event("carry-blocked", 11.0, blocked, after_s=30)])
    assert banner(status) == {"kind": "blocked", "text": blocked, "problems": 1}
    assert dict(overview(status, now=20.0))["Checkpoint check"].startswith("blocked")

    status["carry"] = carry_state([*warned, event("carry-ok", 12.0)])
    assert banner(status) is None
    assert dict(overview(status, now=20.0))["Checkpoint check"] == ("passed less than a minute ago")
