"""One log line per distinct problem of a notice source, and one when it clears.

A source polls every second or so; a metadata service that is down for a minute would otherwise
write sixty identical warnings. Each problem has a key (``unreachable``, ``/path:503``...); the
first report of a key logs, repeats are silent until the key is cleared.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["ProblemLog"]


class ProblemLog:
    """Logs one line per distinct problem, and one when it clears, instead of one per poll.

    Thread-safe: a source's watcher threads report into the same log.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._active: dict[str, str] = {}
        self._lock = threading.Lock()

    def report(self, key: str, message: str, *, level: int = logging.WARNING) -> None:
        with self._lock:
            if key in self._active:
                return
            self._active[key] = message
        self.logger.log(level, "%s", message)

    def clear(self, key: str) -> None:
        with self._lock:
            message = self._active.pop(key, None)
        if message is not None:
            self.logger.info("recovered: %s", key)

    def clear_prefix(self, prefix: str) -> None:
        with self._lock:
            keys = [k for k in self._active if k.startswith(prefix)]
        for key in keys:
            self.clear(key)

    def active(self) -> dict[str, str]:
        with self._lock:
            return dict(self._active)
