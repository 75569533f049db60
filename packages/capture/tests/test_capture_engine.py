"""The pause lifecycle's deadlines and cancellation, with an injected clock (no sleeping)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from portal.capture.engine import Abandoned, Engine, Pending
from portal.capture.snapshot import CaptureContext
from portal.capture.usercode import UserCode


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _off_main(fn: Callable[[], Any]) -> Any:
    """Requests from another thread, as the control channel makes them (an unarmed engine then
    switches nothing on in this test process)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(fn()))
    thread.start()
    thread.join()
    return result[0] if result else None


def _engine(tmp_path: Path, clock: Clock, events: list[Any]) -> Engine:
    ctx = CaptureContext(
        user_code=UserCode(__file__), main_namespace=sys.modules[__name__].__dict__
    )
    return Engine(ctx, checkpoint_path=tmp_path / "ck.portal", notify=events.append, clock=clock)


def test_deadline_abandons_a_pending_pause(tmp_path: Path) -> None:
    clock, events = Clock(), []
    engine = _engine(tmp_path, clock, events)
    assert engine.pending() is False
    _off_main(lambda: engine.request_pause(clock.now + 5, "node"))
    assert engine.pending() is True
    assert events == [Pending(source="node", deadline=1005.0)]
    clock.now += 4
    _off_main(engine.expire)
    assert engine.pending() is True
    clock.now += 2
    assert engine.pending() is False  # past its deadline, rt.pending() is already false
    _off_main(engine.expire)
    assert isinstance(events[-1], Abandoned) and events[-1].reason == "deadline"
    assert engine.deadline() is None


def test_two_requests_keep_the_earlier_deadline_and_cancel_ends_it(tmp_path: Path) -> None:
    clock, events = Clock(), []
    engine = _engine(tmp_path, clock, events)
    _off_main(lambda: engine.request_pause(clock.now + 30, "sigterm"))
    _off_main(lambda: engine.request_pause(clock.now + 10, "node"))
    assert engine.deadline() == clock.now + 10
    _off_main(lambda: engine.request_pause(clock.now + 60, "node"))
    assert engine.deadline() == clock.now + 10
    _off_main(engine.cancel)
    assert isinstance(events[-1], Abandoned) and events[-1].reason == "cancelled"
    assert engine.pending() is False
    _off_main(engine.cancel)  # nothing pending: no second event
    assert sum(isinstance(e, Abandoned) for e in events) == 1
