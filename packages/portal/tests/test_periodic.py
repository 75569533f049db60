"""Periodic checkpoints end to end: ``portal run --checkpoint-every`` stores complete checkpoints
while the job runs on, and a job whose node and process die without notice resumes from the
last one (repeating exactly the output printed after it)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PortalCli, wait_until

from portal.control.plane import ControlPlane
from portal.core.domain import Event, JobState
from portal.core.settings import Settings

JOB = """
import sys
import time

state = {"total": 0, "seen": []}
for step in range(int(sys.argv[1])):
    state["total"] += step * 7 % 13
    state["seen"].append(state["total"])
    print(f"step {step} total {state['total']}", flush=True)
    time.sleep(0.05)
print("final", state["total"], sum(state["seen"]))
"""
STEPS = "200"


@pytest.fixture
def job_script(portal: PortalCli) -> str:
    (portal.workdir / "periodic_job.py").write_text(JOB)
    return "periodic_job.py"


@pytest.fixture
def plane(portal: PortalCli) -> Iterator[ControlPlane]:
    control = ControlPlane(Settings.load({"home": str(portal.home)}, environ={}))
    yield control
    control.store.close()


def _events(plane: ControlPlane, job: str, kind: str) -> list[Event]:
    return [e for _, e in plane.store.events(job) if e.kind == kind]


def _pid(path: Path) -> int:
    return int(path.read_text())


def _kill_without_notice(portal: PortalCli, job: str, attempt: int) -> None:
    """The machine is gone: the node and the job's process die at once, nothing reported."""
    attempt_dir = portal.home / "jobs" / job / "attempts" / str(attempt)
    os.kill(_pid(attempt_dir / "node.pid"), signal.SIGKILL)  # its job dies with it (PDEATHSIG)


@pytest.mark.one_python
def test_periodic_checkpoints_then_a_lost_machine_resumes_from_the_last(
    portal: PortalCli, plane: ControlPlane, job_script: str
) -> None:
    expected = portal.plain(job_script, STEPS).splitlines()
    job = portal("run", "--detach", "--checkpoint-every", "1s", job_script, STEPS).stdout.strip()
    # At least two are stored while the job keeps running.
    saved = wait_until(
        "two periodic checkpoints", lambda: len(_events(plane, job, "checkpoint-periodic")) >= 2
    )
    assert saved
    assert portal.state(job) == "running"
    first = _events(plane, job, "checkpoint-periodic")[0]
    assert first.message.startswith(f"periodic checkpoint {first.data['checkpoint']} saved (")
    assert "script paused" in first.message and "periodic_job.py:" in first.message
    assert _events(plane, job, "checkpoint-every")[0].data["every"] == "1s"

    # The machine is lost without notice: the node and the job's process die together.
    job_pid = _events(plane, job, "started")[-1].data["pid"]
    _kill_without_notice(portal, job, 1)
    wait_until("the job process to die", lambda: not Path(f"/proc/{job_pid}").exists(), 10)
    printed = portal("logs", job).stdout.splitlines()
    assert printed and printed[-1] != expected[-1], "the job ended before it was killed"

    status = portal("status", job)
    assert "state     suspended" in status.stdout
    assert f"resume it from its last checkpoint with `portal resume {job}`" in status.stdout
    last = _events(plane, job, "checkpoint-periodic")[-1].data["checkpoint"]
    assert json.loads(portal("status", job, "--json").stdout)["last_checkpoint"]["id"] == last

    resumed = portal("resume", job)
    assert resumed.returncode == 0, resumed.stderr
    said = _events(plane, job, "resuming-periodic")
    assert len(said) == 1 and f"periodic checkpoint {last} taken at" in said[0].message
    assert "the work done since then is done again" in said[0].message
    # The second attempt printed the lines after the checkpoint's safe point: a tail of the
    # uninterrupted run; together with what came before the checkpoint it is that run exactly.
    second = (portal.home / "jobs" / job / "attempts" / "2" / "stdout").read_text().splitlines()
    assert second and second == expected[-len(second) :]
    repeated = len(printed) - (len(expected) - len(second))
    assert repeated >= 0  # lines printed after the checkpoint, before the kill: printed again
    assert printed[: len(printed) - repeated] + second == expected
    assert second[-1] == expected[-1]  # the final state equals the uninterrupted run's
    # `portal logs` shows each line once: the lost attempt's output up to the checkpoint's safe
    # point (the sizes the runtime reported with it), then the resumed attempt's.
    logged = portal("logs", job)
    assert logged.stdout.splitlines() == expected
    assert f"attempt 1's output after its periodic checkpoint {last} is left out" in logged.stderr
    # The job remembered its interval: the resumed attempt takes periodic checkpoints too.
    assert any(e.data.get("attempt") == 2 for e in _events(plane, job, "checkpoint-periodic")) or (
        len(second) < 40  # too short a tail for a 1 s interval to come round
    )


def test_a_notice_during_periodic_checkpoints_is_honoured(
    portal: PortalCli, plane: ControlPlane, job_script: str
) -> None:
    expected = portal.plain(job_script, STEPS)
    env_before = dict(portal.env)
    portal.env["PORTAL_CHECKPOINT_EVERY"] = "0.2"  # the environment sets it too
    try:
        job = portal("run", "--detach", job_script, STEPS).stdout.strip()
    finally:
        portal.env = env_before
    wait_until("a periodic checkpoint", lambda: _events(plane, job, "checkpoint-periodic"))
    assert portal("notice", job).returncode == 0
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    suspended = _events(plane, job, "suspended")
    assert len(suspended) == 1
    # The notice's own checkpoint is the one kept to resume from, not a periodic one.
    assert (
        json.loads(portal("status", job, "--json").stdout)["last_checkpoint"]["id"]
        == suspended[0].data["checkpoint"]
    )
    resumed = portal("resume", job)
    assert resumed.returncode == 0, resumed.stderr
    assert portal("logs", job).stdout == expected  # a notice's checkpoint repeats nothing
    assert not list((portal.home / "jobs" / job / "attempts" / "1").glob("periodic-*"))


