"""A job's checkpoints as the control plane knows them: what the store holds, what was recorded as
stored, and what was found damaged. One account for ``portal checkpoints``, ``portal status`` and
the choice ``portal resume`` makes.

The store alone cannot tell a damaged checkpoint from one cut short, nor know the job's newest:

* **complete**: its manifest authenticates (and, verified, every chunk does).
* **incomplete**: its upload was cut short before its manifest was written; never resumable, kept
  for inspection (garbage collection leaves it, see ``portal.storage.gc``).
* **damaged**: it was stored complete but its bytes are no longer what was written: a chunk or
  its manifest fails its check (found by a resume's download or ``portal checkpoints --verify``,
  and remembered: event ``checkpoint-damaged``), or its manifest is gone although the control
  plane recorded it stored. Never resumed, and named wherever checkpoints are listed.
* **missing**: recorded as stored, and gone from the store.

A resume takes the newest checkpoint that is complete and not damaged, and only when that is the
last one recorded (or newer): resuming from an earlier one does the work since it again, which is
the user's choice to make (``portal resume --use-earlier`` or ``--checkpoint ID``), never Portal's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from portal.core.domain import CheckpointRef, CheckpointState, Event
from portal.core.errors import PortalError

__all__ = [
    "DAMAGED_EVENT",
    "KEPT",
    "STORED_KINDS",
    "CheckpointView",
    "damaged_marks",
    "job_checkpoints",
    "kept_checkpoint",
    "mark_damaged",
    "recorded_checkpoints",
]

#: Events that say a checkpoint of the job was stored (their ``checkpoint`` field).
STORED_KINDS = frozenset({"uploaded", "suspended", "checkpoint-periodic"})
#: The ``upload-failed`` event's field naming a checkpoint file kept whole on the machine, not
#: stored (``portal.node.spool``): the next resume stores it first.
KEPT = "kept"
#: The event that marks a checkpoint damaged (``checkpoint``, ``reason``).
DAMAGED_EVENT = "checkpoint-damaged"

_CUT_SHORT = "its upload was cut short before its manifest was written; kept for inspection"


@attrs.frozen(kw_only=True)
class CheckpointView:
    """One checkpoint of a job: its state (``complete``, ``incomplete``, ``damaged``,
    ``missing``) and, for any but complete, why it cannot be resumed."""

    id: str
    created_at: float
    bytes: int
    state: str
    why: str = ""

    @property
    def resumable(self) -> bool:
        return self.state == "complete"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "created_at": self.created_at,
            "bytes": self.bytes,
            "state": self.state,
            "resumable": self.resumable,
            "why": self.why,
        }


def recorded_checkpoints(events: Iterable[Event]) -> dict[str, float]:
    """The checkpoints the control plane recorded as stored, oldest first, with when."""
    recorded: dict[str, float] = {}
    for event in events:
        ckpt = event.data.get("checkpoint")
        if event.kind in STORED_KINDS and isinstance(ckpt, str) and ckpt:
            recorded.setdefault(ckpt, event.at)
    return recorded


def kept_checkpoint(events: Iterable[Event]) -> tuple[Path, int] | None:
    """The checkpoint file (and the attempt that wrote it) the job's last failed upload kept,
    when no checkpoint was stored after it and the file is still there."""
    kept: tuple[Path, int] | None = None
    for event in events:
        path = event.data.get(KEPT)
        if event.kind == "upload-failed" and isinstance(path, str) and path:
            kept = (Path(path), int(event.data.get("attempt") or 0))
        elif event.kind in STORED_KINDS:
            kept = None
    if kept is None or not kept[0].is_file():
        return None
    return kept


def damaged_marks(events: Iterable[Event]) -> dict[str, str]:
    """Checkpoints found damaged, with why (the latest finding)."""
    marks: dict[str, str] = {}
    for event in events:
        ckpt = event.data.get("checkpoint")
        if event.kind == DAMAGED_EVENT and isinstance(ckpt, str):
            marks[ckpt] = str(event.data.get("reason") or "its bytes failed their check")
    return marks


def mark_damaged(
    plane: Any,
    job_id: str,
    checkpoint_id: str,
    reason: str,
    *,
    marks: dict[str, str] | None = None,
) -> None:
    """Remember that ``checkpoint_id`` is damaged (once per finding: the same reason again is
    not a new event), so that no resume takes it again and every listing names it. ``marks``:
    the job's :func:`damaged_marks`, when the caller has read its events already."""
    if marks is None:
        marks = damaged_marks(e for _, e in plane.store.events(job_id))
    if marks.get(checkpoint_id) == reason:
        return
    marks[checkpoint_id] = reason
    plane.record(
        job_id,
        DAMAGED_EVENT,
        f"checkpoint {checkpoint_id} is damaged and will not be resumed: {reason}",
        checkpoint=checkpoint_id,
        reason=reason,
    )


