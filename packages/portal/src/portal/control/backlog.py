"""The node's backlog as the control plane takes it: one entry per report, in order.

A node that cannot reach the control plane keeps its reports (events with the time they happened,
state changes, the end of its attempt) in ``backlog.jsonl`` in the attempt's directory
(``portal.node.journal``) and delivers them when the control plane answers again. A node killed
while offline leaves the file behind; whoever next reads the job replays it (:func:`replay_file`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from portal.control.plane import ControlPlane
from portal.core.domain import AttemptState, Event, JobState

__all__ = ["BACKLOG_NAME", "apply_entry", "replay_file"]

BACKLOG_NAME = "backlog.jsonl"


def apply_entry(plane: ControlPlane, job_id: str, entry: dict[str, Any]) -> None:
    """Record one backlog entry in the control plane (raises if it cannot be reached)."""
    op = entry["op"]
    if op == "event":
        plane.append(
            Event(
                job_id=job_id,
                at=float(entry["at"]),
                kind=str(entry["kind"]),
                message=str(entry["message"]),
                data=dict(entry["data"]),
                id=entry.get("id"),  # delivered again after a timeout: recorded once
            )
        )
    elif op == "state":
        plane.set_state(job_id, JobState(entry["state"]))
    elif op == "heard":
        plane.store.heard(job_id, float(entry["at"]))
    elif op == "end":
        plane.store.end_attempt(
            job_id,
            int(entry["attempt"]),
            state=AttemptState(entry["state"]),
            at=float(entry["at"]),
            exit_code=entry["exit_code"],
        )
        if entry.get("job_state"):  # one entry, so that the two never part
            plane.set_state(job_id, JobState(entry["job_state"]))
    else:
        raise ValueError(f"unknown backlog entry {op!r} in the node's backlog")


def replay_file(plane: ControlPlane, job_id: str, path: Path) -> int:
    """Record the backlog a node left behind (it was killed while offline); returns how many
    entries were recorded. The file is removed once all are."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return 0
    entries = [json.loads(line) for line in lines if line.strip()]
    for done, entry in enumerate(entries):
        try:
            apply_entry(plane, job_id, entry)
        except Exception:
            remaining = entries[done:]
            path.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in remaining))
            raise
    path.unlink(missing_ok=True)
    return len(entries)
