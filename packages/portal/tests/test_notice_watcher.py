"""The node's watcher of notice sources: a source that does not block is polled once per poll
timeout, not in a busy loop, and what any source reports reaches the node."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from portal.core.domain import Notice, NoticeKind
from portal.node.watch import NoticeWatcher


class _AtOnce:
    """A source as one may be written from a quick read of the docs: its ``poll`` looks at its
    platform and returns at once, never waiting its timeout. Reports one notice when told."""

    name = "at-once"

    def __init__(self) -> None:
        self.polls = 0
        self.due = threading.Event()
        self._reported = False

    def detect(self) -> bool:
        return True

    def poll(self, timeout_s: float) -> Sequence[Notice]:
        self.polls += 1
        if self.due.is_set() and not self._reported:
            self._reported = True
            now = time.time()
            return [
                Notice(
                    id="n1",
                    source=self.name,
                    provider="test",
                    kind=NoticeKind.PREEMPTION,
                    deadline=now + 60,
                    seen_at=now,
                )
            ]
        return []

    def close(self) -> None:
        pass


def test_a_source_that_returns_at_once_is_polled_once_per_timeout() -> None:
    """Such a source made a node's watcher spin at 45% CPU: the watcher waits the rest of the
    poll's timeout itself. Only a bound from above is asserted (a loaded machine polls less)."""
    source = _AtOnce()
    watcher = NoticeWatcher([source], poll_timeout_s=0.1).start()
    try:
        started = time.monotonic()
        time.sleep(1.0)
        polls, elapsed = source.polls, time.monotonic() - started
        assert polls <= elapsed / 0.1 + 3, f"{polls} polls in {elapsed:.2f} s"
        source.due.set()
        (notice,) = watcher.get(timeout_s=10.0)
        assert notice.id == "n1"
    finally:
        watcher.close()