@pytest.mark.parametrize("value", ["abc", "0", "-5s", "1x", "10x"])
def test_bad_checkpoint_every_values_are_usage_errors(
    portal: PortalCli, job_script: str, value: str
) -> None:
    result = portal("run", f"--checkpoint-every={value}", job_script, "3")
    assert result.returncode == 64, result.stderr
    assert f"--checkpoint-every {value!r} is not a checkpoint interval" in result.stderr
    assert "30s, 10m, 1h" in result.stderr
    portal.env["PORTAL_CHECKPOINT_EVERY"] = value
    from_env = portal("run", job_script, "3")
    assert from_env.returncode == 64
    # The settings refuse it first, naming the variable, the value and what is accepted.
    assert "PORTAL_CHECKPOINT_EVERY" in from_env.stderr and repr(value) in from_env.stderr
    assert "30s, 10m, 1h" in from_env.stderr


def test_the_auto_default_takes_none_on_this_machine(
    portal: PortalCli, plane: ControlPlane, job_script: str
) -> None:
    """``auto`` means spot machines only: a plain local run is exactly as before."""
    portal.env.pop("PORTAL_CHECKPOINT_EVERY", None)
    result = portal("run", job_script, "30")
    assert result.returncode == 0, result.stderr
    assert result.stdout == portal.plain(job_script, "30")
    job = plane.store.list_jobs()[0].id
    kinds = {e.kind for _, e in plane.store.events(job)}
    assert not kinds & {"checkpoint-periodic", "checkpoint-every", "checkpoint-periodic-failed"}
    assert not list((portal.home / "jobs" / job / "attempts" / "1").glob("periodic-*"))


@pytest.mark.one_python
def test_a_lost_job_resumes_from_its_periodic_checkpoint_with_a_new_interval(
    portal: PortalCli, plane: ControlPlane, job_script: str
) -> None:
    """``portal resume`` takes a job the lost-job rules called lost when it has a complete
    checkpoint; ``--checkpoint-every`` on resume replaces the interval the job remembered."""
    expected = portal.plain(job_script, STEPS).splitlines()
    job = portal("run", "--detach", "--checkpoint-every=0.5s", job_script, STEPS).stdout.strip()
    wait_until("a periodic checkpoint", lambda: _events(plane, job, "checkpoint-periodic"))
    job_pid = _events(plane, job, "started")[-1].data["pid"]
    _kill_without_notice(portal, job, 1)
    wait_until("the job process to die", lambda: not Path(f"/proc/{job_pid}").exists(), 10)
    assert portal.state(job) == "suspended"  # the dead node is seen: it keeps its checkpoint
    plane.set_state(job, JobState.LOST)  # as when its machine is declared gone for certain
    resumed = portal("resume", "--checkpoint-every", "off", job)
    assert resumed.returncode == 0, resumed.stderr
    assert portal("logs", job).stdout.splitlines()[-1] == expected[-1]
    assert _events(plane, job, "checkpoint-every")[-1].data["every"] == "off"
    assert _events(plane, job, "resuming-periodic")
    assert not [e for e in _events(plane, job, "checkpoint-periodic") if e.data["attempt"] == 2]
    assert portal.state(job) == "done"


def test_a_state_that_cannot_be_carried_is_said_once_and_the_job_runs_on(
    portal: PortalCli, plane: ControlPlane
) -> None:
    """While the script holds an open file no periodic checkpoint can be taken: that is said
    once (not at every interval), with the value in the way, and the job's output is intact;
    once the file is closed the periodic checkpoints are taken again."""
    result = portal("run", "--checkpoint-every=0.3s", "holds_file.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout == portal.plain("holds_file.py")
    job = plane.store.list_jobs()[0].id
    failed = _events(plane, job, "checkpoint-periodic-failed")
    assert len(failed) == 1, [e.message for e in failed]
    assert "periodic checkpoint not saved (log (_io.TextIOWrapper)" in failed[0].message
    assert "the job goes on and the next one is tried in 0.3 s" in failed[0].message
    assert _events(plane, job, "checkpoint-periodic")  # after the file was closed


def test_a_checkpoint_the_node_did_not_ask_for_is_never_uploaded_or_deleted(
    tmp_path: Path,
) -> None:
    """A peer on the runtime's socket names a file of its choosing (to have it stored, then
    resumed, as this job): the node uploads and deletes only the path it asked the runtime for."""
    from types import SimpleNamespace

    from portal.node.periodic import PeriodicCheckpoints
    from portal.node.supervisor import Node
    from portal.runtime.protocol import Checkpointed

    periodic = PeriodicCheckpoints(60.0, tmp_path)
    asked = tmp_path / "periodic-1.portal"
    foreign = tmp_path / "theirs.portal"
    foreign.write_bytes(b"an image of the peer's choosing")
    node = SimpleNamespace(_periodic=periodic, _notice=object(), _probe=None)
    for notice in (object(), None):  # during a notice (deleted before), and without one
        node._notice = notice
        periodic.asked = asked
        Node._periodic_taken(
            node, Checkpointed(checkpoint=str(foreign), bytes=31, stall_seconds=0.1)
        )  # type: ignore[arg-type]
        assert foreign.exists() and periodic.upload is None and periodic.taken is None
        assert periodic.asked is None  # the request is over: the next one may be asked for