def _why_broken(store: Any, job_id: str, checkpoint_id: str, *, verify: bool) -> str | None:
    """Why the checkpoint cannot be read whole (None: it can): its manifest, and with
    ``verify`` every chunk, checked."""
    try:
        if verify:
            store.open_reader(job_id, checkpoint_id).verify()
        else:
            store.manifest(job_id, checkpoint_id)
    except PortalError as exc:
        if exc.code in ("CHECKPOINT_CORRUPT", "WRONG_KEY", "CHECKPOINT_INCOMPLETE"):
            return str(exc)
        raise
    return None


def job_checkpoints(
    plane: Any,
    store: Any,
    job_id: str,
    *,
    verify: bool = False,
    listed: Sequence[CheckpointRef] | None = None,
    events: Sequence[Event] | None = None,
) -> list[CheckpointView]:
    """Every checkpoint of the job, oldest first, in the states above. ``verify`` reads every
    chunk of each complete one (slow: the whole checkpoint) and marks what fails damaged.
    ``listed`` and ``events``: the store's listing and the job's events, when the caller has
    them already."""
    if events is None:
        events = [e for _, e in plane.store.events(job_id)]
    recorded = recorded_checkpoints(events)
    marks = damaged_marks(events)
    found = dict(marks)  # what this listing marks, so that each finding is recorded once
    views: list[CheckpointView] = []
    seen: set[str] = set()
    for ref in store.list(job_id) if listed is None else listed:
        ckpt = ref.checkpoint_id
        seen.add(ckpt)
        created = ref.created_at or recorded.get(ckpt, 0.0)
        if ref.state is CheckpointState.INCOMPLETE:
            if ckpt in recorded:  # stored whole once: its manifest went afterwards
                gone = "its manifest is gone from the store, though it was stored complete"
                mark_damaged(plane, job_id, ckpt, gone, marks=found)
                views.append(
                    CheckpointView(id=ckpt, created_at=created, bytes=0, state="damaged", why=gone)
                )
            else:
                views.append(
                    CheckpointView(
                        id=ckpt, created_at=created, bytes=0, state="incomplete", why=_CUT_SHORT
                    )
                )
            continue
        broken = None
        if ref.state is CheckpointState.CORRUPT or verify:
            broken = _why_broken(store, job_id, ckpt, verify=verify)
        if broken is not None:
            mark_damaged(plane, job_id, ckpt, broken, marks=found)
        reason = broken or marks.get(ckpt)
        views.append(
            CheckpointView(
                id=ckpt,
                created_at=created,
                bytes=ref.size_bytes,
                state="damaged" if reason else "complete",
                why=reason or "",
            )
        )
    for ckpt, at in recorded.items():
        if ckpt not in seen:
            views.append(
                CheckpointView(
                    id=ckpt,
                    created_at=at,
                    bytes=0,
                    state="missing",
                    why=f"recorded as stored, and gone from the store {store.url}",
                )
            )
    views.sort(key=lambda v: (v.created_at, v.id))
    return views
