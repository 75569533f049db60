"""``portal.jobs.Portal`` in process, as a scheduler embeds it: real nodes and jobs in their own
processes, a real SQLite control plane and store under the test's PORTAL_HOME; no ``portal``
command is run. Each action answers with its typed value, refuses in the CLI's words with its
stable code, and prints nothing."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SCRIPTS

from portal.control.store import JobNotFoundError
from portal.core.domain import Event, JobState
from portal.core.errors import InvalidArgumentError, PortalError
from portal.core.hookspecs import hookimpl
from portal.core.plugins import Plugins, PortalPluginManager, get_plugin_manager
from portal.core.settings import Settings
from portal.jobs import (
    Cancelled,
    JobStatus,
    NoticeSent,
    Output,
    Placement,
    Portal,
    Said,
    Started,
)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(SCRIPTS / "count.py", workdir / "count.py")
    return workdir


@pytest.fixture
def portal(tmp_path: Path) -> Iterator[Portal]:
    with Portal.open(tmp_path / "home") as opened:
        yield opened
    for pid_file in (tmp_path / "home" / "jobs").glob("*/attempts/*/node.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), 9)


def _output(portal: Portal, job_id: str) -> bytes:
    paths = portal.plane.paths(job_id)
    attempts = portal.plane.store.attempts(job_id)
    return b"".join(paths.stdout(a.number).read_bytes() for a in attempts)


def test_run_notice_wait_resume_as_a_library_continues_as_one_run(
    portal: Portal, work: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    plain = subprocess.run(
        [sys.executable, "count.py", "7"], cwd=work, capture_output=True, check=True
    ).stdout
    started = portal.run("count.py", ["7"], name="counting", workdir=work)
    assert isinstance(started, Started)
    assert (started.attempt, started.machine, started.checkpoint) == (1, "local", None)
    assert started.job.name == "counting" and started.job.workdir == str(work.resolve())
    stdout = portal.plane.paths(started.job.id).stdout(1)
    waited = portal.wait(started.job, until=(), timeout=0.2, poll_s=0.05)
    while b"step 20 " not in stdout.read_bytes():
        assert portal.job("counting").state is JobState.RUNNING, stdout.read_bytes()
        time.sleep(0.05)
    sent = portal.notice("counting", seconds=30)
    assert isinstance(sent, NoticeSent) and sent.seconds == 30 and sent.job.id == started.job.id
    suspended = portal.wait(started.job, timeout=60)
    assert suspended.state is JobState.SUSPENDED
    resumed = portal.resume(started.job)
    assert (resumed.attempt, resumed.machine) == (2, "local")
    assert resumed.checkpoint is not None
    assert [c.id for c in portal.checkpoints(started.job) if c.resumable][-1] == resumed.checkpoint
    assert portal.wait("counting", timeout=120).state is JobState.DONE
    assert _output(portal, started.job.id) == plain
    kinds = [event.kind for _, event in portal.events(started.job)]
    assert kinds[0] == "created" and "resuming" in kinds
    seq = list(portal.events(started.job))[-1][0]
    assert list(portal.events(started.job, after=seq)) == []  # only what came since
    followed = list(portal.events(started.job, follow=True))  # it has ended: all, then stops
    assert [e.kind for _, e in followed] == kinds
    shown = list(portal.logs("counting", follow=True))
    assert b"".join(o.data for o in shown if isinstance(o, Output) and o.stream == "stdout") == (
        plain
    )
    assert {o.attempt for o in shown if isinstance(o, Output)} == {1, 2}
    assert next(s.text for s in shown if isinstance(s, Said)).startswith("attempt 2 on local")
    only_err = list(portal.logs(started.job, streams=("stderr",)))
    assert only_err and {o.stream for o in only_err if isinstance(o, Output)} == {"stderr"}
    status = portal.status(started.job)
    assert isinstance(status, JobStatus) and status.state is JobState.DONE
    assert [(a.number, a.state, a.exit_code) for a in status.attempts] == [
        (1, "suspended", 75),
        (2, "exited", 0),
    ]
    assert status.attempts[1].resumed_from == resumed.checkpoint
    assert status.last_checkpoint is not None and status.last_checkpoint.id == resumed.checkpoint
    assert status.to_json() == portal.views.status(portal.job(started.job.id))  # the --json
    listed = portal.jobs()
    assert [(j.job, j.name, j.state, j.attempts, j.recoveries) for j in listed] == [
        (started.job.id, "counting", "done", 2, 1)
    ]
    assert [j.to_json() for j in listed] == portal.views.jobs()  # the --json rows
    explained = portal.explain(started.job)
    (notice,) = explained.notices  # the one notice, with the time it gave (read on arrival)
    assert 0 < notice.notice_s <= 30 and notice.decisions
    assert explained.to_json() == portal.views.explain(portal.job(started.job.id))
    assert waited.state is JobState.RUNNING  # `until=()` and a timeout: the job as it was then
    assert capfd.readouterr() == ("", "")  # a library prints nothing


def test_cancel_answers_what_it_did_and_a_second_cancel_that_it_was_done(
    portal: Portal, work: Path
) -> None:
    started = portal.run("count.py", workdir=work)
    cancelled = portal.cancel(started.job.id)
    assert isinstance(cancelled, Cancelled)
    assert (cancelled.already, cancelled.kept, cancelled.job.state) == (
        False,
        False,
        JobState.CANCELLED,
    )
    assert cancelled.message == f"job {started.job.id} cancelled (it had no checkpoint)"
    again = portal.cancel(started.job)
    assert again.already and again.message == f"job {started.job.id} is already cancelled"
    assert portal.plane.store.attempts(started.job.id)[-1].state == "failed"


def test_refusals_are_errors_with_their_codes_and_the_clis_words(
    portal: Portal, work: Path, tmp_path: Path
) -> None:
    with pytest.raises(InvalidArgumentError, match=r"script 'nope.py' not found in .*work"):
        portal.run("nope.py", workdir=work)
    with pytest.raises(InvalidArgumentError, match="is a folder, not a Python file"):
        portal.run(".", workdir=work)
    with pytest.raises(InvalidArgumentError, match="is not a checkpoint interval"):
        portal.run("count.py", workdir=work, checkpoint_every="often")
    with pytest.raises(InvalidArgumentError, match="ask for opposite machines"):
        Placement(no_spot=True, spot_only=True)
    with pytest.raises(InvalidArgumentError, match="places jobs on this machine only"):
        portal.run("count.py", workdir=work, placement=Placement(gpu="L4"))
    with pytest.raises(InvalidArgumentError, match="name no output of a job"):
        portal.logs("j-nothere", streams=("stdin",))
    with pytest.raises(JobNotFoundError) as missing:
        portal.notice("j-nothere")
    assert missing.value.code == "JOB_NOT_FOUND"
    assert portal.jobs() == []  # nothing refused left a job behind
    assert (
        portal.plan_run("count.py", workdir=work)
        == "D8 choice: this machine (local, on-demand); nothing else is installed"
    )
    started = portal.run("count.py", workdir=work)
    with pytest.raises(InvalidArgumentError, match="is running, not suspended") as running:
        portal.resume(started.job)
    assert running.value.code == "INVALID_ARGUMENT"
    portal.cancel(started.job)
    with pytest.raises(InvalidArgumentError, match="a notice goes to a running job's machine"):
        portal.notice(started.job)
    with pytest.raises(InvalidArgumentError, match="it has no checkpoint to resume from"):
        portal.resume(started.job)
    settings = Settings.load(environ={**os.environ, "PORTAL_HOME": str(tmp_path / "other")})
    with pytest.raises(PortalError, match=r"home .* and the settings' home .* differ"):
        Portal.open(tmp_path / "home", settings=settings)


class _Observer:
    """An embedder's own plugin: it is told of every event its Portal records."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    @hookimpl
    def portal_event(self, event: Event) -> None:
        self.kinds.append(event.kind)


