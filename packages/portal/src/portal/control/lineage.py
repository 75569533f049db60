"""Which attempts' work a job kept: the basis of ``portal logs`` showing output once.

A resume continues from a checkpoint some earlier attempt made. Every attempt between that one
and the resume did work that is done again (a node that died mid-upload, say): its output would
appear twice, so readers leave it out and say why. A resume from a *periodic* checkpoint (the
attempt that made it was lost without notice) redoes only what that attempt did after its safe
point: its output is shown up to where it stood there (the sizes the runtime reported with the
checkpoint), and the rest is left out, said once.
"""

from __future__ import annotations

import attrs

from portal.control.plane import ControlPlane
from portal.core.domain import Job

__all__ = ["OutputCut", "output_cuts", "superseded_attempts"]


def superseded_attempts(plane: ControlPlane, job: Job) -> dict[int, str]:
    """``{attempt: why}`` for each attempt whose work a later attempt redid: every attempt
    after the one that made the checkpoint a resume used (on a notice, or periodically)."""
    made_by: dict[str, int] = {}
    for _, event in plane.store.events(job.id):
        if (
            event.kind in ("suspended", "checkpoint-periodic")
            and "attempt" in event.data
            and "checkpoint" in event.data
        ):
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


@attrs.frozen(kw_only=True)
class OutputCut:
    """Where an attempt's output stops being its kept work: byte sizes of its stdout and stderr."""

    stdout_bytes: int
    stderr_bytes: int
    why: str


def output_cuts(plane: ControlPlane, job: Job) -> dict[int, OutputCut]:
    """``{attempt: cut}`` for each attempt whose work after a periodic checkpoint of its own was
    done again by a later attempt resumed from that checkpoint."""
    periodic: dict[str, tuple[int, int, int]] = {}
    for _, event in plane.store.events(job.id):
        data = event.data
        if event.kind == "checkpoint-periodic" and data.get("stdout_bytes") is not None:
            periodic[str(data.get("checkpoint"))] = (
                int(data.get("attempt", 0)),
                int(data["stdout_bytes"]),
                int(data.get("stderr_bytes") or 0),
            )
        elif event.kind == "restoring" and data.get("stdout_bytes") is not None:
            # The checkpoint's own summary, read by the node that resumed it: the only record
            # when the attempt that made it vanished before reporting it.
            periodic.setdefault(
                str(data.get("checkpoint")),
                (
                    int(data.get("origin_attempt") or 0),
                    int(data["stdout_bytes"]),
                    int(data.get("stderr_bytes") or 0),
                ),
            )
    cuts: dict[int, OutputCut] = {}
    for attempt in plane.store.attempts(job.id):
        made = periodic.get(attempt.resumed_from or "")
        if made is None or made[0] >= attempt.number:
            continue
        origin, out, err = made
        cuts.setdefault(
            origin,
            OutputCut(
                stdout_bytes=out,
                stderr_bytes=err,
                why=f"attempt {origin}'s output after its periodic checkpoint "
                f"{attempt.resumed_from} is left out: attempt {attempt.number} resumed from that "
                "checkpoint and did that work again",
            ),
        )
    return cuts
