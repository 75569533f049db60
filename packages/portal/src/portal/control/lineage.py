"""Which attempts' work a job kept: the basis of ``portal logs`` showing output once.

A resume continues from a checkpoint some earlier attempt made. Every attempt between that one
and the resume did work that is done again (a node that died mid-upload, say): its output would
appear twice, so readers leave it out and say why.
"""

from __future__ import annotations

from portal.control.plane import ControlPlane
from portal.core.domain import Job

__all__ = ["superseded_attempts"]


def superseded_attempts(plane: ControlPlane, job: Job) -> dict[int, str]:
    """``{attempt: why}`` for each attempt whose work a later attempt redid."""
    made_by: dict[str, int] = {}
    for _, event in plane.store.events(job.id):
        if event.kind == "suspended" and "attempt" in event.data and "checkpoint" in event.data:
            made_by[str(event.data["checkpoint"])] = int(event.data["attempt"])
    superseded: dict[int, str] = {}
    for attempt in plane.store.attempts(job.id):
        origin = made_by.get(attempt.resumed_from or "")
        if origin is None:
            continue
        for number in range(origin + 1, attempt.number):
            superseded.setdefault(
                number,
                f"attempt {number}'s output is left out: its work was done again by attempt "
                f"{attempt.number}, which resumed from checkpoint {attempt.resumed_from} of "
                f"attempt {origin}",
            )
    return superseded
