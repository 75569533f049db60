"""The local runner with real subprocess containers: calls, errors, preemptions, budgets."""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import threading
import time
from pathlib import Path

import bladekit_testapps as apps
import pytest

import bladekit
from bladekit.listing import runs
from bladekit.testing import preempt_run


def wait_for(predicate: object, timeout: float = 15.0) -> None:
    deadline = time.time() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)


def test_remote_map_starmap(portal_home: Path) -> None:
    assert apps.add.remote(2, 3) == 5
    assert list(apps.add.map([1, 2, 3], [10, 20, 30])) == [11, 22, 33]
    assert list(apps.add.starmap([(1, 1), (2, 2)])) == [2, 4]
    assert apps.whoami.remote() != os.getpid()
    # Every run of the map carried the function's request, byte for byte.
    bodies = {p.read_bytes() for p in (portal_home / "bladekit" / "runs").glob("*/request.json")}
    assert bodies == {apps.add.request_body(), apps.whoami.request_body()}


def test_map_carries_settings_byte_for_byte(portal_home: Path, tmp_path: Path) -> None:
    states = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert [r["step"] for r in apps.count_to.map([1, 2], states, [0, 0])] == [1, 2]
    bodies = {p.read_bytes() for p in (portal_home / "bladekit" / "runs").glob("*/request.json")}
    assert bodies == {b'{"app":"bladekit-tests","function":"count_to","max_interruptions":6}'}


def test_user_exception_comes_back_as_itself() -> None:
    with pytest.raises(ValueError, match="bad input 42") as info:
        apps.fail.remote("value")
    assert not isinstance(info.value, bladekit.RunError)
    assert any("Traceback" in note and "bad input 42" in note for note in info.value.__notes__)


def test_unpicklable_exception_arrives_as_remote_error_with_traceback() -> None:
    with pytest.raises(bladekit.RemoteError) as info:
        apps.fail.remote("unpicklable")
    assert info.value.type_name == "bladekit_testapps.Unpicklable"
    assert "holds a lock" in info.value.traceback_text
    assert not isinstance(info.value, bladekit.RunError)


def test_a_crash_is_a_run_error_not_a_preemption() -> None:
    with pytest.raises(bladekit.ContainerExitedError) as info:
        apps.crash.remote()
    assert isinstance(info.value, bladekit.RunError)
    assert not isinstance(info.value, bladekit.PreemptedError)
    assert info.value.run_id and "status 3" in str(info.value)


def test_loop_resumes_from_checkpoint_after_random_preemptions(tmp_path: Path) -> None:
    """Differential: the preempted run ends with what an uninterrupted one computes."""
    state = str(tmp_path / "progress.pkl")
    n = 150  # ~3 s of steps: far longer than the half grace window a call may still run
    call = apps.count_to.spawn(n, state, 0.02)
    rng = random.Random(7)
    progress_file = Path(state + ".progress")

    def step() -> int:  # the loop rewrites the file in place: a read may catch it empty
        try:
            return int(progress_file.read_text() or -1)
        except FileNotFoundError:
            return -1

    for _ in range(3):
        target = max(step(), 0) + rng.randint(3, 8)
        wait_for(lambda t=target: step() >= t)
        attempt = call.run.attempt
        assert call.run.preempt(seconds=0.6)
        wait_for(lambda a=attempt: call.run.attempt > a)
        assert not call.done()
    result = call.get(timeout=30)
    expected = {"step": 0, "total": 0.0}
    for _ in range(n):
        expected["step"] += 1
        expected["total"] += expected["step"] * 0.5
    assert (result["step"], result["total"]) == (expected["step"], expected["total"])
    starts = result["starts"]
    assert len(starts) == 4 and starts[0] == 0
    assert all(later > earlier for earlier, later in itertools.pairwise(starts))
    assert call.run.interruptions == 3


def test_cls_state_survives_preemption_between_calls(tmp_path: Path) -> None:
    counter = apps.Counter("ok", str(tmp_path / "count.pkl"))
    assert counter.bump.remote()[0] == 1
    assert counter.bump.remote()[0] == 2
    first_pid = counter.bump.remote()[1]
    assert bladekit.run_of(counter).preempt(seconds=5, wait=True)
    count, pid = counter.bump.remote()
    assert (count, pid != first_pid) == (4, True)
    counter.close()


def test_call_in_flight_finishes_then_checkpoints(tmp_path: Path) -> None:
    counter = apps.Counter("ok", str(tmp_path / "count.pkl"))
    counter.bump.remote()
    call = counter.slow_bump.spawn(0.5)
    time.sleep(0.2)
    assert bladekit.run_of(counter).preempt(seconds=4)  # the call ends well inside half the window
    assert call.get(timeout=10)[0] == 2  # answered by the first attempt, not retried
    assert counter.bump.remote()[0] == 3
    counter.close()


