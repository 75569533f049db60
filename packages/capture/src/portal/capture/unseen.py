"""Portal's own threads in the program's process, started so that the program does not see them.

A script that lists its threads (``threading.enumerate()``, ``active_count()``: a check that
its workers have ended, a log line) must print under Portal what it prints in a plain run. A
``threading.Thread`` registers itself where those look; a thread started with
``_thread.start_new_thread`` does not. So Portal's threads in the program's process (the
runtime's control thread, a rank's request and count threads, the writer of a periodic
checkpoint) are bare threads, each with the one thing wanted of a ``Thread`` besides running:
being waited for (:meth:`UnseenThread.join`). Their code must not ask
``threading.current_thread()`` (nor log through ``logging``, which does): that would register
a stand-in ``Thread`` the program could see.
"""

from __future__ import annotations

import _thread
from collections.abc import Callable
from typing import Any

__all__ = ["UnseenThread"]


class UnseenThread:
    """``target(*args)`` run in a new bare thread, which ends with the process if it has not
    ended before (as a daemon thread does)."""

    def __init__(self, target: Callable[..., Any], *args: Any) -> None:
        self._done = _thread.allocate_lock()
        self._done.acquire()
        _thread.start_new_thread(self._run, (target, args))

    def _run(self, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            target(*args)
        finally:
            self._done.release()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the thread has ended (at most ``timeout`` seconds); whether it has."""
        ended = self._done.acquire(True, -1 if timeout is None else timeout)
        if ended:
            self._done.release()
        return ended

    def is_alive(self) -> bool:
        return self._done.locked()
