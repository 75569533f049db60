"""What the run page's charts draw, read from a job's attempts and events alone.

Only the control plane's records, never the checkpoint store: a job whose key is on another
machine (whose checkpoints this console cannot open) still gets every chart. Each figure is the
one the node reported when it happened (a checkpoint's bytes as stored, its upload's seconds,
the check's walk, a placement decision's bound), so the charts and the timeline agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from portal.control.checkpoints import STORED_KINDS
from portal.core.domain import Attempt, Event

__all__ = [
    "AttemptSpan",
    "BoundMark",
    "CheckpointPoint",
    "JobFacts",
    "NoticeMark",
    "StateSample",
    "job_facts",
]

#: Placement events about offers the job did not take: their bound is another machine's.
_OTHER_OFFERS = frozenset({"placement.skipped"})


@attrs.frozen(kw_only=True)
class CheckpointPoint:
    """One stored checkpoint: its size as stored and, when reported, its upload's seconds."""

    id: str
    at: float
    bytes: int
    upload_s: float | None
    attempt: int | None
    periodic: bool


@attrs.frozen(kw_only=True)
class AttemptSpan:
    """One attempt on one machine, from its start to its end (or now, while it runs)."""

    number: int
    machine: str
    start: float
    end: float
    state: str


@attrs.frozen(kw_only=True)
class NoticeMark:
    """A notice, on the machine of the attempt it reached."""

    at: float
    machine: str
    notice_s: float | None


@attrs.frozen(kw_only=True)
class StateSample:
    """The job's state size as one figure measured it (``figure`` says which)."""

    at: float
    bytes: int
    figure: str


@attrs.frozen(kw_only=True)
class BoundMark:
    """The largest state a spot machine's notice can save, as a placement decision computed."""

    at: float
    bytes: int
    notice_s: float | None
    kind: str


@attrs.frozen(kw_only=True)
class JobFacts:
    """Everything the charts draw, with the job's submission time as their origin."""

    origin: float
    now: float
    checkpoints: tuple[CheckpointPoint, ...]
    attempts: tuple[AttemptSpan, ...]
    notices: tuple[NoticeMark, ...]
    states: tuple[StateSample, ...]
    bounds: tuple[BoundMark, ...]

    @property
    def machines(self) -> list[str]:
        """The machines the job ran on, in the order it first reached them (the strip's rows)."""
        return list(dict.fromkeys(span.machine for span in self.attempts))


def job_facts(
    attempts: Sequence[Attempt], events: Sequence[Event], *, origin: float, now: float
) -> JobFacts:
    """The charts' facts from a job's records (``origin``: when it was submitted)."""
    spans = tuple(
        AttemptSpan(
            number=a.number,
            machine=a.machine,
            start=a.started_at,
            end=a.ended_at if a.ended_at is not None else max(now, a.started_at),
            state=str(a.state),
        )
        for a in attempts
    )
    checkpoints = _checkpoints(events)
    states = [
        StateSample(at=c.at, bytes=c.bytes, figure="checkpoint as stored") for c in checkpoints
    ]
    bounds: list[BoundMark] = []
    notices: list[NoticeMark] = []
    for event in events:
        data = event.data
        if event.kind == "notice":
            notices.append(
                NoticeMark(
                    at=event.at,
                    machine=_machine_at(spans, event.at),
                    notice_s=_number(data.get("notice_s")),
                )
            )
        elif event.kind == "carry-ok" and _whole(data.get("checked_bytes")):
            states.append(
                StateSample(at=event.at, bytes=int(data["checked_bytes"]), figure="check's walk")
            )
        elif event.kind == "carry-rehearsal" and _whole(data.get("bytes")):
            states.append(StateSample(at=event.at, bytes=int(data["bytes"]), figure="rehearsal"))
        if event.kind in _OTHER_OFFERS:
            continue
        if _whole(data.get("state_bytes")):
            states.append(
                StateSample(at=event.at, bytes=int(data["state_bytes"]), figure="placement")
            )
        bound = _number(data.get("bound_bytes"))
        if bound is not None and (not bounds or bounds[-1].bytes != int(bound)):
            # A level, marked again only when it changes (several decisions weigh one bound).
            bounds.append(
                BoundMark(
                    at=event.at,
                    bytes=int(bound),
                    notice_s=_number(data.get("notice_s")),
                    kind=event.kind,
                )
            )
    return JobFacts(
        origin=origin,
        now=now,
        checkpoints=checkpoints,
        attempts=spans,
        notices=tuple(notices),
        states=tuple(sorted(states, key=lambda s: s.at)),
        bounds=tuple(bounds),
    )


def _checkpoints(events: Sequence[Event]) -> tuple[CheckpointPoint, ...]:
    """Each checkpoint once, at its first storing event, with the figures of all of them: a
    notice's checkpoint is told as ``uploaded`` (its seconds) then ``suspended`` (its bytes,
    its attempt); a periodic one carries all in ``checkpoint-periodic``."""
    found: dict[str, dict[str, Any]] = {}
    for event in events:
        data = event.data
        ckpt = data.get("checkpoint")
        if event.kind not in STORED_KINDS or not isinstance(ckpt, str) or not ckpt:
            continue
        point = found.setdefault(ckpt, {"at": event.at, "periodic": False})
        size = data.get("stored_bytes", data.get("bytes"))
        seconds = data.get("upload_seconds", data.get("seconds"))
        for name, value in (
            ("bytes", size),
            ("upload_s", seconds),
            ("attempt", data.get("attempt")),
        ):
            if name not in point and _whole(value):
                point[name] = value
        point["periodic"] = point["periodic"] or event.kind == "checkpoint-periodic"
    return tuple(
        CheckpointPoint(
            id=ckpt,
            at=point["at"],
            bytes=int(point.get("bytes", 0)),
            upload_s=_number(point.get("upload_s")),
            attempt=int(point["attempt"]) if "attempt" in point else None,
            periodic=point["periodic"],
        )
        for ckpt, point in found.items()
    )


def _machine_at(spans: Sequence[AttemptSpan], at: float) -> str:
    """The machine of the latest attempt started by ``at`` (a notice before any: the first)."""
    machine = spans[0].machine if spans else "none yet"
    for span in spans:
        if span.start <= at:
            machine = span.machine
    return machine


def _whole(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> float | None:
    return float(value) if _whole(value) else None
