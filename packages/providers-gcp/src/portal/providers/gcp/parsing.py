"""Parsers for the GCE metadata values the notice source watches: pure, fuzzed with hypothesis.

Each raises :class:`ValueError` for a value that is not one the metadata server documents, so an
unreadable answer is an error and never a notice.
"""

from __future__ import annotations

import re

__all__ = ["maintenance_stops_machine", "parse_maintenance_event", "parse_preempted"]

_EVENT = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


def parse_preempted(text: str) -> bool:
    """``instance/preempted``: ``TRUE`` or ``FALSE``."""
    value = text.strip().upper()
    if value == "TRUE":
        return True
    if value == "FALSE":
        return False
    raise ValueError(f"instance/preempted is neither TRUE nor FALSE: {text[:40]!r}")


def parse_maintenance_event(text: str) -> str:
    """``instance/maintenance-event``: ``NONE``, ``MIGRATE_ON_HOST_MAINTENANCE``,
    ``TERMINATE_ON_HOST_MAINTENANCE`` (or a newer value of the same form)."""
    value = text.strip()
    if not _EVENT.match(value):
        raise ValueError(f"instance/maintenance-event is not a maintenance value: {text[:40]!r}")
    return value


def maintenance_stops_machine(value: str) -> bool:
    """Whether a maintenance event stops the machine. Live migration keeps it running (a short
    pause), so only a terminating or shutting-down event is a notice."""
    return value != "NONE" and ("TERMINATE" in value or "SHUTDOWN" in value)
