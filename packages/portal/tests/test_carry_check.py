"""The node's side of the checkpoint check (portal.node.carry_check), on an injected clock: when it
asks, when it says a job is blocked, and which answers become which events, each once. The
end-to-end runs (a real job, node and runtime) are in test_carry.py."""

from __future__ import annotations

from typing import Any

from portal.core.domain import Event
from portal.node.carry_check import CarryCheck, ProbeSchedule, outstanding_warnings
from portal.runtime.protocol import ProbeReport, ProblemRecord
from portal.testing import FakeClock

LOCK = ProblemRecord(name="lock", type_name="_thread.lock", reason="cannot be pickled")


class Link:
    """The runtime link as the check sees it: connected, and recording what was asked."""

    connected = True

    def __init__(self) -> None:
        self.asked: list[float] = []

    def request_probe(self, next_at: float) -> bool:
        self.asked.append(next_at)
        return True


def make(clock: FakeClock, warned: set[str] | None = None) -> tuple[CarryCheck, list[Any]]:
    events: list[Any] = []
    schedule = ProbeSchedule(enabled=True, every_s=600.0, blocked_after_s=30.0)
    check = CarryCheck(
        schedule,
        clock=clock,
        machine="local",
        purchase="spot",
        warned=set() if warned is None else warned,
        notice_s=lambda: 120.0,
        report=lambda kind, message, **data: events.append((kind, message, data)),
    )
    return check, events


def test_it_asks_at_once_then_every_interval_and_says_blocked_once() -> None:
    clock, link = FakeClock(), Link()
    check, events = make(clock)
    check.tick(link, pause_wanted=False)
    assert len(link.asked) == 1  # the first check: at the first pause point
    check.schedule.reasons = [LOCK]  # the runtime's reason it finds no pause point
    clock.advance(29)
    check.tick(link, pause_wanted=False)
    assert events == []
    clock.advance(2)
    for _ in range(2):
        check.tick(link, pause_wanted=False)
    assert [e[0] for e in events] == ["carry-blocked"]
    assert events[0][2]["reasons"][0]["name"] == "lock"
    check.answered(ProbeReport(where="train.py:12", checked_bytes=10))
    assert [e[0] for e in events] == ["carry-blocked", "carry-unblocked", "carry-ok"]
    clock.advance(599)
    check.tick(link, pause_wanted=False)
    assert len(link.asked) == 1
    clock.advance(1)
    check.tick(link, pause_wanted=True)  # a pause wins: no check is asked for
    assert len(link.asked) == 1
    check.tick(link, pause_wanted=False)
    assert len(link.asked) == 2


def test_a_value_is_warned_once_until_a_check_passes_again() -> None:
    clock = FakeClock()
    check, events = make(clock)
    for _ in range(2):
        check.answered(ProbeReport(problems=[LOCK], where="train.py:3"))
    assert [e[0] for e in events] == ["carry-warning"]
    assert events[0][2]["problem"]["type_name"] == "_thread.lock"
    assert events[0][2]["purchase"] == "spot"  # explain files it under policy spot
    assert "If this spot machine is reclaimed (its notice is 120 s)" in events[0][1]
    check.answered(ProbeReport(where="train.py:9", checked_bytes=5))
    assert [e[0] for e in events] == ["carry-warning", "carry-ok"]
    assert events[-1][2]["checked_bytes"] == 5
    check.answered(ProbeReport(where="train.py:9"))  # passing again says nothing new
    check.answered(ProbeReport(partial=True, where="train.py:9"))
    check.answered(ProbeReport(partial=True, where="train.py:9"))
    assert [e[0] for e in events] == ["carry-warning", "carry-ok", "carry-partial"]


def test_warnings_outstanding_on_this_machine_are_not_repeated() -> None:
    def event(kind: str, machine: str, **data: Any) -> Event:
        return Event(job_id="j", at=1.0, kind=kind, message="", data={"machine": machine, **data})

    problem = {"name": "lock", "type_name": "_thread.lock", "reason": "cannot be pickled"}
    history = [
        event("carry-warning", "local", problem=problem),
        event("carry-warning", "sim-0002", problem={**problem, "name": "other"}),
    ]
    warned = outstanding_warnings(history, "local")
    assert len(warned) == 1
    assert outstanding_warnings([*history, event("carry-ok", "local")], "local") == set()
    check, events = make(FakeClock(), warned)
    check.answered(ProbeReport(problems=[LOCK]))
    assert events == []  # warned about already on this machine, in an earlier attempt
