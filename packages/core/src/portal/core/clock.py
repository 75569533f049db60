"""The injectable clock.

Everything time-based in Portal (notice deadlines, lost-job rules, probe intervals, retries) takes
a :class:`Clock` instead of calling :mod:`time` directly, so tests move time forward without
sleeping. :class:`SystemClock` is the real one; :class:`portal.testing.FakeClock` the test one.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Wall time for records and deadlines, monotonic time for intervals, and sleeping."""

    def now(self) -> float:
        """Seconds since the Unix epoch (wall clock: deadlines, event times)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals, timeouts)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (a fake clock advances instead)."""
        ...


class SystemClock:
    """The real clock, backed by :mod:`time`."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


#: The process-wide real clock (stateless, so sharing it is safe).
SYSTEM_CLOCK: Clock = SystemClock()
