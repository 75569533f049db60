"""A clock for tests: time moves only when told to (or when the code under test sleeps)."""

from __future__ import annotations

import threading


class FakeClock:
    """Implements :class:`portal.core.clock.Clock`; ``sleep`` advances time instead of waiting."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._wall = float(start)
        self._mono = 0.0

    def now(self) -> float:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds``."""
        if seconds < 0:
            raise ValueError("a clock never goes back; advance by a number >= 0")
        with self._lock:
            self._wall += seconds
            self._mono += seconds

    def __repr__(self) -> str:
        return f"FakeClock(now={self._wall!r})"
