"""A SIGTERM that arrives while ``python -m portal.runtime`` is still starting.

Between the interpreter running the runtime's first line and the engine arming (its imports, the
plugins, the script's compilation; for ``resume`` also the checkpoint's loading: a few tenths of
a second) a SIGTERM would end the process as the default action does. ``__main__`` installs this
tiny handler first thing, before any heavy import; it only notes the time. When the engine arms,
a notice received meanwhile becomes a pause request with the usual grace (counted from the
notice), taken at the first safe point: the script's first line, or for ``resume`` the line the
checkpoint paused at (the checkpoint it resumed from is overwritten only by that new pause).

Only the builtin ``_signal`` and ``time`` modules are imported here, so the handler is in place a
millisecond after the interpreter has started running Python code. (A SIGTERM during the
interpreter's own start-up, before it runs any Python code, still ends the process.)
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # (no stub; the cheapest import there is)
import time
from types import FrameType

__all__ = ["install", "take"]


class _Notices:
    """The early handler (a bound method of the runtime's own, like the engine's handler, so the
    ``signal_handlers`` capture extension never takes it for one of the program's)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.times.append(time.time())


_NOTICES = _Notices()  # runtime singleton


def install() -> None:
    """Note each SIGTERM from now on, until the engine's own handler replaces this one."""
    _signal.signal(_signal.SIGTERM, _NOTICES.on_sigterm)


def take() -> float | None:
    """The unix time of the first SIGTERM noted since :func:`install` (None: none came); the
    notes are cleared."""
    times = _NOTICES.times
    first = min(times) if times else None
    times.clear()
    return first
