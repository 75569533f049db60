"""What a job's checkpoint check says now, derived from its events (``portal status``'s
``carry``): the node records a warning per machine and problem, ``blocked`` when no pause point
came in time, and an all-clear once a later check passes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from portal.core.domain import Event
from portal.core.settings import Settings

__all__ = ["CARRY_EVENTS", "carry_state", "probe_settings_for_job", "problem_key"]

#: Event kinds the node records for the checkpoint check.
CARRY_EVENTS = frozenset(
    {"carry-warning", "carry-ok", "carry-blocked", "carry-unblocked", "carry-partial"}
)


def problem_key(problem: dict[str, Any]) -> str:
    """A problem's identity across checks (where it was seen may move from line to line)."""
    return f"{problem.get('name')}|{problem.get('type_name')}|{problem.get('reason')}"


def carry_state(events: Iterable[Event]) -> dict[str, Any]:
    """``{"ok", "problems", "blocked", "warning", "checked_at"}``.

    ``ok`` is None until a check has finished, then true while no problem is outstanding and
    the job is not blocked. ``warning`` is the latest outstanding warning's sentence.
    """
    problems: dict[str, tuple[dict[str, Any], str]] = {}
    blocked: dict[str, Any] | None = None
    checked_at: float | None = None
    for event in events:
        if event.kind not in CARRY_EVENTS:
            continue
        if event.kind == "carry-warning":
            problem = dict(event.data.get("problem", {}))
            problems[problem_key(problem)] = (problem, event.message)
            checked_at = event.at
            blocked = None
        elif event.kind == "carry-ok":
            problems.clear()
            blocked = None
            checked_at = event.at
        elif event.kind == "carry-blocked":
            blocked = {
                "since": event.at,
                "after_s": event.data.get("after_s"),
                "reasons": list(event.data.get("reasons", [])),
                "message": event.message,
            }
        elif event.kind == "carry-unblocked":
            blocked = None
    warning = None
    if blocked is not None:
        warning = str(blocked["message"])
    elif problems:
        warning = list(problems.values())[-1][1]
    ok = None if checked_at is None and blocked is None else not problems and blocked is None
    return {
        "ok": ok,
        "problems": [p for p, _ in problems.values()],
        "blocked": blocked,
        "warning": warning,
        "checked_at": checked_at,
    }


def probe_settings_for_job(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """``settings`` with the job's own ``PORTAL_CAPTURE_PROBE`` and
    ``PORTAL_CAPTURE_PROBE_EVERY_S`` applied (a bad value of the job's leaves the setting)."""
    with contextlib.suppress(Exception):
        own = Settings.load(environ=environ)
        settings = attrs.evolve(
            settings,
            capture_probe=own.capture_probe
            if environ.get("PORTAL_CAPTURE_PROBE")
            else settings.capture_probe,
            capture_probe_every_s=own.capture_probe_every_s
            if environ.get("PORTAL_CAPTURE_PROBE_EVERY_S")
            else settings.capture_probe_every_s,
        )
    return settings
