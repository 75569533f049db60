"""Parsers for Azure IMDS documents (Scheduled Events, instance compute): pure, fuzzed with hypothesis.

Each raises :class:`ValueError` for a body that is not the documented shape, so an unreadable
answer is an error and never a notice (nor the withdrawal of one).
"""

from __future__ import annotations

import email.utils
import json
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "EVENT_TYPES",
    "EventsDocument",
    "ScheduledEvent",
    "parse_compute",
    "parse_not_before",
    "parse_scheduled_events",
]

EVENT_TYPES = frozenset({"Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"})


def parse_not_before(text: str) -> float | None:
    """``Mon, 11 Apr 2022 22:26:58 GMT`` -> Unix seconds; ``""`` (the event started) -> None."""
    if not text.strip():
        return None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        raise ValueError(f"NotBefore is not an RFC 1123 time: {text[:60]!r}") from None
    try:
        seconds = when.timestamp()
    except (ValueError, OverflowError):
        raise ValueError(f"NotBefore is not a valid time: {text[:60]!r}") from None
    if seconds < 0:
        raise ValueError(f"NotBefore is before 1970: {text[:60]!r}")
    return seconds


@attrs.frozen
class ScheduledEvent:
    event_id: str
    event_type: str
    status: str
    resource_type: str
    resources: tuple[str, ...]
    not_before: float | None  # None once the event has started (NotBefore "")
    raw: Mapping[str, Any]

    def concerns(self, names: frozenset[str]) -> bool:
        """Whether this event is for one of ``names`` (VM names, compared case-insensitively)."""
        return any(r.lower() in names for r in self.resources)


@attrs.frozen
class EventsDocument:
    incarnation: int
    events: tuple[ScheduledEvent, ...]


def _json_object(body: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not a JSON object")
    return data


def parse_scheduled_events(body: str) -> tuple[EventsDocument, list[str]]:
    """The Scheduled Events document -> (document, problems with entries that were skipped).

    The document as a whole must be readable (an object with an integer ``DocumentIncarnation``
    and an ``Events`` array); an entry without an ``EventId`` or with an unreadable ``NotBefore``
    is skipped and named in the problems, since it can neither be de-duplicated nor timed.
    """
    data = _json_object(body, "the Scheduled Events document")
    incarnation = data.get("DocumentIncarnation")
    if not isinstance(incarnation, int) or isinstance(incarnation, bool) or incarnation < 0:
        raise ValueError("the Scheduled Events document has no DocumentIncarnation")
    entries = data.get("Events")
    if not isinstance(entries, list):
        raise ValueError("the Scheduled Events document has no Events array")
    events: list[ScheduledEvent] = []
    problems: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict):
            problems.append("an event is not an object")
            continue
        event_id = entry.get("EventId")
        if not isinstance(event_id, str) or not event_id:
            problems.append("an event has no EventId")
            continue
        resources = entry.get("Resources", [])
        if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
            problems.append(f"event {event_id[:40]!r} has no list of Resources")
            continue
        not_before_text = entry.get("NotBefore", "")
        try:
            if not isinstance(not_before_text, str):
                raise ValueError("NotBefore is not a string")
            not_before = parse_not_before(not_before_text)
        except ValueError as exc:
            problems.append(f"event {event_id[:40]!r}: {exc}")
            continue

        def text(key: str, entry: dict[str, Any] = entry) -> str:
            value = entry.get(key, "")
            return value if isinstance(value, str) else ""

        events.append(
            ScheduledEvent(
                event_id=event_id,
                event_type=text("EventType"),
                status=text("EventStatus"),
                resource_type=text("ResourceType") or "VirtualMachine",
                resources=tuple(resources),
                not_before=not_before,
                raw=entry,
            )
        )
    return EventsDocument(incarnation=incarnation, events=tuple(events)), problems


def parse_compute(body: str) -> dict[str, str]:
    """``/metadata/instance`` -> the ``compute`` strings Portal uses (name, vmSize, priority,
    evictionPolicy, location, zone, vmScaleSetName, and where Resource Manager keeps the VM:
    vmId, subscriptionId, resourceGroupName); absent ones are ``""``."""
    data = _json_object(body, "the instance metadata document")
    compute = data.get("compute")
    if not isinstance(compute, dict):
        raise ValueError("the instance metadata document has no compute object")
    keys = (
        "name",
        "vmSize",
        "priority",
        "evictionPolicy",
        "location",
        "zone",
        "vmScaleSetName",
        "vmId",
        "subscriptionId",
        "resourceGroupName",
    )
    found = {k: compute.get(k, "") for k in keys}
    return {k: v if isinstance(v, str) else "" for k, v in found.items()}
