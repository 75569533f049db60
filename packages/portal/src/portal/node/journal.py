"""The node's journal: what it could not report to the control plane yet, kept on its own disk.

The spec: "If the node loses contact with the control plane during a notice, it saves the
checkpoint on its own and reports later." Saving needs only the store; reporting needs the
control plane. Every report (an event, a state change, the end of the attempt) goes through
:meth:`Journal.add`: delivered in order, oldest first, each with the time it happened. What the
control plane does not take is written to ``backlog.jsonl`` in the attempt's directory, so that
a node killed while offline loses nothing either (``portal.control.backlog.replay_file``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Journal"]

log = logging.getLogger("portal.node")


class Journal:
    """Delivers reports in order; keeps the undelivered ones in memory and in ``path``."""

    def __init__(self, path: Path, deliver: Callable[[dict[str, Any]], None]) -> None:
        self.path = path
        self._deliver = deliver
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.offline_since: float | None = None  # when the first report could not be delivered
        self.kept_total = 0  # how many reports waited in the backlog during this outage

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, entry: dict[str, Any], *, now: float, attempt: bool = True) -> None:
        """Queue ``entry`` and try to deliver the backlog (unless ``attempt`` is False: offline,
        the node only retries on its heartbeat, so that a notice never waits on a dead control
        plane)."""
        with self._lock:
            self._pending.append(entry)
            if self.offline_since is not None:
                self.kept_total += 1
        if attempt:
            self.flush(now=now)
        else:
            self._save()

    def flush(self, *, now: float) -> bool:
        """Deliver what is pending; True when nothing is left."""
        with self._lock:
            delivered = 0
            error: Exception | None = None
            for entry in self._pending:
                try:
                    self._deliver(entry)
                except Exception as exc:
                    error = exc
                    break
                delivered += 1
            del self._pending[:delivered]
            if error is not None and self.offline_since is None:
                self.offline_since = now
                self.kept_total = len(self._pending)
                log.warning(
                    "control plane unreachable; %d report(s) kept in %s: %s",
                    len(self._pending),
                    self.path,
                    error,
                )
            self._save_locked()
            return not self._pending

    def _save(self) -> None:
        with self._lock:
            self._save_locked()

    def _save_locked(self) -> None:
        if not self._pending:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as out:
            for entry in self._pending:
                out.write(json.dumps(entry, default=str, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(self.path)
