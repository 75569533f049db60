"""Parsers for the IMDS notice documents: pure functions, fuzzed with hypothesis.

Each raises :class:`ValueError` for a body that is not the documented shape, so the source can
tell "no notice" (a 404) from "an answer it cannot read" (an error, never a notice).
"""

from __future__ import annotations

import calendar
import datetime as dt
import json
import re
from typing import Any

import attrs

__all__ = [
    "InstanceAction",
    "MaintenanceEvent",
    "parse_aws_time",
    "parse_instance_action",
    "parse_maintenance",
    "parse_maintenance_time",
    "parse_rebalance",
    "parse_termination_time",
]

SPOT_ACTIONS = frozenset({"terminate", "stop", "hibernate"})
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$")
# "21 Jan 2019 09:00:43 GMT", the form EC2 gives maintenance times in (Go's "2 Jan 2006 ...").
_MAINT = re.compile(
    r"^(\d{1,2}) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{4}) "
    r"(\d{2}):(\d{2}):(\d{2}) (GMT|UTC)$"
)
_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}
MAINTENANCE_STATES = frozenset({"active", "completed", "canceled"})


def _epoch(value: dt.datetime) -> float:
    if value.tzinfo is None:  # IMDS times are UTC; a missing zone means UTC, not local time
        value = value.replace(tzinfo=dt.UTC)
    seconds = value.timestamp()
    if seconds < 0:
        raise ValueError("a time before 1970 is not a notice time")
    return seconds


def parse_aws_time(text: str) -> float:
    """``2017-09-18T08:22:00Z`` -> Unix seconds."""
    text = text.strip()
    if not _ISO.match(text):
        raise ValueError(f"not an ISO 8601 UTC time: {text[:60]!r}")
    try:
        return _epoch(dt.datetime.fromisoformat(text.replace("Z", "+00:00")))
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"not a valid time: {text[:60]!r} ({exc})") from None


def parse_maintenance_time(text: str) -> float:
    """``21 Jan 2019 09:00:43 GMT`` -> Unix seconds (no locale involved)."""
    match = _MAINT.match(text.strip())
    if not match:
        raise ValueError(f"not a maintenance time like '21 Jan 2019 09:00:43 GMT': {text[:60]!r}")
    day, month, year, hh, mm, ss, _zone = match.groups()
    try:
        when = dt.datetime(
            int(year), _MONTHS[month], int(day), int(hh), int(mm), int(ss), tzinfo=dt.UTC
        )
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"not a valid time: {text[:60]!r} ({exc})") from None
    return _epoch(when)


def _json_object(body: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not a JSON object")
    return data


@attrs.frozen
class InstanceAction:
    action: str
    time: float
    raw: dict[str, Any]


def parse_instance_action(body: str) -> InstanceAction:
    """``{"action": "terminate", "time": "2017-09-18T08:22:00Z"}``."""
    data = _json_object(body, "spot/instance-action")
    action, when = data.get("action"), data.get("time")
    if not isinstance(action, str) or action not in SPOT_ACTIONS:
        raise ValueError(f"spot/instance-action has no known action: {action!r}")
    if not isinstance(when, str):
        raise ValueError("spot/instance-action has no time")
    return InstanceAction(action=action, time=parse_aws_time(when), raw=data)


def parse_termination_time(body: str) -> float | None:
    """The legacy bare timestamp; anything that is not a time means no notice (AWS documents it)."""
    try:
        return parse_aws_time(body)
    except ValueError:
        return None


def parse_rebalance(body: str) -> float:
    """``{"noticeTime": "2020-10-27T08:22:00Z"}`` -> when EC2 emitted the recommendation."""
    data = _json_object(body, "events/recommendations/rebalance")
    when = data.get("noticeTime")
    if not isinstance(when, str):
        raise ValueError("events/recommendations/rebalance has no noticeTime")
    return parse_aws_time(when)


@attrs.frozen
class MaintenanceEvent:
    event_id: str
    code: str
    state: str
    not_before: float | None  # None when EC2 gave no readable time
    raw: dict[str, Any]


def parse_maintenance(body: str) -> tuple[list[MaintenanceEvent], list[str]]:
    """The scheduled-events array -> (events, problems with entries that were skipped).

    An entry without an ``EventId`` cannot be de-duplicated or withdrawn and is skipped; an
    active entry whose ``NotBefore`` is unreadable is kept (it is a real notice) with no time.
    """
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"events/maintenance/scheduled is not JSON: {exc}") from None
    if not isinstance(data, list):
        raise ValueError("events/maintenance/scheduled is not a JSON array")
    events: list[MaintenanceEvent] = []
    problems: list[str] = []
    for entry in data:
        if not isinstance(entry, dict):
            problems.append("an entry is not an object")
            continue
        event_id, code = entry.get("EventId"), entry.get("Code")
        state = entry.get("State", "active")
        if not isinstance(event_id, str) or not event_id:
            problems.append("an entry has no EventId")
            continue
        if not isinstance(state, str) or state.lower() not in MAINTENANCE_STATES:
            problems.append(f"entry {event_id[:40]!r} has an unknown State {state!r:.40}")
            continue
        not_before: float | None = None
        raw_time = entry.get("NotBefore")
        if isinstance(raw_time, str):
            try:
                not_before = parse_maintenance_time(raw_time)
            except ValueError as exc:
                problems.append(f"entry {event_id[:40]!r}: {exc}")
        events.append(
            MaintenanceEvent(
                event_id=event_id,
                code=code if isinstance(code, str) else "",
                state=state.lower(),
                not_before=not_before,
                raw=entry,
            )
        )
    return events, problems
