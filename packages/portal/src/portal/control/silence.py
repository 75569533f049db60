"""The lost-job rules at work: a silent node, the provider's answers, and what Portal waits for.

:mod:`portal.control.lost` is the pure model; this module feeds it the facts the control plane
holds and records what follows:

* the node's last-heard time (its heartbeat, ``jobs.last_heard``);
* the provider's answers about the attempt's machine — gone or still there — recorded as
  ``machine-check`` events by :func:`record_machine_check`: :func:`settle` asks the provider
  through the ``portal_machine_exists`` hook (the provider plugins, the simulated cloud) about
  once a minute while the node is silent, each time someone looks at the job (``status``,
  ``jobs``, ``logs -f``, the server's API); on this machine alone Portal knows for certain
  instead, see :mod:`portal.control.liveness`;
* the deadline of the notice the machine had, if any (its latest ``notice`` event).

:func:`settle` records a ``silent`` event each time what Portal waits for changes, and declares
the loss only when the rules allow it; :func:`refuse_while_silent` refuses a suspend or a move
with the same words.
"""

from __future__ import annotations

from typing import Any

import attrs

from portal.control.lost import LostAssessment, LostJobRules, ProviderCheck
from portal.control.plane import ControlPlane
from portal.control.store import JobStateConflictError
from portal.core.domain import Attempt, AttemptState, Event, Job, JobState

__all__ = [
    "CHECK_EVERY_S",
    "LOCAL_MACHINE",
    "ask_provider",
    "assess",
    "record_machine_check",
    "refuse_while_silent",
    "settle",
]

#: The machine name of attempts on this machine (``portal run``); liveness decides for them.
LOCAL_MACHINE = "local"
RULES = LostJobRules()
#: How often the provider is asked about a silent node's machine ("about a minute").
CHECK_EVERY_S = 60.0


def _current_attempt(plane: ControlPlane, job: Job) -> Attempt | None:
    if job.state not in (JobState.RUNNING, JobState.PAUSING):
        return None
    attempts = plane.store.attempts(job.id)
    if not attempts or attempts[-1].state is not AttemptState.RUNNING:
        return None
    return attempts[-1]


def record_machine_check(
    plane: ControlPlane, job_id: str, machine: str, *, gone: bool, provider: str
) -> None:
    """The provider's answer about ``machine`` now: gone, or still there."""
    word = "gone" if gone else "still there"
    plane.record(
        job_id,
        "machine-check",
        f"{provider} says machine {machine} is {word}",
        machine=machine,
        gone=gone,
        provider=provider,
    )


@attrs.frozen
class _Watched:
    """A running attempt the lost-job rules apply to: its machine as the provider names it, and
    what its node reported of that machine."""

    attempt: Attempt
    machine: str
    facts: dict[str, str]
    events: list[tuple[int, Event]]


def _watched(plane: ControlPlane, job: Job) -> _Watched | None:
    """The job's running attempt, unless liveness alone decides for it: an attempt on this
    machine (``local``) whose node named no provider's instance. A node that learned its
    instance (``instance_id`` in its ``machine`` event: a ``portal run`` on a cloud VM, whose
    control plane may be elsewhere) is checked with its provider under that id."""
    attempt = _current_attempt(plane, job)
    if attempt is None:
        return None
    events = list(plane.store.events(job.id))
    facts: dict[str, str] = {}
    for _, event in events:
        if event.kind == "machine" and event.at >= attempt.started_at:
            facts = {k: str(v) for k, v in event.data.items() if v is not None}
    machine = facts.get("instance_id") or attempt.machine
    if machine == LOCAL_MACHINE:
        return None
    return _Watched(attempt=attempt, machine=machine, facts=facts, events=events)


def ask_provider(plane: ControlPlane, job: Job, *, rules: LostJobRules = RULES) -> bool:
    """Ask the provider whether the silent node's machine still exists, unless it was asked
    less than :data:`CHECK_EVERY_S` ago (or before the node went silent: then now); record the
    answer. False when it was not asked or no plugin could tell."""
    watched = _watched(plane, job)
    return watched is not None and _ask(plane, job, watched, rules)


def _ask(plane: ControlPlane, job: Job, watched: _Watched, rules: LostJobRules) -> bool:
    now = plane.clock.now()
    heard = plane.store.last_heard(job.id) or watched.attempt.started_at
    if now - heard < rules.silent_after_s:
        return False
    for _, event in watched.events:
        if (
            event.kind == "machine-check"
            and event.data.get("machine") == watched.machine
            and event.at > heard
            and now - event.at < CHECK_EVERY_S
        ):
            return False
    provider = watched.facts.get("provider", "")
    settings = plane.settings.with_plugins(plane.plugins).values
    answer = plane.plugins.machine_exists(
        provider, watched.machine, str(plane.home), watched.facts, settings
    )
    if answer is None:
        return False
    record_machine_check(
        plane, job.id, watched.machine, gone=not answer, provider=provider or "the provider"
    )
    return True