def test_callback_that_raises_is_reported_and_attempt_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    counter = apps.Counter("raise", str(tmp_path / "count.pkl"))
    _, pid = counter.bump.remote()
    with caplog.at_level(logging.WARNING, logger="bladekit.runner"):
        assert bladekit.run_of(counter).preempt(seconds=5, wait=True)
        count, new_pid = counter.bump.remote()
    assert new_pid != pid and count == 1  # nothing was saved: resumed from no checkpoint
    failed = [e for e in bladekit.run_of(counter).events if e.kind == "callback_failed"]
    assert len(failed) == 1
    assert "Counter.checkpoint raised" in failed[0].message
    assert "RuntimeError: checkpoint disk full" in failed[0].message
    assert "checkpoint disk full" in caplog.text
    counter.close()


def test_callback_that_overruns_the_grace_window_is_stopped(tmp_path: Path) -> None:
    counter = apps.Counter("hang", str(tmp_path / "count.pkl"))
    counter.bump.remote()
    started = time.monotonic()
    assert bladekit.run_of(counter).preempt(seconds=1.0, wait=True)
    count, _ = counter.bump.remote()
    assert time.monotonic() - started < 10  # killed at the deadline, not after the 60 s sleep
    assert count == 1
    kinds = [e.kind for e in bladekit.run_of(counter).events]
    assert "callback_overran" in kinds and kinds.count("preempted") == 1
    counter.close()


def test_budget_exhausted_raises_preempted_error_with_run_id(tmp_path: Path) -> None:
    counter = apps.Counter("ok", str(tmp_path / "count.pkl"))  # max_interruptions=1
    counter.bump.remote()
    assert bladekit.run_of(counter).preempt(seconds=5, wait=True)
    assert counter.bump.remote()[0] == 2  # survived the first
    assert bladekit.run_of(counter).preempt(seconds=5, wait=True)
    with pytest.raises(bladekit.PreemptedError) as info:
        counter.bump.remote()
    err = info.value
    assert err.code == "PREEMPTED" and err.run_id == bladekit.run_of(counter).run_id
    assert err.details["max_interruptions"] == 1 and err.details["interruptions"] == 2
    with pytest.raises(bladekit.PreemptedError):  # the run stays over
        counter.bump.remote()
    counter.close()


def test_function_budget_exhausted_through_preempt_run_by_id(tmp_path: Path) -> None:
    app = apps.app
    assert app.registered["count_to"].request().max_interruptions == 6
    call = apps.count_to.spawn(10_000, str(tmp_path / "s.pkl"), 0.01)
    # Reuse the run's helper from outside the caller: by run id, as another process would.
    wait_for(lambda: Path(str(tmp_path / "s.pkl") + ".progress").exists())
    for _ in range(7):
        attempt = call.run.attempt
        assert preempt_run(call.run.run_id, seconds=1.0) is not None
        wait_for(lambda a=attempt: call.run.attempt > a or call.done())
        if call.done():
            break
    with pytest.raises(bladekit.PreemptedError) as info:
        call.get(timeout=20)
    assert info.value.run_id == call.run.run_id


def test_reserved_is_never_preempted(caplog: pytest.LogCaptureFixture, portal_home: Path) -> None:
    reserved = apps.Reserved()
    pid = reserved.pid_of.remote()
    with caplog.at_level(logging.WARNING):
        assert bladekit.run_of(reserved).preempt(seconds=1) is False
        assert preempt_run(bladekit.run_of(reserved).run_id, seconds=1) is None
    assert "never preempted" in caplog.text
    request = json.loads((bladekit.run_of(reserved).dir / "request.json").read_bytes())
    assert request["gpu_class"] == "reserved"
    # A notice slipped into its folder anyway is ignored by the container itself.
    from portal.providers.local import deliver_notice

    deliver_notice(bladekit.run_of(reserved)._current.notice_dir, seconds=0.5)  # type: ignore[union-attr]
    time.sleep(1.0)
    assert reserved.pid_of.remote() == pid
    assert [e.kind for e in bladekit.run_of(reserved).events].count("preempted") == 0
    reserved.close()


def test_an_instance_outlives_the_thread_that_started_its_container(
    tmp_path: Path, portal_home: Path
) -> None:
    """A container dies with its caller (PR_SET_PDEATHSIG), which for Linux is the thread that
    started it: the call thread of a .spawn() ends, and the instance's container must not."""
    counter = apps.Counter("ok", str(tmp_path / "count.pkl"))
    call = counter.bump.spawn()  # the container starts during this call's own thread
    _, pid = call.get(timeout=30)
    run_id = bladekit.run_of(counter).run_id
    wait_for(lambda: not any(t.name == f"bladekit-call-{run_id}" for t in threading.enumerate()))
    time.sleep(0.3)
    assert counter.bump.remote() == (2, pid)
    counter.close()
    (row,) = [r for r in runs(portal_home) if r.run_id == run_id]
    assert row.state == "done"


def test_leaving_the_block_with_a_call_in_flight_stops_it_promptly(portal_home: Path) -> None:
    app = apps.app
    started = time.monotonic()
    with app.run():
        call = apps.nap.spawn(30)
        wait_for(lambda: call.run.attempt == 1 and call.run._current is not None)
        time.sleep(0.5)
    assert time.monotonic() - started < 10
    with pytest.raises(bladekit.AppStoppedError):
        call.get(timeout=10)
    (row,) = [r for r in runs(portal_home) if r.run_id == call.run.run_id]
    assert row.state == "failed" and row.reason and "stopped" in row.reason
