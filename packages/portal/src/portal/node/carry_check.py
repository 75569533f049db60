"""The checkpoint check, on the node's side: when to ask the job for one, and what its answers
say (the ``carry-*`` events).

The node asks at the job's first pause point and then every ``capture_probe_every_s``; the
runtime walks the state at its next pause point and answers with a :class:`ProbeReport`. A value
a checkpoint could not carry is warned about once per machine and problem (across the job's
attempts there) until a check passes again; a check that finds no pause point for
``blocked_after_s`` reports the job blocked, with the reasons the runtime gave. A notice always
wins: nothing is asked for or judged while a pause is wanted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from msgspec import to_builtins

from portal.control import wording
from portal.control.carry import probe_settings_for_job, problem_key
from portal.core.clock import Clock
from portal.core.domain import Event
from portal.core.settings import Settings
from portal.runtime.protocol import ProbeReport, ProblemRecord

__all__ = [
    "BLOCKED_AFTER_ENV",
    "BLOCKED_AFTER_S",
    "CarryCheck",
    "ProbeSchedule",
    "outstanding_warnings",
]

BLOCKED_AFTER_ENV = "PORTAL_CAPTURE_BLOCKED_AFTER_S"
BLOCKED_AFTER_S = 30.0


class Report(Protocol):
    """The node's ``report``: records one event (kept for later if the plane does not answer)."""

    def __call__(self, kind: str, message: str, /, **data: Any) -> None: ...


class ProbeLink(Protocol):
    """What the check needs of the runtime link."""

    @property
    def connected(self) -> bool: ...

    def request_probe(self, next_at: float) -> bool: ...


class ProbeSchedule:
    """When the node asks for the checkpoint check, and what it is waiting for."""

    def __init__(
        self, *, enabled: bool, every_s: float, blocked_after_s: float, full: bool = False
    ) -> None:
        self.enabled = enabled
        self.full = full  # capture_probe = full: rehearse when the machine is on-demand
        self.rehearse = False
        self.every_s = every_s
        self.blocked_after_s = blocked_after_s
        self.next_at = 0.0  # the first check: at the job's first pause point, as soon as it can
        self.asked_at: float | None = None
        self.reasons: list[ProblemRecord] = []
        self.blocked = False
        self.passed_once = False
        self.partial_said = False

    @classmethod
    def for_job(cls, settings: Settings, environ: Mapping[str, str]) -> ProbeSchedule:
        """The settings, overridden by the job's own PORTAL_CAPTURE_PROBE(_EVERY_S)."""
        settings = probe_settings_for_job(settings, environ)
        try:
            blocked_after = float(environ.get(BLOCKED_AFTER_ENV, BLOCKED_AFTER_S))
        except ValueError:
            blocked_after = BLOCKED_AFTER_S
        return cls(
            enabled=settings.capture_probe != "off",
            every_s=settings.capture_probe_every_s,
            blocked_after_s=blocked_after,
            full=settings.capture_probe == "full",
        )

    @property
    def waiting(self) -> bool:
        return self.asked_at is not None

    def asked(self, now: float) -> None:
        if self.asked_at is None:
            self.asked_at = now
            self.reasons = []
        self.next_at = now + self.every_s

    def answered(self, now: float) -> None:
        self.asked_at = None
        self.reasons = []
        self.blocked = False
        self.next_at = now + self.every_s


def outstanding_warnings(events: Iterable[Event], machine: str) -> set[str]:
    """Problems already warned about on ``machine`` and not cleared since (one warning per
    machine and problem, across the job's attempts there)."""
    warned: set[str] = set()
    for event in events:
        if event.data.get("machine") != machine:
            continue
        if event.kind == "carry-warning":
            warned.add(problem_key(dict(event.data.get("problem", {}))))
        elif event.kind == "carry-ok":
            warned.clear()
    return warned


class CarryCheck:
    """Asks for the check when due and turns its answers into the job's ``carry-*`` events."""

    def __init__(
        self,
        schedule: ProbeSchedule,
        *,
        clock: Clock,
        machine: str,
        purchase: str,
        warned: set[str],
        notice_s: Callable[[], float | None],
        report: Report,
    ) -> None:
        self.schedule = schedule
        self.clock = clock
        self.machine = machine
        #: ``spot``, ``on-demand`` or ``unknown``; the node updates it once the machine's
        #: notice source says. It files a warning under policy spot on a spot machine.
        self.purchase = purchase
        self.warned = warned
        self.notice_s = notice_s
        self.report = report

    def tick(self, link: ProbeLink, *, pause_wanted: bool) -> None:
        """Ask for a check when one is due; report the job blocked when none could run in
        time. Nothing is asked for or judged while a pause is wanted."""
        schedule = self.schedule
        if not schedule.enabled or pause_wanted or not link.connected:
            return
        now = self.clock.monotonic()
        if now >= schedule.next_at:
            if link.request_probe(self.clock.now() + schedule.every_s):
                schedule.asked(now)
            return
        if (
            schedule.asked_at is not None
            and not schedule.blocked
            and now - schedule.asked_at >= schedule.blocked_after_s
        ):
            schedule.blocked = True
            reasons = list(schedule.reasons)
            self.report(
                "carry-blocked",
                wording.carry_blocked(schedule.blocked_after_s, reasons),
                machine=self.machine,
                purchase=self.purchase,
                after_s=schedule.blocked_after_s,
                reasons=[to_builtins(r) for r in reasons],
            )

    def answered(self, event: ProbeReport) -> None:
        """One check's answer: warn about each value it could not carry (once), say when the
        job is unblocked, partially checked, rehearsed, or passes again."""
        schedule = self.schedule
        was_blocked = schedule.blocked
        schedule.answered(self.clock.monotonic())
        if was_blocked:
            self.report(
                "carry-unblocked", wording.carry_unblocked(event.where), machine=self.machine
            )
        values = [p for p in event.problems if p.kind == "value"]
        for problem in values:
            key = problem_key(to_builtins(problem))
            if key in self.warned:
                continue
            self.warned.add(key)
            self.report(
                "carry-warning",
                wording.carry_warning(problem, self.notice_s()),
                machine=self.machine,
                purchase=self.purchase,
                problem=to_builtins(problem),
            )
        if values or event.partial:
            if event.partial and not values and not schedule.partial_said:
                schedule.partial_said = True
                self.report(
                    "carry-partial",
                    wording.carry_partial(event.where, event.checked_bytes, event.seconds),
                    machine=self.machine,
                )
            return
        rehearsal: dict[str, Any] = {}
        if schedule.rehearse:
            rehearsal = {"rehearsal_bytes": event.checked_bytes, "rehearsal_seconds": event.seconds}
            self.report(
                "carry-rehearsal",
                wording.rehearsed(event.where, event.checked_bytes, event.seconds),
                machine=self.machine,
                where=event.where,
                bytes=event.checked_bytes,
                seconds=event.seconds,
            )
        if self.warned or not schedule.passed_once:
            self.report(
                "carry-ok",
                wording.carry_ok(
                    event.where, event.checked_bytes, event.seconds, cleared=bool(self.warned)
                ),
                machine=self.machine,
                where=event.where,
                checked_bytes=event.checked_bytes,
                seconds=event.seconds,
                **rehearsal,
            )
            self.warned.clear()
        schedule.passed_once = True
