"""The lost-job rules, by example and property-based."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.control import silence
from portal.control.lost import LostJobRules, ProviderCheck
from portal.control.plane import ControlPlane
from portal.control.store import JobStateConflictError
from portal.core.domain import Job, JobState
from portal.core.hookspecs import hookimpl
from portal.core.plugins import Plugins
from portal.core.settings import Settings
from portal.testing import FakeClock

RULES = LostJobRules()
T0 = 1_000_000.0  # node last heard


def gone(*offsets: float) -> list[ProviderCheck]:
    return [ProviderCheck(at=T0 + o, gone=True) for o in offsets]


def test_a_heard_node_is_not_silent() -> None:
    a = RULES.assess(now=T0 + 10, last_heard=T0, checks=gone(5, 8))
    assert not a.lost and not a.silent and a.waiting_for == ""


def test_provider_saying_gone_once_is_not_enough() -> None:
    a = RULES.assess(now=T0 + 3600, last_heard=T0, checks=gone(100))
    assert not a.lost
    assert "say again at its next check, about a minute later" in a.waiting_for
    assert "last heard" in a.waiting_for


def test_a_wait_whose_time_has_passed_is_never_shown_as_a_wait() -> None:
    """An hour of silence and the provider never asked: Portal waits for the provider only,
    and says the time rule was met (not "until" a time already past)."""
    early = RULES.assess(now=T0 + 300, last_heard=T0, checks=[])
    assert "and for 10 minutes of silence (until " in early.waiting_for
    late = RULES.assess(now=T0 + 3600, last_heard=T0, checks=[])
    assert not late.lost and "until" not in late.waiting_for, late.waiting_for
    assert late.waiting_for.endswith("(10 minutes of silence passed at 13:56:40 UTC)"), (
        late.waiting_for
    )


def test_confirmed_but_before_ten_minutes_of_silence() -> None:
    a = RULES.assess(now=T0 + 300, last_heard=T0, checks=gone(100, 160))
    assert not a.lost and a.declare_after == T0 + 600
    assert "said twice" in a.waiting_for and "10 minutes of silence" in a.waiting_for


def test_confirmed_and_ten_minutes_of_silence_is_lost() -> None:
    a = RULES.assess(now=T0 + 600, last_heard=T0, checks=gone(100, 160))
    assert a.lost


def test_with_a_notice_two_minutes_past_the_deadline() -> None:
    deadline = T0 + 60
    early = RULES.assess(
        now=deadline + 119, last_heard=T0, checks=gone(70, 130), notice_deadline=deadline
    )
    assert not early.lost and "2 minutes past its notice's deadline" in early.waiting_for
    assert RULES.assess(
        now=deadline + 120, last_heard=T0, checks=gone(70, 130), notice_deadline=deadline
    ).lost


def test_a_present_answer_starts_over() -> None:
    checks = [*gone(100), ProviderCheck(at=T0 + 160, gone=False), *gone(220)]
    assert not RULES.assess(now=T0 + 3600, last_heard=T0, checks=checks).lost


def test_reports_before_the_node_went_silent_do_not_count() -> None:
    # Said gone twice while the node was still heard: the machine evidently was not gone.
    checks = gone(-120, -60)
    assert not RULES.assess(now=T0 + 3600, last_heard=T0, checks=checks).lost


def test_two_quick_reports_need_a_third_a_minute_on() -> None:
    assert not RULES.assess(now=T0 + 3600, last_heard=T0, checks=gone(100, 110)).lost
    assert RULES.assess(now=T0 + 3600, last_heard=T0, checks=gone(100, 110, 150)).lost


checks_strategy = st.lists(
    st.builds(ProviderCheck, at=st.floats(T0 - 600, T0 + 7200), gone=st.booleans()), max_size=8
)


@given(checks_strategy, st.floats(0, 7200), st.none() | st.floats(T0, T0 + 600))
def test_never_lost_without_two_silent_gone_reports_a_minute_apart(
    checks: list[ProviderCheck], later: float, deadline: float | None
) -> None:
    a = RULES.assess(now=T0 + later, last_heard=T0, checks=checks, notice_deadline=deadline)
    if a.lost:
        silent_gone = sorted(c.at for c in checks if c.gone and c.at > T0)
        assert silent_gone and silent_gone[-1] - silent_gone[0] >= RULES.confirm_gap_s
        earliest = deadline + 120 if deadline is not None else T0 + 600
        assert T0 + later >= earliest
    else:
        assert a.waiting_for or not a.silent


@given(checks_strategy, st.floats(0, 7200))
def test_lost_is_monotonic_in_time(checks: list[ProviderCheck], later: float) -> None:
    """Once lost at some time with given facts, it stays lost later with the same facts."""
    if RULES.assess(now=T0 + later, last_heard=T0, checks=checks).lost:
        assert RULES.assess(now=T0 + later + 60, last_heard=T0, checks=checks).lost


# --- the rules at work: the control plane's facts, an injectable clock ---------------------------

MACHINE = "aws:i-0abc"


_open: list[ControlPlane] = []


@pytest.fixture(autouse=True)
def _close_planes() -> Iterator[None]:
    yield
    while _open:
        _open.pop().store.close()


def remote_job(home: str, clock: FakeClock, *, machine: str = MACHINE) -> tuple[ControlPlane, Job]:
    """A running job whose node runs on another machine, last heard now."""
    plane = ControlPlane(
        Settings.load({"home": home}, environ={}),
        clock=clock,
        plugins=Plugins.load(autoload=False),
    )
    _open.append(plane)
    job = plane.create_job(script="train.py", workdir=home)
    plane.store.start_attempt(job.id, machine=machine, at=clock.now())
    return plane, job


def silent_events(plane: ControlPlane, job: Job) -> list[str]:
    return [e.message for _, e in plane.store.events(job.id) if e.kind == "silent"]


def test_a_silent_node_waits_for_the_provider_twice_and_ten_minutes(tmp_path: object) -> None:
    clock = FakeClock()
    plane, job = remote_job(str(tmp_path), clock)
    start = clock.now()
    assert silence.settle(plane, job).state is JobState.RUNNING
    assert silent_events(plane, job) == []  # heard just now

    clock.advance(40)
    silence.settle(plane, job)
    (first,) = silent_events(plane, job)
    assert "say twice, about a minute apart, that the machine is gone" in first
    silence.settle(plane, job)
    assert len(silent_events(plane, job)) == 1  # one event per change of what it waits for

    clock.advance(20)
    silence.record_machine_check(plane, job.id, MACHINE, gone=True, provider="aws")
    silence.settle(plane, job)
    assert "say again at its next check, about a minute later" in silent_events(plane, job)[-1]

    clock.advance(60)
    silence.record_machine_check(plane, job.id, MACHINE, gone=True, provider="aws")
    job = silence.settle(plane, job)
    waiting = silent_events(plane, job)[-1]
    assert job.state is JobState.RUNNING  # said twice, but not 10 minutes of silence yet
    assert "said twice" in waiting and "10 minutes of silence" in waiting
    with pytest.raises(JobStateConflictError) as refused:
        silence.refuse_while_silent(plane, job, "moving the job")
    assert "said twice" in str(refused.value) and "the job goes on" not in str(refused.value)

    clock.advance(start + 600 - clock.now() - 1)
    assert silence.settle(plane, job).state is JobState.RUNNING
    clock.advance(1)
    job = silence.settle(plane, job)
    assert job.state is JobState.LOST  # no checkpoint: its state is gone for certain
    assert plane.store.attempts(job.id)[-1].state == "lost"
    silence.refuse_while_silent(plane, job, "moving the job")  # nothing to wait for any more


def test_a_lost_machine_leaves_the_last_complete_checkpoint(tmp_path: object) -> None:
    clock = FakeClock()
    plane, job = remote_job(str(tmp_path), clock)
    clock.advance(60)
    silence.record_machine_check(plane, job.id, MACHINE, gone=True, provider="aws")
    clock.advance(60)
    silence.record_machine_check(plane, job.id, MACHINE, gone=True, provider="aws")
    clock.advance(600)

    class Ref:
        checkpoint_id = "20261202T000000.000Z-abcdef01"

    job = silence.settle(plane, job, Ref())
    assert job.state is JobState.SUSPENDED
    (event,) = [e for _, e in plane.store.events(job.id) if e.kind == "lost-machine"]
    assert Ref.checkpoint_id in event.message and "portal resume" in event.message


def test_a_notice_deadline_shortens_the_wait(tmp_path: object) -> None:
    clock = FakeClock()
    plane, job = remote_job(str(tmp_path), clock)
    plane.record(job.id, "notice", "notice", deadline=clock.now() + 30)
    deadline = clock.now() + 30
    clock.advance(60)
    silence.record_machine_check(plane, job.id, MACHINE, gone=True, provider="aws")
    clock.advance(60)
    silence.record_machine_check(plane, job.id, MACHINE, gone=True, provider="aws")
    clock.advance(deadline + 120 - clock.now() - 1)
    job = silence.settle(plane, job)
    assert job.state is JobState.RUNNING
    assert "2 minutes past its notice's deadline" in silent_events(plane, job)[-1]
    clock.advance(1)
    assert silence.settle(plane, job).state is JobState.LOST


def test_a_node_heard_again_starts_over(tmp_path: object) -> None:
    clock = FakeClock()
    plane, job = remote_job(str(tmp_path), clock)
    clock.advance(60)
    silence.record_machine_check(plane, job.id, MACHINE, gone=True, provider="aws")
    clock.advance(60)
    silence.record_machine_check(plane, job.id, MACHINE, gone=True, provider="aws")
    plane.store.heard(job.id, clock.now())  # the node answers again
    clock.advance(3600)
    assert silence.settle(plane, job).state is JobState.RUNNING  # the old reports do not count


def test_a_job_on_this_machine_is_left_to_liveness(tmp_path: object) -> None:
    clock = FakeClock()
    plane, job = remote_job(str(tmp_path), clock, machine=silence.LOCAL_MACHINE)
    clock.advance(3600)
    assert silence.assess(plane, job) is None
    assert silence.settle(plane, job).state is JobState.RUNNING


steps = st.lists(
    st.tuples(
        st.sampled_from(["advance", "gone", "present", "heard", "notice", "settle"]),
        st.floats(1, 400),
    ),
    max_size=25,
)


@settings(deadline=None, max_examples=40)
@given(steps)
def test_the_wiring_follows_the_model(tmp_path_factory: Any, script: list[Any]) -> None:
    """Whatever happens in whatever order, the control plane calls the job lost exactly when the
    pure model does on the same facts, never earlier; and every silent event says what it waits
    for, without repeating itself."""
    clock = FakeClock()
    plane, job = remote_job(str(tmp_path_factory.mktemp("home")), clock)
    try:
        follow_script(plane, job, clock, script)
    finally:
        _open.remove(plane)
        plane.store.close()


def follow_script(plane: ControlPlane, job: Job, clock: FakeClock, script: list[Any]) -> None:
    heard, checks, deadline = clock.now(), [], None
    for action, seconds in script:
        if action == "advance":
            clock.advance(seconds)
        elif action in ("gone", "present"):
            clock.advance(1)
            silence.record_machine_check(
                plane, job.id, MACHINE, gone=action == "gone", provider="aws"
            )
            checks.append(ProviderCheck(at=clock.now(), gone=action == "gone"))
        elif action == "heard":
            heard = clock.now()
            plane.store.heard(job.id, heard)
        elif action == "notice" and deadline is None:
            deadline = clock.now() + seconds
            plane.record(job.id, "notice", "notice", deadline=deadline)
        expected = RULES.assess(
            now=clock.now(), last_heard=heard, checks=checks, notice_deadline=deadline
        )
        before = job.state
        job = silence.settle(plane, job)
        if before is JobState.LOST:
            assert job.state is JobState.LOST
            continue
        assert (job.state is JobState.LOST) == expected.lost
        if job.state is JobState.LOST:
            continue
        messages = silent_events(plane, job)
        if expected.silent:
            assert messages
            assert messages[-1].split("; ", 1)[1] == expected.waiting_for.split("; ", 1)[1]
    said = silent_events(plane, job)
    assert all(a != b for a, b in itertools.pairwise(said))


# -- the provider asked, through the portal_machine_exists hook ------------------------------


class Provider:
    """A provider plugin whose API answers from a script of answers (True: there)."""

    def __init__(self, *answers: bool | None) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str, float]] = []
        self.clock: FakeClock | None = None

    @hookimpl
    def portal_machine_exists(
        self, provider: str, machine: str, facts: dict[str, str]
    ) -> bool | None:
        assert self.clock is not None and facts.get("zone") == "us-east-1a"
        self.asked.append((provider, machine, self.clock.now()))
        return self.answers.pop(0)


def provider_job(tmp_path: object, provider: object) -> tuple[ControlPlane, Job, FakeClock]:
    clock = FakeClock()
    plane, job = remote_job(str(tmp_path), clock)
    plane.plugins.pm.register(provider, name="acme-cloud")
    plane.record(
        job.id, "machine", "machine: aws spot", provider="aws", capacity="spot", zone="us-east-1a"
    )
    return plane, job, clock


def checks(plane: ControlPlane, job: Job) -> list[tuple[float, bool]]:
    return [
        (e.at, e.data["gone"]) for _, e in plane.store.events(job.id) if e.kind == "machine-check"
    ]


def test_the_provider_is_asked_about_once_a_minute_while_the_node_is_silent(
    tmp_path: object,
) -> None:
    provider = Provider(True, False, False)
    plane, job, clock = provider_job(tmp_path, provider)
    provider.clock = clock
    clock.advance(20)
    silence.settle(plane, job)
    assert provider.asked == []  # heard 20 s ago: not silent
    clock.advance(20)
    silence.settle(plane, job)
    t1 = clock.now()
    assert provider.asked == [("aws", MACHINE, t1)]  # the machine reported aws
    assert checks(plane, job) == [(t1, False)]
    clock.advance(30)
    silence.settle(plane, job)  # asked 30 s ago: not again
    assert len(provider.asked) == 1
    clock.advance(30)
    silence.settle(plane, job)
    clock.advance(60)
    assert silence.settle(plane, job).state is JobState.RUNNING
    assert [gone for _, gone in checks(plane, job)] == [False, True, True]
    assert "said twice" in silent_events(plane, job)[-1]  # and waits for 10 minutes of silence
    clock.advance(600)
    provider.answers.append(False)
    assert silence.settle(plane, job).state is JobState.LOST


def test_a_provider_that_cannot_tell_or_fails_never_says_gone(tmp_path: object) -> None:
    class Failing:
        @hookimpl
        def portal_machine_exists(self, machine: str) -> bool | None:
            raise ConnectionError("the API is down")

    provider = Provider(None, None)
    plane, job, clock = provider_job(tmp_path, provider)
    provider.clock = clock
    plane.plugins.pm.register(Failing(), name="failing-cloud")
    clock.advance(40)
    assert silence.settle(plane, job).state is JobState.RUNNING
    clock.advance(3600)
    assert silence.settle(plane, job).state is JobState.RUNNING
    assert checks(plane, job) == [] and len(provider.asked) == 2
    assert "say twice" in silent_events(plane, job)[-1]


def test_the_simulated_cloud_answers_through_the_same_hook(tmp_path: object) -> None:
    from portal.sim import SimulatedMachines, plugin

    clock = FakeClock()
    plane, _ = remote_job(str(tmp_path), clock)
    machines = SimulatedMachines(plane)
    offer = next(iter(machines.cloud.offers()))
    machine = machines.provision(offer)
    job = plane.create_job(script="train.py", workdir=str(tmp_path))
    plane.store.start_attempt(job.id, machine=machine.name, at=clock.now())
    plane.plugins.pm.register(plugin, name="simulated")
    assert plugin.machine_exists(plane.home, "i-0abc") is None  # not the simulated cloud's
    clock.advance(40)
    silence.settle(plane, job)
    assert checks(plane, job) == [(clock.now(), False)]  # silent, but the machine is there
    machines.release(machine.id, kill=False)
    for _ in range(2):
        clock.advance(60)
        silence.settle(plane, job)
    assert [gone for _, gone in checks(plane, job)] == [False, True, True]
    clock.advance(600)
    assert silence.settle(plane, job).state is JobState.LOST
    (lost,) = [e for _, e in plane.store.events(job.id) if e.kind == "lost"]
    assert machine.name in lost.message