def test_an_embedders_own_plugins_are_the_ones_its_portal_uses(tmp_path: Path, work: Path) -> None:
    """Portal.open takes the embedder's plugin manager (a PortalPluginManager with its own
    plugin registered, nothing autoloaded): what this process records reaches that plugin."""
    pm = get_plugin_manager(autoload=False)
    assert isinstance(pm, PortalPluginManager) and pm.load_failures == []
    observer = _Observer()
    pm.register(observer, name="scheduler")
    with Portal.open(tmp_path / "home", plugins=Plugins(pm)) as portal:
        assert portal.plane.plugins.pm is pm
        started = portal.run("count.py", workdir=work)
        portal.cancel(started.job)
    assert observer.kinds[0] == "created" and observer.kinds[-1] == "cancelled"


def test_another_tool_s_row_is_typed_as_portal_s_are_and_an_unknown_key_is_refused() -> None:
    """A row a plugin lists (bladekit's runs: no checkpoint id, no carry word) types as
    Portal's own rows do and gives its JSON back key for key; a key the type does not know
    raises, never drops silently."""
    from portal.jobs import JobSummary

    row = {
        "job": "r-1a2b",
        "name": "app.train",
        "state": "running",
        "script": "bladekit app::train",
        "created_at": 10.0,
        "started_at": 10.0,
        "ended_at": None,
        "duration_s": 5.0,
        "attempts": 1,
        "recoveries": 0,
        "machine": "local",
        "last_checkpoint": {"id": None, "bytes": 1024, "created_at": 12.0},
        "carry": None,
        "source": "bladekit",
        "error": None,
    }
    typed = JobSummary.from_json(row)
    assert typed.last_checkpoint is not None and typed.last_checkpoint.bytes == 1024
    assert typed.to_json() == row
    with pytest.raises(TypeError):
        JobSummary.from_json({**row, "cost_usd": 1.0})