def assess(plane: ControlPlane, job: Job, *, rules: LostJobRules = RULES) -> LostAssessment | None:
    """Where the job stands under the lost-job rules now; None when they do not apply (the job is
    not running, or runs on this machine, where liveness knows for certain)."""
    watched = _watched(plane, job)
    return None if watched is None else _assess(plane, watched, rules)


def _assess(plane: ControlPlane, watched: _Watched, rules: LostJobRules) -> LostAssessment:
    attempt = watched.attempt
    heard = plane.store.last_heard(attempt.job_id) or attempt.started_at
    checks: list[ProviderCheck] = []
    deadline: float | None = None
    for _, event in watched.events:
        if event.at < attempt.started_at:
            continue
        if event.kind == "machine-check" and event.data.get("machine") == watched.machine:
            checks.append(ProviderCheck(at=event.at, gone=bool(event.data.get("gone"))))
        elif event.kind == "notice" and event.data.get("deadline") is not None:
            deadline = float(event.data["deadline"])
        elif event.kind == "notice-withdrawn":
            deadline = None
    return rules.assess(
        now=plane.clock.now(), last_heard=heard, checks=checks, notice_deadline=deadline
    )


def _stage(assessment: LostAssessment) -> str:
    """What Portal waits for, without the figures that change every minute."""
    text = assessment.waiting_for
    return text.split("; ", 1)[1] if "; " in text else text


def settle(
    plane: ControlPlane,
    job: Job,
    latest_checkpoint: Any | None = None,
    *,
    rules: LostJobRules = RULES,
) -> Job:
    """Apply the rules now: record what Portal waits for when it changed, or declare the loss.

    A lost attempt leaves the job its last complete checkpoint (``suspended``: resume it
    elsewhere); a job with none is ``lost``.
    """
    watched = _watched(plane, job)  # the job's events, read once (again after an answer)
    if watched is None:
        return job
    assessment = _assess(plane, watched, rules)
    if not assessment.silent:
        return job
    if _ask(plane, job, watched, rules):
        watched = _watched(plane, job)  # the provider's answer is an event now
        if watched is None:
            return job
        assessment = _assess(plane, watched, rules)
        if not assessment.silent:
            return job
    attempt, machine = watched.attempt, watched.machine
    if not assessment.lost:
        heard = plane.store.last_heard(job.id)
        stage = _stage(assessment)
        if _last_silent_stage(watched.events) != (stage, heard):
            plane.record(job.id, "silent", assessment.waiting_for, stage=stage, last_heard=heard)
        return job
    now = plane.clock.now()
    plane.store.end_attempt(job.id, attempt.number, state=AttemptState.LOST, at=now, exit_code=None)
    if latest_checkpoint is not None:
        plane.record(
            job.id,
            "lost-machine",
            f"machine {machine} is gone for certain (the provider said so twice with the "
            f"node silent): attempt {attempt.number} is lost; the job keeps checkpoint "
            f"{latest_checkpoint.checkpoint_id}, the last complete one; resume with "
            f"`portal resume {job.name or job.id}`",
            machine=machine,
            checkpoint=latest_checkpoint.checkpoint_id,
        )
        return plane.set_state(job.id, JobState.SUSPENDED)
    plane.record(
        job.id,
        "lost",
        f"machine {machine} is gone for certain (the provider said so twice with the node "
        f"silent) and the job has no complete checkpoint: it is lost; run the script again with "
        "`portal run`",
        machine=machine,
    )
    return plane.set_state(job.id, JobState.LOST)


def _last_silent_stage(events: list[tuple[int, Event]]) -> tuple[str, float | None] | None:
    """What the last ``silent`` event said Portal waits for, and for which silence (the node's
    last-heard time), unless the node reported something since."""
    stage = None
    for _, event in events:
        if event.kind == "silent":
            stage = (str(event.data.get("stage")), event.data.get("last_heard"))
        elif event.kind != "machine-check":
            stage = None
    return stage


def refuse_while_silent(plane: ControlPlane, job: Job, what: str) -> None:
    """Refuse ``what`` (a suspend, a move) while the job's node is silent, with the words of the
    rules: what Portal waits for before it may call the job lost."""
    assessment = assess(plane, job)
    if assessment is not None and assessment.silent and not assessment.lost:
        raise JobStateConflictError(
            f"{what} is refused for now: {assessment.waiting_for}",
            details={"job": job.id, "waiting_for": assessment.waiting_for},
        )
