"""The views every reader shares (portal.control.views): logs read as they grow, and the
console's Overview line and banner for each state of the checkpoint check."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PortalCli, console_on

from portal.console.chartdata import job_facts
from portal.console.charts import CHART_IDS, render_charts
from portal.console.overview import banner, overview
from portal.control.carry import carry_state
from portal.control.plane import ControlPlane
from portal.control.views import JobViews, checkpoint_check_line
from portal.core.domain import AttemptState, Event, Job, JobState
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


def _lineage(views: JobViews) -> Job:
    """Attempt 1 made periodic checkpoint c1 after 6 bytes of stdout and was lost; attempt 2
    resumed from c1 and was lost before taking another; attempt 3 resumed from c1 too."""
    plane = views.plane
    job = plane.create_job(script="train.py", workdir=".")
    store = plane.store
    store.start_attempt(job.id, machine="local", at=1.0)
    store.append_event(
        Event(
            job_id=job.id,
            at=2.0,
            kind="checkpoint-periodic",
            message="checkpoint c1",
            data={"checkpoint": "c1", "attempt": 1, "stdout_bytes": 6, "stderr_bytes": 0},
        )
    )
    store.end_attempt(job.id, 1, state=AttemptState.LOST, at=3.0, exit_code=None)
    store.start_attempt(job.id, machine="local", at=4.0, resumed_from="c1")
    store.end_attempt(job.id, 2, state=AttemptState.LOST, at=4.5, exit_code=None)
    store.start_attempt(job.id, machine="local", at=5.0, resumed_from="c1")
    store.end_attempt(job.id, 3, state=AttemptState.EXITED, at=6.0, exit_code=0)
    store.set_job_state(job.id, JobState.DONE)
    for number, out in ((1, b"step1\nstep2\n"), (2, b"step2\n"), (3, b"step2\nend\n")):
        path = plane.paths(job.id).stdout(number)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(out)
    return job


def test_output_a_later_attempt_did_again_is_left_out_and_said(views: JobViews) -> None:
    """Readers show attempt 1 up to c1, none of attempt 2, all of 3 (as `portal logs`)."""
    job = _lineage(views)
    notes = views.log_notes(job)
    assert notes[1][1:] == (6, 0) and "periodic checkpoint c1" in notes[1][0]
    assert notes[2][1:] == (0, 0) and "done again by attempt 3" in notes[2][0]
    assert 3 not in notes
    logs = views.logs(job)
    assert [entry["stdout"] for entry in logs] == ["step1\n", "", "step2\nend\n"]
    assert [entry.get("note") is not None for entry in logs] == [True, True, False]
    text, offset = views.read_log(job, 1, "stdout", kept=notes[1][1])
    assert (text, offset) == ("step1\n", 6)
    assert views.read_log(job, 1, "stdout", offset=offset, kept=notes[1][1]) == ("", 6)


def test_the_console_reads_only_kept_output_and_says_why(views: JobViews, tmp_path: Path) -> None:
    job = _lineage(views)
    answers = {}
    with console_on(PortalCli(tmp_path / "home", tmp_path)) as base:
        for attempt in (1, 2, 3):
            url = f"{base}/api/jobs/{job.id}/logs?attempt={attempt}&stream=stdout"
            with urllib.request.urlopen(url, timeout=30) as reply:
                answers[attempt] = json.loads(reply.read())
    assert answers[1]["text"] == "step1\n" and answers[1]["next"] == 6
    assert "periodic checkpoint c1" in answers[1]["note"]
    assert answers[2]["text"] == "" and "done again by attempt 3" in answers[2]["note"]
    assert answers[3] == {"text": "step2\nend\n", "start": 0, "next": 10, "note": None}


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
    status = {
        "job": "j-1",
        "name": "train",
        "state": "running",
        "attempts": [],
        "last_checkpoint": None,
        "carry": carry,
    }
    title = "Checkpoint check"
    assert banner(status) == {"kind": "warning", "title": title, "text": warning, "problems": 1}
    rows = dict(overview(status, now=20.0))
    assert rows["Checkpoint check"] == (
        "1 problem: cannot carry digest (_hashlib.HASH) (see the banner)"
    )
    assert rows["Machine"] == "none yet" and rows["Last checkpoint"] == "none complete"

    blocked = "This job passed no pause point for 30 s (...)"
    status["carry"] = carry_state([*warned, event("carry-blocked", 11.0, blocked, after_s=30)])
    assert banner(status) == {"kind": "blocked", "title": title, "text": blocked, "problems": 1}
    assert dict(overview(status, now=20.0))["Checkpoint check"].startswith("blocked")

    status["carry"] = carry_state([*warned, event("carry-ok", 12.0)])
    assert banner(status) is None
    assert dict(overview(status, now=20.0))["Checkpoint check"] == ("passed less than a minute ago")


def test_charts_say_what_is_missing_and_never_fail_on_odd_figures() -> None:
    """No attempt or checkpoint yet: each chart is a note. Figures of the wrong type (a plugin's
    event, an old record) are left out, never a traceback."""
    empty = render_charts(job_facts([], [], origin=0.0, now=10.0))
    assert [(c["id"], c["svg"]) for c in empty] == [(i, None) for i in CHART_IDS]
    assert all(c["note"] for c in empty)
    odd = [
        event("suspended", 5.0, checkpoint="c1", bytes="12 kB", attempt=None),
        event("uploaded", 4.0, checkpoint="c1", seconds=-1),
        event("carry-ok", 3.0, checked_bytes=True),
        event("spot.kept", 6.0, bound_bytes="big", state_bytes=900),
    ]
    facts = job_facts([], odd, origin=0.0, now=10.0)
    assert [(c.id, c.bytes, c.upload_s) for c in facts.checkpoints] == [("c1", 0, None)]
    assert [s.figure for s in facts.states] == ["checkpoint as stored", "placement"]
    assert facts.bounds == ()
    charts = {c["id"]: c for c in render_charts(facts)}
    assert charts["checkpoint-size"]["svg"].count("data-checkpoint=") == 1
    assert charts["upload-time"]["note"] == "No upload timed yet."
    assert "<script" not in "".join(c["svg"] or "" for c in charts.values())


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_a_long_log_opens_at_its_end_as_a_page_shows_text(views: JobViews, tmp_path: Path) -> None:
    """tail=N: the last N bytes from a line's start, with where they start; colour codes left
    out and one cut at the end held back until its rest is written; huge numbers answered, not
    a 500."""
    job = views.plane.create_job(script="train.py", workdir=".")
    views.plane.store.start_attempt(job.id, machine="local", at=1.0)
    out = views.plane.paths(job.id).stdout(1)
    out.parent.mkdir(parents=True)
    lines = b"".join(b"line %05d\n" % i for i in range(20_000))  # 220 kB
    out.write_bytes(lines + b"\x1b[32mgreen\x1b[0m done\n\x1b[3")  # a code cut at the end
    with console_on(PortalCli(tmp_path / "home", tmp_path)) as base:
        api = f"{base}/api/jobs/{job.id}/logs?attempt=1&stream=stdout"
        status, body = _get(f"{api}&tail=1000")
        answer = json.loads(body)
        assert status == 200
        assert answer["start"] > 0 and lines[answer["start"] - 1 : answer["start"]] == b"\n"
        assert answer["text"].startswith("line ") and answer["text"].endswith("green done\n")
        assert "\x1b" not in answer["text"]
        assert answer["next"] == out.stat().st_size - len(b"\x1b[3")  # held back
        for query in ("limit=99999999999999999999", "offset=9223372036854775808"):
            status, body = _get(f"{api}&{query}")
            assert status == 200, body
        status, body = _get(f"{api}&tail=0")
        assert status == 400 and "tail=0: give 1 or more bytes" in body
        status, body = _get(f"{base}/jobs/nope")
        assert status == 404 and "no job &#x27;nope&#x27;" in body and 'href="/"' in body


def test_a_failed_job_says_why_in_its_last_words(views: JobViews) -> None:
    job = views.plane.create_job(script="train.py", workdir=".")
    views.plane.store.start_attempt(job.id, machine="local", at=1.0)
    err = views.plane.paths(job.id).stderr(1)
    err.parent.mkdir(parents=True)
    err.write_bytes(
        b"Traceback (most recent call last):\n  File ...\n"
        b"\x1b[31mRuntimeError: boom: bad data at step 3\x1b[0m\n\n"
    )
    views.plane.store.end_attempt(job.id, 1, state=AttemptState.FAILED, at=2.0, exit_code=1)
    assert views.status(job, recorded_only=True)["error"] is None  # not failed: no reason
    views.plane.store.set_job_state(job.id, JobState.FAILED)
    status = views.status(views.plane.job(job.id), recorded_only=True)
    assert status["error"] == "RuntimeError: boom: bad data at step 3"
    assert banner(status) == {
        "kind": "failed",
        "title": "Failed",
        "text": "Failed (exit code 1): RuntimeError: boom: bad data at step 3",
        "problems": 0,
    }
    rows = dict(overview(status, now=10.0))
    assert rows["Error"] == "RuntimeError: boom: bad data at step 3"
    assert rows["Duration"] == "1s"
